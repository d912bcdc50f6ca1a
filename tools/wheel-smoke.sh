#!/usr/bin/env bash
# Smoke test of an installed nsys2prv (a wheel): the engine imported is the installed one,
# the shipped sample translates and the trace passes the strict checker. Run by cibuildwheel
# (pyproject.toml: test-command, from a folder holding examples/) and by tools/wheel-check.sh.
#   tools/wheel-smoke.sh [SAMPLE.sqlite [OUTPUT_DIR]]
set -euo pipefail
sample=${1:-examples/sample.sqlite}
out=${2:-$(mktemp -d)}
python -c "import nsys2prv, nsys2prv.engine._engine as e
assert 'site-packages' in e.__file__, e.__file__
print('nsys2prv', nsys2prv.__version__, 'engine', e.__file__)"
nsys2prv "$sample" "$out/sample.prv"
nsys2prv check "$out/sample.prv"
