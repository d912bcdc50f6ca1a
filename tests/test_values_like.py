"""`--values-like OTHER.prv` (`values_like=`): a translation numbers names as another trace did.

Every name the other trace's .pcf has keeps its value there, names it lacks get values after
its largest, in name order, and the trace is otherwise the one translated without the option
(checked with every value mapped back to its name). Real pairs: the corpus' before/after runs
of one program, and the shipped sample against itself and a window of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CORPUS, ROOT
from prvtools import read_prv

import nsys2prv
from nsys2prv.cli import main as cli_main
from nsys2prv.errors import InputError
from nsys2prv.paraver.check import check_trace

SAMPLE = ROOT / "examples" / "sample.sqlite"
BEFORE = CORPUS / "sqlite" / "nsysai_mfu2gpu_before.sqlite"
AFTER = CORPUS / "sqlite" / "nsysai_mfu2gpu_after.sqlite"
NVTX_NAMES = 67_300_000  # NVTX push/pop, default domain: value = range text
KERNEL = 63_000_006
REPORT_INFO = 67_999_001


def pcf_sections(path: Path) -> tuple[dict[int, str], dict[int, dict[int, str]]]:
    """(type -> label, type -> {value: label}) of a trace's .pcf, read line by line."""
    text = path.with_suffix(".pcf").read_text()
    types: dict[int, str] = {}
    values: dict[int, dict[int, str]] = {}
    group: list[int] = []
    mode = None
    for line in text.splitlines():
        if line in ("EVENT_TYPE", "VALUES") or (line.isupper() and " " not in line):
            mode = line
            if line == "EVENT_TYPE":
                group = []
            continue
        if not line.strip():
            continue
        if mode == "EVENT_TYPE" and not line.startswith("PRECISION"):
            _, t, label = line.split(None, 2)
            types[int(t)] = label
            values[int(t)] = {}
            group.append(int(t))
        elif mode == "VALUES":
            v, label = line.split(None, 1)
            for t in group:
                values[t][int(v)] = label
    return types, values


