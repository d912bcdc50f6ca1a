"""`nsys2prv check` rejects what Paraver would silently misread (paraver-validation matrix)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import nsys2prv
from nsys2prv.paraver.check import check_trace
from nsys2prv.paraver.writeid import is_mark
from nsys2prv.testing.samples import sample_spec
from nsys2prv.testing.synth import write_export


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("good")
    db = write_export(d / "s.sqlite", sample_spec(), "3.17.1")
    nsys2prv.translate(db, d / "good.prv")
    return d / "good.prv"


def variant(good: Path, tmp_path: Path, edit) -> Path:
    out = tmp_path / "v.prv"
    for ext in (".pcf", ".row"):
        shutil.copy(good.with_suffix(ext), out.with_suffix(ext))
    lines = good.read_text().splitlines()
    header, body = lines[0], [x for x in lines[1:] if not x.startswith("#")]
    header, body = edit(header, body)
    # the write id stays: the .pcf and .row copied are of that write
    out.write_text("\n".join([header, *filter(is_mark, lines[1:2])] + body) + "\n")
    return out


def _first(body, prefix):
    return next(i for i, x in enumerate(body) if x.startswith(prefix))


def _replace(body, i, fields_edit):
    f = body[i].split(":")
    fields_edit(f)
    body = list(body)
    body[i] = ":".join(f)
    return body


CASES = {
    "garbage header": (lambda h, b: ("Paraver trace", b), "header"),
    "header in microseconds": (lambda h, b: (h.replace("_ns", ""), b), "nanoseconds"),
    "task on missing node": (lambda h, b: (h.replace(":1(6:1)", ":1(6:2)"), b), "node"),
    "thread beyond header": (lambda h, b: (h, _replace(b, _first(b, "2:"),
                                                       lambda f: f.__setitem__(4, "9"))),
                             "outside the header"),
    "cpu beyond header": (lambda h, b: (h, _replace(b, _first(b, "2:"),
                                                    lambda f: f.__setitem__(1, "99"))),
                          "outside the header"),
    "unsorted body": (lambda h, b: (h, b[::-1]), "out of time order"),
    "state end before begin": (lambda h, b: (h, _replace(b, _first(b, "1:"),
                                                         lambda f: f.__setitem__(6, "0"))),
                               "ends before it begins"),
    "non-integer field": (lambda h, b: (h, _replace(b, _first(b, "2:"),
                                                    lambda f: f.__setitem__(5, "12.5"))),
                          "not an integer"),
    # numbers beyond int64 are reported, not a crash of the parse (19 digits can be either)
    "value of 20 digits": (lambda h, b: (h, _replace(b, _first(b, "2:"),
                                                     lambda f: f.__setitem__(7, "9" * 20))),
                           "not an integer"),
    "value of 19 digits beyond int64": (lambda h, b: (h, _replace(
        b, _first(b, "2:"), lambda f: f.__setitem__(7, str(1 << 63)))), "not an integer"),
    "empty field": (lambda h, b: (h, _replace(b, _first(b, "1:"),
                                              lambda f: f.__setitem__(3, ""))),
                    "not an integer"),
    "extra state field": (lambda h, b: (h, _replace(b, _first(b, "1:"),
                                                    lambda f: f.append("7"))),
                          "wrong number of fields"),
    "unknown record kind": (lambda h, b: (h, b[:3] + ["9:1:1:1:1:0"] + b[3:]), "unknown record"),
    "event type not in pcf": (lambda h, b: (h, _replace(b, _first(b, "2:"),
                                                        lambda f: f.__setitem__(6, "12345"))),
                              "not in the .pcf"),
    "unlabelled value": (lambda h, b: (h, _replace(b, _first(b, "2:1:1:1:1:0:63000000"),
                                                   lambda f: f.__setitem__(7, "999"))),
                         "without a .pcf label"),
    "record after end time": (lambda h, b: (h, b + [b[-1].replace(
        b[-1].split(":")[5], str(int(h.split("):")[1].split("_")[0]) + 5), 1)]),
        "after the header end"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rejects(good, tmp_path, name):
    edit, message = CASES[name]
    rep = check_trace(variant(good, tmp_path, edit))
    assert not rep.ok
    assert any(message in e for e in rep.errors), rep.errors


def test_accepts_the_good_trace(good):
    rep = check_trace(good)
    assert rep.ok, rep.errors
    assert rep.counts["states"] > 0 and not rep.warnings  # every row tiled


def test_int64_extremes_are_values(good, tmp_path):
    """The largest and smallest int64 (19 digits) are numbers like any other (NCCL's
    communicator ids are such values): read, counted, no line reported as malformed."""
    base = check_trace(good)
    for extreme in ((1 << 63) - 1, -(1 << 63)):
        seen = {}

        def edit(h, b):
            i = _first(b, "2:")
            seen["type"], seen["value"] = int(b[i].split(":")[6]), b[i].split(":")[7]
            return h, _replace(b, i, lambda f: f.__setitem__(7, str(extreme)))
        rep = check_trace(variant(good, tmp_path, edit))
        assert not any("integer" in e or "fields" in e for e in rep.errors), rep.errors
        want = dict(base.event_counts)
        want[seen["type"]] += seen["value"] == "0"  # a zero value is not counted
        assert rep.event_counts == want


def test_overlapping_states(good, tmp_path):
    def edit(h, b):
        i = _first(b, "1:1:1:1:1:")
        f = b[i].split(":")
        f[6] = str(int(f[6]) + 1000)  # run into the next state of the row
        return h, b[:i] + [":".join(f)] + b[i + 1:]
    rep = check_trace(variant(good, tmp_path, edit))
    assert any("overlaps" in e for e in rep.errors), rep.errors


def test_two_event_lines_same_row_and_time(good, tmp_path):
    def edit(h, b):
        i = _first(b, "2:")
        return h, b[:i + 1] + [b[i]] + b[i + 1:]
    rep = check_trace(variant(good, tmp_path, edit))
    assert any("multi-event" in e for e in rep.errors), rep.errors


def test_row_and_pcf_problems(good, tmp_path):
    v = variant(good, tmp_path, lambda h, b: (h, b))
    row = v.with_suffix(".row")
    row.write_text(row.read_text().replace("LEVEL THREAD SIZE 6", "LEVEL THREAD SIZE 7"))
    pcf = v.with_suffix(".pcf")
    pcf.write_text(pcf.read_text().replace("EVENT_TYPE\n0    63000000",
                                           "EVENT_TYPE\n0    3000000000 Too big\n0    63000000"))
    rep = check_trace(v)
    assert any("LEVEL THREAD" in e for e in rep.errors)
    assert any("outside int32" in e for e in rep.errors)
    v.with_suffix(".row").unlink()
    assert any("missing" in e for e in check_trace(v).errors)
