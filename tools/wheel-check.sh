#!/usr/bin/env bash
# Proves that a wheel needs no compiler: builds the sdist and wheel of this checkout,
# installs the wheel (and its dependencies, wheels only) in a fresh venv where no C compiler
# can be found (CC=false, PATH = the venv alone), translates the shipped sample there and
# compares the trace with its recorded hashes (benchmarks/identity-hashes-current.json).
# Run by .ci/run.
#   tools/wheel-check.sh [PYTHON]        (default python3; builds with PyPA's build)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/nsys2prv-wheel-XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$SECONDS
# as a release does: the sdist, then the wheel from the sdist (so nothing stale from this
# tree's own builds goes in, and the sdist is shown to hold what a build needs)
"$py" -m venv "$work/build-venv"
"$work/build-venv/bin/pip" install -q build 2>&1 | grep -v "^WARNING: Location" || true
"$work/build-venv/bin/python" -m build -o "$work/dist" . > "$work/build.log" 2>&1 \
    || { tail -20 "$work/build.log" >&2; exit 1; }
wheel=$(ls "$work"/dist/nsys2prv-*.whl)
echo "wheel-check: built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) from the sdist"
"$py" -m venv "$work/venv"
nocc() { PATH="$work/venv/bin" CC=false CXX=false "$@"; }
if nocc "$BASH" -c 'command -v gcc || command -v cc || command -v c++'; then
    echo "wheel-check: a compiler is still reachable" >&2; exit 1
fi
nocc "$work/venv/bin/pip" install -q --only-binary :all: "$wheel" 2>&1 \
    | grep -v "^WARNING: Location" || true
mkdir "$work/out"
(cd "$work" && nocc "$BASH" "$OLDPWD/tools/wheel-smoke.sh" "$OLDPWD/examples/sample.sqlite" out)
"$py" - "$work/out" <<'PY'
import hashlib, json, sys
from pathlib import Path
want = json.loads(Path("benchmarks/identity-hashes-current.json").read_text())["sample"]
for ext in ("prv", "pcf", "row"):
    got = hashlib.sha256((Path(sys.argv[1]) / f"sample.{ext}").read_bytes()).hexdigest()
    assert got == want[ext], f"sample.{ext} differs from benchmarks/identity-hashes-current.json"
print("wheel-check: the trace is byte-identical to the recorded one (identity hashes)")
PY
echo "wheel-check: OK in $((SECONDS - start)) s"
