from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the developer tools the tests use (tools/paramedir.py: paramedir's runner and its stored
# outputs; tools/scrub.py), which are not part of the installed package
sys.path.insert(0, str(ROOT / "tools"))
CORPUS = Path(os.environ.get("NSYS2PRV_CORPUS", ROOT.parent / "shared" / "corpus"))


def corpus_files(*subdirs: str) -> list[Path]:
    out = []
    for sub in subdirs or ("sqlite", "exported", "exported2023"):
        d = CORPUS / sub
        if d.is_dir():
            out += sorted(d.glob("*.sqlite"))
    return out


def corpus_cases(files: list[Path]) -> dict:
    """Fixture params: one case per corpus file, or a single case that skips when there is
    none (so the skip and its reason show in the report)."""
    return {"params": files or [None],
            "ids": [f"{p.parent.name}/{p.name}" for p in files] or ["no-corpus"]}


def translated_once(db: Path, tmp_path_factory) -> tuple[object, Path]:
    """`nsys2prv.translate(db)` with its defaults, once in a test run (its xdist workers
    included): (result, .prv), kept under the run's temporary folder for the modules that
    ask for it next. Read-only for callers: the corpus' exports were translated again and
    again by module after module (the 41 MB trace ~6 s each time)."""
    import fcntl
    import pickle
    import shutil

    import nsys2prv

    base = tmp_path_factory.getbasetemp()
    cache = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "translated"
    cache.mkdir(exist_ok=True)
    key = f"{db.parent.name}-{db.name}"
    done = cache / key
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker translates, the others wait for it
        if not done.exists():
            work = cache / f"{key}.work"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            result = nsys2prv.translate(db, work / (db.name.split(".")[0] + ".prv"))
            result.output = done / result.output.name
            (work / "result.pickle").write_bytes(pickle.dumps(result))
            work.rename(done)
    result = pickle.loads((done / "result.pickle").read_bytes())
    return result, result.output


def translate_case(request, tmp_path_factory, missing: str) -> tuple[Path, object, Path]:
    """The corpus file of a `corpus_cases` fixture translated (`translated_once`):
    (database, result, .prv); skips with `missing` when there is no such file."""
    if request.param is None:
        pytest.skip(missing)
    db: Path = request.param
    return (db, *translated_once(db, tmp_path_factory))


def need_corpus() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"real-export corpus not found at {CORPUS} (set NSYS2PRV_CORPUS)")


def need_exports(*paths: Path) -> None:
    """Skip, naming it, when one of these corpus exports is absent."""
    for p in paths:
        if not p.exists():
            pytest.skip(f"corpus export {p.name} not found under {CORPUS} "
                        f"(set NSYS2PRV_CORPUS)")


@pytest.hookimpl(optionalhook=True)  # where pytest-xdist is not installed (tools/aarch64.sh)
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (pyproject's addopts): one worker per core this process may run on, not
    pytest-xdist's count of physical cores; PYTEST_XDIST_AUTO_NUM_WORKERS still wins."""
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    return usable_cores()


def usable_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


@pytest.fixture(scope="session")
def corpus() -> Path:
    need_corpus()
    return CORPUS
