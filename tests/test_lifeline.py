"""A killed run stops (issue 37): `kill -9` of the supervising `nsys2prv` process, or SIGHUP
(its terminal closed), at several points of a large translation, of a merge of two reports
(worker processes) and of `diff --trace`: 3 s later no process of the run is left, no
temporary file is left (output folder and TMPDIR), and the trace of that name is the old
one, byte for byte (nsys2prv/lifeline.py, nsys2prv/supervise.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT

import nsys2prv
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export

TAG = "NSYS2PRV_LIFELINE_TEST"
GRACE = 3.0  # seconds after the kill by which every process of the run is gone


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> dict[str, Path]:
    """Two copies of a 600k-activity export (36 MB each: `diff` runs its sides in two
    worker processes) and the old trace the runs must leave as it is."""
    d = tmp_path_factory.mktemp("big")
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "generate.py"), str(d / "a.sqlite"),
                    "--kernels", "300000", "--api", "300000", "--nvtx", "20000"],
                   check=True, capture_output=True, timeout=300)
    shutil.copy(d / "a.sqlite", d / "b.sqlite")  # another file: not refused as the same input
    old = d / "old"
    old.mkdir()
    nsys2prv.translate(write_export(d / "small.sqlite", sample_spec()), old / "t.prv")
    return {"a": d / "a.sqlite", "b": d / "b.sqlite", "old": old}


def _ours(tag: str) -> list[int]:
    """Processes whose environment holds the run's tag (the supervisor, the command, its
    workers and multiprocessing's resource tracker all inherit it)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes()
        except OSError:
            continue
        if f"{TAG}={tag}".encode() in env.split(b"\0"):
            found.append(int(p.name))
    return found


def _workers(tag: str) -> bool:
    for pid in _ours(tag):
        try:
            if b"multiprocessing.spawn" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False


def _temp_prv(out: Path) -> int:
    """Bytes of the trace being written (its hidden temporary .prv), 0 if none."""
    sizes = [p.stat().st_size for p in out.glob(".t.prv.*.tmp") if p.exists()]
    return max(sizes, default=0)


POINTS = {  # when to kill: a state of the run observed from outside
    # the supervisor has started its command (which is importing what it needs): from the
    # run's own state, not a clock (a clock read by a starved test fired before the fork or
    # after the trace was written)
    "start": lambda run: len(_ours(run["tag"])) >= 2,
    "preparing": lambda run: any(run["out"].glob(".nsys2prv-work-*")),
    "workers": lambda run: _workers(run["tag"]),
    "writing": lambda run: _temp_prv(run["out"]) > (4 << 20),
}


def _command(kind: str, big: dict[str, Path], out: Path) -> list[str]:
    a, b = str(big["a"]), str(big["b"])
    if kind == "translate":
        return [a, str(out / "t.prv")]
    if kind == "merge":
        return ["-j", "2", a, b, str(out / "t.prv")]
    return ["diff", a, b, "--trace", str(out / "t.prv"), "--no-rules"]


CASES = [("translate", "start", signal.SIGKILL), ("translate", "preparing", signal.SIGHUP),
         ("translate", "writing", signal.SIGKILL), ("translate", "writing", signal.SIGHUP),
         ("merge", "workers", signal.SIGKILL), ("merge", "workers", signal.SIGHUP),
         ("merge", "writing", signal.SIGKILL),
         ("diff", "workers", signal.SIGKILL), ("diff", "writing", signal.SIGHUP)]


def _hangup_default() -> None:
    """The run as started from a terminal: SIGHUP at its default, even where the tests run
    under `nohup` (whose ignored SIGHUP a child inherits, and nsys2prv then keeps ignoring,
    as a run under `nohup` should)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("kind,point,sig", CASES,
                         ids=[f"{k}-{p}-{signal.Signals(s).name}" for k, p, s in CASES])
def test_killed_run_stops_and_leaves_the_old_trace(kind, point, sig, big, tmp_path):
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    for ext in (".prv", ".pcf", ".row"):
        shutil.copy(big["old"] / f"t{ext}", out / f"t{ext}")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG: tag, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    env.pop("NSYS2PRV_NO_SUPERVISOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "nsys2prv", *_command(kind, big, out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_hangup_default)
    run = {"t0": time.monotonic(), "out": out, "tag": tag}
    try:
        while not POINTS[point](run):
            assert proc.poll() is None, f"the run ended before '{point}': " + \
                proc.stderr.read().decode()
            assert time.monotonic() - run["t0"] < 120, f"'{point}' never came"
            time.sleep(0.01)
        assert len(_ours(tag)) >= 2  # the supervisor and its command, at least
        proc.send_signal(sig)
        err = proc.communicate(timeout=60)[1].decode()
        deadline = time.monotonic() + GRACE
        while _ours(tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _ours(tag) == [], f"processes of the run still there {GRACE} s after {sig!r}"
    finally:
        for pid in _ours(tag):  # never leave one to the next test
            os.kill(pid, signal.SIGKILL)
    if sig == signal.SIGHUP:  # the supervisor passed it on; the command stopped and said so
        assert proc.returncode == 130, err
        assert err.strip().splitlines()[-1] == \
            "nsys2prv: error: interrupted by SIGHUP; partial outputs removed", err
    else:
        assert proc.returncode == -signal.SIGKILL
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing else, no change
    assert sorted(os.listdir(tmp)) == []


def test_the_fallback_watch_ends_an_orphan(tmp_path):
    """Where prctl is not there, a thread watching getppid() sends the signal: a child whose
    parent exits dies within a second (`die_with_parent` without PR_SET_PDEATHSIG)."""
    script = tmp_path / "orphan.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        from nsys2prv import lifeline
        lifeline._prctl_deathsig = lambda sig: False  # as on a system without prctl
        parent = os.getpid()
        r, w = os.pipe()
        if os.fork() == 0:
            lifeline.die_with_parent(signal.SIGTERM, parent)
            os.write(w, str(os.getpid()).encode())
            time.sleep(30)
            open({str(tmp_path / "survived")!r}, "w").close()
            os._exit(0)
        print(os.read(r, 32).decode())  # the child is watching: the parent goes
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = int(proc.stdout)
    deadline = time.monotonic() + GRACE
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child) and not (tmp_path / "survived").exists()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for whoever adopted it to reap it is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
