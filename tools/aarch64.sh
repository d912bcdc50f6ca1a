#!/usr/bin/env bash
# The engine on aarch64 (Grace Hopper, Grace Blackwell), from an x86_64 machine:
#  1. cross-builds the engine's C sources (setup.py's ENGINE) with Debian's gcc-aarch64-linux-gnu,
#     setup.py's flags and -Werror, against Debian's arm64 Python 3.11 headers;
#  2. under QEMU user-mode emulation, with Debian's arm64 CPython 3.11 and PyPI's manylinux
#     aarch64 wheels (numpy, polars, pytest, hypothesis), translates the shipped sample and
#     the recorded MPI runs of tests/data (each, and the four 2023.4 ranks merged) and compares
#     every .prv/.pcf/.row with benchmarks/identity-hashes-current.json, the x86_64 bytes
#     (RecordStore, IntervalStore, run files, Merger), then reads each trace back with the
#     engine's PrvScanner (paraver/read.py) and checks it against the records it came from;
#  3. with --tests, also runs the engine-level tests under QEMU: tests/test_algorithms.py
#     (run files, k-way merge and tiling against plain sorts), tests/test_analysis.py
#     (PrvScanner's numbers against Paraver's), tests/test_sample.py, tests/test_check.py.
#
#   tools/aarch64.sh [--install] [--tests]
#     --install  apt-get the cross compiler and QEMU where missing (root, Debian/Ubuntu)
#
# Exit status: 0 passed; 77 skipped (no cross compiler, QEMU or arm64 packages to be had:
# the reason is printed); anything else failed. Work folder: $AARCH64_WORK (default
# build/aarch64 in the checkout); downloads are kept there for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${AARCH64_WORK:-$ROOT/build/aarch64}
PYV=3.11  # Debian 12's Python: its arm64 interpreter and headers come from Debian's archive
install=0 tests=0
for a in "$@"; do
    case $a in
        --install) install=1 ;;
        --tests) tests=1 ;;
        *) echo "usage: tools/aarch64.sh [--install] [--tests]" >&2; exit 2 ;;
    esac
done
skip() { echo "aarch64: skipped: $*"; exit 77; }
say() { echo "aarch64: $*"; }
start=$SECONDS

# -- tools ------------------------------------------------------------------------------------
QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
if ! command -v aarch64-linux-gnu-gcc > /dev/null || [ -z "$QEMU" ]; then
    [ $install = 1 ] || skip "needs aarch64-linux-gnu-gcc and qemu-aarch64 (--install gets them)"
    { [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; } ||
        skip "--install needs root and apt-get"
    say "installing gcc-aarch64-linux-gnu and qemu-user-static"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        gcc-aarch64-linux-gnu qemu-user-static; } > "$ROOT/build-aarch64-apt.log" 2>&1 \
        || skip "apt-get install failed (see build-aarch64-apt.log)"
    rm -f "$ROOT/build-aarch64-apt.log"
    QEMU=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
fi

# -- arm64 sysroot: Debian's Python and the libraries it loads ---------------------------------
DEBS=(python$PYV-minimal libpython$PYV-minimal libpython$PYV-stdlib libpython$PYV-dev
      libc6 libexpat1 zlib1g libffi8 libssl3 libsqlite3-0 libbz2-1.0 liblzma5 libuuid1
      libncursesw6 libtinfo6 libreadline8 libcrypt1 libgcc-s1 libstdc++6)