def by_label(table: dict[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v, label in sorted(table.items()):
        if v:
            out.setdefault(label, v)
    return out


def named(path: Path) -> tuple:
    """The trace with every labelled value replaced by its label (and event types by their
    label when they are per-trace types, numbered like values): what must not change."""
    tr = read_prv(path)
    types, values = pcf_sections(path)

    def pair(t: int, v: int) -> tuple:
        labels = values.get(t) or {}
        return (types.get(t, t) if t >= NVTX_NAMES else t, labels.get(v, v) if v else 0)

    events = [(task, th, time, tuple(pair(t, v) for t, v in pairs))
              for task, th, time, pairs in tr.events]
    return tr.header, tr.row, tr.states, events, tr.comms


def check_numbered_like(a: Path, b: Path) -> dict[str, int]:
    """Every label of both .pcf files has one value; B's other labels have values A does
    not use, numbered after A's largest in label order. Returns counts per relation."""
    a_types, a_values = pcf_sections(a)
    b_types, b_values = pcf_sections(b)
    counts = {"shared": 0, "fresh": 0, "types shared": 0}
    # per-trace types (NVTX domains): the same label has the same type
    a_type_of = {label: t for t, label in a_types.items()}
    for t, label in b_types.items():
        if label in a_type_of and t >= NVTX_NAMES:
            assert a_type_of[label] == t, label
            counts["types shared"] += 1
    for t, table in b_values.items():
        la, lb = by_label(a_values.get(t, {})), by_label(table)
        if not lb or t not in a_values or t == REPORT_INFO:  # reports: numbered by input
            continue
        for label in set(la) & set(lb):
            assert la[label] == lb[label], (t, label)
            counts["shared"] += 1
        fresh = sorted(set(lb) - set(la), key=lambda label: lb[label])
        used = set(a_values[t])
        assert not {lb[label] for label in fresh} & used, t
        counts["fresh"] += len(fresh)
        if fresh and t in (NVTX_NAMES, KERNEL) and la:
            # after A's largest value, one each, in name order (plain ASCII names here)
            first = max(la.values()) + 1
            assert [lb[label] for label in fresh] == list(range(first, first + len(fresh)))
            assert fresh == sorted(fresh), t
    return counts


@pytest.fixture(scope="module")
def sample_trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("like") / "sample.prv"
    nsys2prv.translate(SAMPLE, out)
    return out


def test_numbered_like_itself_is_the_same_trace(sample_trace, tmp_path):
    """A trace numbered like itself has every name at its own value: the same bytes."""
    out = tmp_path / "again.prv"
    nsys2prv.translate(SAMPLE, out, values_like=sample_trace)
    for ext in (".prv", ".pcf", ".row"):
        assert out.with_suffix(ext).read_bytes() == sample_trace.with_suffix(ext).read_bytes()


def test_window_numbered_like_the_whole(sample_trace, tmp_path):
    """A window of the sample numbered like the whole run: every name it shows has the
    whole's value (without the option, the window numbers only what it saw, from 1)."""
    spec = "iteration 1"
    like, plain = tmp_path / "like.prv", tmp_path / "plain.prv"
    nsys2prv.translate(SAMPLE, like, window=spec, values_like=sample_trace)
    nsys2prv.translate(SAMPLE, plain, window=spec)
    assert check_trace(like).ok
    counts = check_numbered_like(sample_trace, like)
    assert counts["shared"] > 10 and counts["fresh"] == 0
    assert named(like) == named(plain)


def test_real_pair_before_after(tmp_path):
    """The corpus' before/after runs: the after run numbered like the before run."""
    if not (BEFORE.exists() and AFTER.exists()):
        pytest.skip(f"real-export corpus not found at {CORPUS} (set NSYS2PRV_CORPUS)")
    a, b, plain = tmp_path / "before.prv", tmp_path / "after.prv", tmp_path / "plain.prv"
    nsys2prv.translate(BEFORE, a)
    nsys2prv.translate(AFTER, b, values_like=a)
    nsys2prv.translate(AFTER, plain)
    assert check_trace(b).ok
    counts = check_numbered_like(a, b)
    # the two runs share their kernels and a few hundred NVTX texts; most texts differ
    # (they hold iteration numbers and sizes)
    assert counts["shared"] > 700 and counts["fresh"] > 1000, counts
    assert named(b) == named(plain)
    # and the per-kernel-name times: the same numbers by name, from the body
    kb = read_prv(b).durations(KERNEL)
    kp = read_prv(plain).durations(KERNEL)
    lb, lp = pcf_sections(b)[1][KERNEL], pcf_sections(plain)[1][KERNEL]
    assert {lb[v]: d for (_, v), d in kb.items()} == {lp[v]: d for (_, v), d in kp.items()}
    assert len(kb) >= 5  # the kernels of the run (10 names)


def test_other_numbered_like_sample(sample_trace, tmp_path):
    """A run that shares no name with the other trace: every name numbered after the other's
    largest (the mfu2gpu run, or a 2-rank recorded MPI run when the corpus is absent)."""
    src = [BEFORE] if BEFORE.exists() else \
        sorted((ROOT / "tests" / "data" / "recorded").glob("mpi_nvtx_rank[01]*.sqlite"))
    out = tmp_path / "other.prv"
    nsys2prv.translate(src, out, values_like=sample_trace)
    assert check_trace(out).ok
    counts = check_numbered_like(sample_trace, out)
    assert counts["fresh"] > 0


def test_merge_stage_takes_values_like(sample_trace, tmp_path):
    """`nsys2prv merge --values-like`: a window merged from a partial numbered like the
    whole run, otherwise the trace merged without the option."""
    assert cli_main(["prepare", str(SAMPLE), str(tmp_path / "part"), "-q"]) == 0
    like, plain = tmp_path / "like.prv", tmp_path / "plain.prv"
    window = ["--filter-nvtx", "iteration 1"]
    assert cli_main(["merge", str(tmp_path / "part"), str(like), "-q", *window,
                     "--values-like", str(sample_trace)]) == 0
    assert cli_main(["merge", str(tmp_path / "part"), str(plain), "-q", *window]) == 0
    assert check_trace(like).ok
    counts = check_numbered_like(sample_trace, like)
    assert counts["shared"] > 10 and counts["fresh"] == 0
    assert named(like) == named(plain)


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.prv", "no such trace"),
    (lambda d: _foreign(d), "not the .pcf of a trace written by nsys2prv"),
    (lambda d: _no_pcf(d), "no such trace"),
])
def test_bad_values_like_is_one_line_and_writes_nothing(make, message, tmp_path, capsys):
    other = make(tmp_path)
    out = tmp_path / "out" / "t.prv"
    out.parent.mkdir()
    with pytest.raises(InputError, match=message):
        nsys2prv.translate(SAMPLE, out, values_like=other)
    assert cli_main([str(SAMPLE), str(out), "-q", "--values-like", str(other)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert list(out.parent.iterdir()) == []


def _foreign(d: Path) -> Path:
    """A Paraver trace not written by nsys2prv (hand-made, as Extrae's would be)."""
    from paramedir import families_trace

    return families_trace(d / "families")


def _no_pcf(d: Path) -> Path:
    p = d / "bare.prv"
    p.write_text("#Paraver (01/01/1970 at 00:00):10_ns:0:1:1(1:1)\n")
    return p
