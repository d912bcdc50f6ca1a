"""Jobs of many ranks: inputs named by a directory, a glob or @LIST, and a merge of more run
files than the process may open (issue 18). The bytes must not depend on how the inputs were
named nor on the descriptor limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nsys2prv import engine
from nsys2prv.api import merge_partials, prepare_report, translate
from nsys2prv.errors import InputError
from nsys2prv.pipeline import merge as merge_mod
from nsys2prv.pipeline.descriptors import raise_open_file_limit, run_pool_size
from nsys2prv.report.inputs import expand_inputs, natural_key
from nsys2prv.testing.multi import job
from nsys2prv.testing.synth import write_export

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
RANKS = 24  # more than the pool left under the limit of the subprocess test


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Path:
    """A job of RANKS ranks, 4 a node, one export each, named rank0..rank23."""
    d = tmp_path_factory.mktemp("job")
    hosts = tuple(f"node{i}" for i in range(RANKS // 4))
    for info, spec in job(ranks=RANKS, hosts=hosts):
        write_export(d / f"rank{info.rank}.sqlite", spec)
    return d


def _natural(d: Path) -> list[str]:
    return [str(d / f"rank{r}.sqlite") for r in range(RANKS)]


@pytest.fixture(scope="module")
def reference_trace(ranks, tmp_path_factory) -> Path:
    """The trace of the job with its exports named one by one, in rank order."""
    out = tmp_path_factory.mktemp("ref") / "ref.prv"
    translate(_natural(ranks), out, jobs=1)
    return out


@pytest.fixture(scope="module")
def reference(reference_trace) -> bytes:
    return reference_trace.read_bytes()


def _cli(*args, limit: int | None = None, cwd: Path | None = None):
    def lower():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "nsys2prv", *map(str, args)],
                          capture_output=True, text=True, env=ENV, cwd=cwd,
                          preexec_fn=lower if limit else None)


# ------------------------------------------------------------------------ inputs --------
def test_natural_order():
    names = ["rank10", "rank2", "rank1", "rank100", "a", "rank02x"]
    assert sorted(names, key=natural_key) == ["a", "rank1", "rank2", "rank02x", "rank10",
                                              "rank100"]


def test_directory_glob_and_list_name_the_same_reports(ranks, tmp_path):
    natural = _natural(ranks)
    assert expand_inputs([ranks]) == natural
    assert expand_inputs([str(ranks / "rank*.sqlite")]) == natural
    listing = tmp_path / "list.txt"
    listing.write_text("# the job\n\n" + "\n".join(reversed(natural)) + "\n")
    assert expand_inputs([f"@{listing}"]) == natural[::-1]  # a list keeps its own order
    # a glob of one rank's files, then a plain path: concatenated in the order given
    assert expand_inputs([str(ranks / "rank1?.sqlite"), natural[3]]) == \
        natural[10:20] + [natural[3]]


def test_directory_takes_the_export_beside_its_report(tmp_path):
    for name in ("b.nsys-rep", "b.sqlite", "a.nsys-rep", "notes.txt"):
        (tmp_path / name).write_text("")
    assert expand_inputs([tmp_path]) == [str(tmp_path / "a.nsys-rep"),
                                         str(tmp_path / "b.sqlite")]


@pytest.mark.parametrize("given, message", [
    ("@{d}/missing.txt", "no such list file"),
    ("@{d}/empty.txt", "the list names no input"),
    ("{d}/zz*.sqlite", "no file matches this pattern"),
    ("{d}/sub", "no reports"),
])
def test_bad_inputs_are_one_line(tmp_path, given, message):
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError, match=message):
        expand_inputs([given.format(d=tmp_path)])


def test_plain_missing_path_is_left_to_the_command(tmp_path):
    assert expand_inputs([str(tmp_path / "nope.sqlite")]) == [str(tmp_path / "nope.sqlite")]


def test_cli_directory_and_list_give_the_same_trace(ranks, reference, tmp_path):
    listing = tmp_path / "ranks.txt"
    listing.write_text("\n".join(os.path.relpath(p, tmp_path) for p in _natural(ranks)))
    for name, given in (("dir", str(ranks)), ("list", "@ranks.txt"),
                        ("glob", str(ranks / "rank*.sqlite"))):
        proc = _cli(given, f"{name}.prv", "-q", "-j", "1", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert (tmp_path / f"{name}.prv").read_bytes() == reference, name


def test_summary_of_a_big_job_shows_the_extremes(ranks, tmp_path):
    """More than 16 reports: the offset range and the five largest sync corrections, not a
    line a report (the trace's header has them all)."""
    proc = _cli(ranks, tmp_path / "s.prv", "-j", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert f"nsys2prv:   {RANKS} reports on {RANKS // 4} host(s): offsets" in proc.stderr
    per_report = [ln for ln in lines if ln.startswith("nsys2prv:   rank")]
    assert len(per_report) == 5
    # the last host's clock is the furthest off (job(): 3.7 ms more a host)
    assert all(f"(node{RANKS // 4 - 1})" in ln for ln in per_report[:4])
    header = [ln for ln in (tmp_path / "s.prv").read_text().splitlines()[:RANKS + 10]
              if ln.startswith("# report rank")]
    assert len(header) == RANKS


def test_rows_of_a_big_job_name_their_rank(reference_trace):
    """Every row label of a trace of several tasks starts with its task's rank: the rows of
    thousands of ranks look alike otherwise."""
    text = reference_trace.with_suffix(".row").read_text()
    threads = text.split("LEVEL THREAD SIZE ")[1].splitlines()[1:]
    tasks = text.split("LEVEL TASK SIZE ")[1].split("\n\n")[0].splitlines()[1:]
    assert len(tasks) == RANKS and len(threads) == 3 * RANKS  # main thread, 2 streams
    for rank in range(RANKS):
        assert tasks[rank].startswith(f"rank {rank} ")
        assert threads[3 * rank].startswith(f"rank {rank}: app main (tid ")
        assert threads[3 * rank + 1].startswith(f"rank {rank}: GPU 0 ctx 1 stream ")


def test_cli_bad_list_is_one_line_and_writes_nothing(tmp_path):
    proc = _cli("@missing.txt", "out.prv", cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "nsys2prv: error: @missing.txt: no such list file"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_merge_takes_a_glob_of_partials(ranks, tmp_path):
    for r in (0, 1, 2, 10):  # natural order: 0, 1, 2, 10 (not 0, 1, 10, 2)
        prepare_report(ranks / f"rank{r}.sqlite", tmp_path / "parts" / f"p{r}")
    proc = _cli("merge", "-q", tmp_path / "parts" / "p*", tmp_path / "g.prv")
    assert proc.returncode == 0, proc.stderr
    merge_partials([tmp_path / "parts" / f"p{r}" for r in (0, 1, 2, 10)], tmp_path / "e.prv")
    assert (tmp_path / "g.prv").read_bytes() == (tmp_path / "e.prv").read_bytes()


# ------------------------------------------------------------------- descriptors --------
def test_pool_size():
    soft, hard = raise_open_file_limit()
    assert soft == hard or hard > 1 << 29  # raised as far as allowed
    assert run_pool_size(10) == 0  # everything fits: no pool
    assert run_pool_size(soft * 2) >= soft // 2  # too many: a pool of what is left


def test_merge_through_a_small_pool_is_byte_identical(ranks, reference, tmp_path,
                                                      monkeypatch):
    """Three descriptors for 24 run files: every piece of a block read reopens its file."""
    made = []

    real = engine.Merger

    def spy(*a):
        m = real(*a)
        made.append((a[-1], m))
        return m

    monkeypatch.setattr(merge_mod.engine, "Merger", spy)
    monkeypatch.setattr(merge_mod, "run_pool_size", lambda runs: 3)
    out = tmp_path / "pooled.prv"
    translate(_natural(ranks), out, jobs=1)
    assert out.read_bytes() == reference
    assert made and all(size == 3 for size, _ in made)
    assert sum(m.reopened for _, m in made) >= RANKS - 3


def test_merge_under_a_low_descriptor_limit(ranks, reference, tmp_path):
    """A hard limit of 25 descriptors, fewer than the run files and everything else the
    translation opens (before the pool, this failed with 'Too many open files'): the merge
    pools its descriptors, the bytes are the same."""
    proc = _cli(ranks, tmp_path / "low.prv", "-q", "-j", "1", limit=25)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "low.prv").read_bytes() == reference


def test_analyze_of_a_big_job_lists_the_worst(reference_trace, monkeypatch, capsys):
    """More processes than MANY: the SHOWN worst of each list and the spread, not a line a
    rank; --list-all (and --json) give every one."""
    from nsys2prv.cli import analyze as analyze_cli
    from nsys2prv.cli import main

    monkeypatch.setattr(analyze_cli, "MANY", 8)
    assert main(["analyze", str(reference_trace)]) == 0
    out = capsys.readouterr().out
    device_rows = [ln for ln in out.splitlines() if ln.startswith("rank ")]
    assert len(device_rows) == analyze_cli.SHOWN
    assert out.count(f"... {RANKS - analyze_cli.SHOWN} more processes (all in --json") == 2
    assert f"{RANKS} processes, device offload efficiency min " in out
    assert f"{RANKS - analyze_cli.SHOWN} more devices (all in --json" in out
    # the most idle first: the table's idle column never grows down the list
    idle = [float(ln.split("|")[0].split()[-1]) for ln in device_rows]
    assert idle == sorted(idle, reverse=True)
    assert main(["analyze", "--list-all", str(reference_trace)]) == 0
    out = capsys.readouterr().out
    assert len([ln for ln in out.splitlines() if ln.startswith("rank ")]) == RANKS
    assert "more processes" not in out


def test_diff_of_a_big_job_lists_the_devices_that_moved(ranks, tmp_path, capsys):
    """A diff of two jobs of RANKS ranks where only rank 7's compute kernels got 1 ms shorter:
    the devices block shows the --top devices whose times moved most (rank 7 first, with its
    numbers), says how many more there are and how many did not move; --json has them all."""
    import dataclasses
    import json

    from nsys2prv.cli import main

    after = tmp_path / "after"
    after.mkdir()
    hosts = tuple(f"node{i}" for i in range(RANKS // 4))
    for info, spec in job(ranks=RANKS, hosts=hosts):
        if info.rank == 7:
            spec.kernels = [dataclasses.replace(k, end=k.end - 1_000_000)
                            if k.name == "compute_kernel" else k for k in spec.kernels]
        write_export(after / f"rank{info.rank}.sqlite", spec)
    args = ["diff", str(ranks), str(after), "--no-rules", "--no-idle", "--top", "3"]
    assert main(args) == 0
    out = capsys.readouterr().out
    block = out[out.index("\ndevices ("):out.index("\nmodels")].strip().splitlines()
    assert block[0] == f"devices ({RANKS}; the 3 whose times moved most; ms, before -> after)"
    names = [ln.split("  |  ")[0].strip() for ln in block[1:-1:2]]
    assert len(names) == 3 and names[0].startswith("rank 7 ")
    # 5 kernels of 1.99 ms each, 1 ms shorter after
    assert "compute kernels 9.950 -> 4.950" in block[2]
    assert block[-1] == (f"  ... {RANKS - 3} more devices ({RANKS - 1} of all {RANKS} "
                         f"unchanged); every device is in --json and --csv")
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["tables"]["devices"]) == RANKS