SYSROOT=$WORK/sysroot
if [ ! -x "$SYSROOT/usr/bin/python$PYV" ]; then
    command -v apt-get > /dev/null || skip "needs apt-get to download Debian's arm64 Python"
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        [ "$(id -u)" = 0 ] || skip "needs 'dpkg --add-architecture arm64' (root)"
        dpkg --add-architecture arm64
        apt-get update -q > /dev/null 2>&1 || skip "apt-get update failed"
    fi
    mkdir -p "$WORK/debs"
    (cd "$WORK/debs" && apt-get download "${DEBS[@]/%/:arm64}" > /dev/null 2>&1) || {
        apt-get update -q > /dev/null 2>&1 &&
            (cd "$WORK/debs" && apt-get download "${DEBS[@]/%/:arm64}" > /dev/null 2>&1)
    } || skip "could not download Debian's arm64 packages"
    rm -rf "$SYSROOT" && mkdir -p "$SYSROOT"
    for d in "$WORK"/debs/*.deb; do dpkg -x "$d" "$SYSROOT"; done
fi
export QEMU_LD_PREFIX=$SYSROOT
PY=("$QEMU" "$SYSROOT/usr/bin/python$PYV")
SUFFIX=$("${PY[@]}" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")

# -- arm64 wheels from PyPI (the versions of the checkout's .venv where there is one) ----------
SITE=$WORK/site
WANT=(numpy polars pytest hypothesis tqdm cxxfilt)
if [ -x .venv/bin/python ]; then
    mapfile -t WANT < <(.venv/bin/python -m pip freeze 2>/dev/null | grep -iE \
        "^(numpy|polars|polars-runtime-32|pytest|hypothesis|tqdm|cxxfilt)==" || true)
fi
if [ ! -f "$SITE/.wanted" ] || [ "$(cat "$SITE/.wanted")" != "${WANT[*]}" ]; then
    rm -rf "$SITE"
    python3 -m pip install -q --target "$SITE" --only-binary=:all: --implementation cp \
        --python-version $PYV --platform manylinux_2_28_aarch64 \
        --platform manylinux2014_aarch64 --platform manylinux_2_17_aarch64 \
        "${WANT[@]}" > "$WORK/pip.log" 2>&1 || skip "no aarch64 wheels ($WORK/pip.log)"
    echo "${WANT[*]}" > "$SITE/.wanted"
fi

# -- cross build: setup.py's sources and flags, warnings as errors ------------------------------
ENGINE_OF_SETUP="
import importlib.util as u
s = u.spec_from_file_location('s', 'setup.py'); m = u.module_from_spec(s)
s.loader.exec_module(m)"
mapfile -t FLAGS < <(python3 -c "$ENGINE_OF_SETUP
print(*m.ENGINE.extra_compile_args, sep='\n')")
mapfile -t SOURCES < <(python3 -c "$ENGINE_OF_SETUP
print(*m.ENGINE.sources, sep='\n')")
TREE=$WORK/tree
rm -rf "$TREE" && mkdir -p "$TREE"
cp -r nsys2prv tests examples benchmarks "$TREE"/
find "$TREE" \( -name "*.so" -o -name __pycache__ \) -prune -exec rm -rf {} +
aarch64-linux-gnu-gcc "${FLAGS[@]}" -Werror -fPIC -shared -pthread \
    -I"$SYSROOT/usr/include/python$PYV" -I"$SYSROOT/usr/include" \
    "${SOURCES[@]}" \
    -o "$TREE/nsys2prv/engine/_engine$SUFFIX"
say "built _engine$SUFFIX with ${FLAGS[*]} -Werror"

# -- under QEMU: the x86_64 bytes, and the scanner reads them back ------------------------------
export PYTHONPATH=$SITE:$TREE PYTHONDONTWRITEBYTECODE=1 NSYS2PRV_NO_SUPERVISOR=1
cd "$TREE"
"${PY[@]}" - <<'PY'
import hashlib, importlib.util, json, platform, sys, tempfile
from pathlib import Path

import nsys2prv
from nsys2prv.paraver.read import event_types, read_trace

assert platform.machine() == "aarch64", platform.machine()
spec = importlib.util.spec_from_file_location("identity", "benchmarks/identity.py")
identity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(identity)
want = json.loads(Path("benchmarks/identity-hashes-current.json").read_text())
cases = [(label, files) for label, files in identity.inputs()
         if label == "sample" or label.startswith("recorded/")]
assert len(cases) >= 7, cases
with tempfile.TemporaryDirectory() as tmp:
    for n, (label, files) in enumerate(cases):
        out = Path(tmp) / f"t{n}.prv"
        result = nsys2prv.translate(files, out)
        got = {ext: hashlib.sha256(out.with_suffix("." + ext).read_bytes()).hexdigest()
               for ext in ("prv", "pcf", "row")}
        diff = [ext for ext in got if got[ext] != want[label][ext]]
        assert not diff, f"{label}: {', '.join(diff)} differ from the x86_64 bytes"
        # the scanner against a plain parse of the text
        trace = read_trace(out, event_types(out), state_rows="all", comms=True)
        fields = [line.split(":") for line in out.read_text().splitlines()[1:]
                  if line[:1] in "123"]
        states = [int(f[6]) - int(f[5]) for f in fields if f[0] == "1"]
        values = [int(v) for f in fields if f[0] == "2" for v in f[7::2]]
        sizes = [int(f[13]) for f in fields if f[0] == "3"]
        scanned = (trace.states.height, int((trace.states["end"] - trace.states["begin"]).sum()),
                   trace.events.height, int(trace.events["value"].sum()),
                   trace.comms.height, int(trace.comms["size"].sum()))
        parsed = (len(states), sum(states), len(values), sum(values), len(sizes), sum(sizes))
        assert scanned == parsed, (label, scanned, parsed)
        print(f"aarch64: {label}: identical to x86_64; scanned back {len(states)} states, "
              f"{len(values)} events, {len(sizes)} communications")
PY
if [ $tests = 1 ]; then
    "${PY[@]}" -m pytest -q -p no:cacheprovider tests/test_algorithms.py tests/test_analysis.py \
        tests/test_sample.py tests/test_check.py
fi
say "OK in $((SECONDS - start)) s"
