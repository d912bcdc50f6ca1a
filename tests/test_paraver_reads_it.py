"""Paraver's own engine (paramedir) and our reader see the same trace.

paramedir was run on the stored sample trace (tests/data/paramedir/sample; refreshed with
`python tools/paramedir.py refresh`); its per-row state timeline must give the
same time per state and row as reading the .prv naively, and the stored trace must be what
the translator writes today for the sample (so the comparison is about the current writer).
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

import nsys2prv
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export

from prvtools import read_prv

DATA = Path(__file__).resolve().parent / "data" / "paramedir" / "sample"


def _paramedir_state_times() -> dict[tuple[int, int], dict[int, int]]:
    out: dict[tuple[int, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for line in (DATA / "basics__states.csv").read_text().splitlines():
        obj, _, duration, value = line.split("\t")
        _, task, thread = (int(x) for x in obj.split("."))
        out[(task, thread)][int(float(value))] += round(float(duration))
    return out


def test_per_row_state_totals_equal_paramedir(tmp_path):
    stored = tmp_path / "stored.prv"
    stored.write_bytes(gzip.decompress((DATA / "trace" / "sample.prv.gz").read_bytes()))
    for ext in (".pcf", ".row"):
        (tmp_path / f"stored{ext}").write_bytes((DATA / "trace" / f"sample{ext}").read_bytes())
    ours = read_prv(stored).state_time()
    theirs = _paramedir_state_times()
    assert set(ours) == set(theirs)
    for row in ours:
        assert dict(ours[row]) == {k: v for k, v in theirs[row].items() if v}, row


def test_stored_trace_is_what_the_translator_writes(tmp_path):
    db = write_export(tmp_path / "sample.sqlite", sample_spec(), "3.17.1")
    nsys2prv.translate(db, tmp_path / "sample.prv")
    now = [x for x in (tmp_path / "sample.prv").read_text().splitlines()
           if not x.startswith("#")]
    stored = [x for x in gzip.decompress((DATA / "trace" / "sample.prv.gz").read_bytes())
              .decode().splitlines() if not x.startswith("#")]
    assert now == stored, "refresh: python tools/paramedir.py refresh"
