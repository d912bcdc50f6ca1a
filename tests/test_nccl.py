"""NCCL calls and the operations of NCCL kernels: synthetic payloads (binary blobs, JSON text,
JSON StringIds) with known contents, and the real exports that have NCCL ranges/kernels."""

from __future__ import annotations

from collections import defaultdict

import polars as pl
import pytest
from conftest import CORPUS, corpus_cases, corpus_files, translate_case
from prvtools import read_prv, sql, tables, validate

import nsys2prv
from nsys2prv.paraver.kinds import nccl as kind
from nsys2prv.paraver.registry import nccl as nreg
from nsys2prv.paraver.registry.cuda import NCCL_KERNEL
from nsys2prv.report.report import Report
from nsys2prv.sources import nccl as source
from nsys2prv.testing import synth_gpu as sg

MASK = (1 << 63) - 1
PAYLOAD_TYPES = {nreg.NCCL_COLLECTIVE, nreg.NCCL_MESSAGE_SIZE, nreg.NCCL_DATATYPE,
                 nreg.NCCL_REDUCTION, nreg.NCCL_ROOT, nreg.NCCL_PEER, nreg.NCCL_COMMUNICATOR,
                 nreg.NCCL_RANK, nreg.NCCL_NRANKS}


def _labels(tr, type_):
    return tr.pcf_labels(type_)


def kernel_payloads(tr):
    """kernel name -> (task, thread, start, end, {type: value} written at its start)."""
    names = _labels(tr, NCCL_KERNEL) | _labels(tr, 63000006)
    open_: dict[tuple, tuple] = {}
    out = {}
    for task, thread, time, pairs in tr.events:
        d = dict(pairs)
        k = d.get(NCCL_KERNEL, d.get(63000006))
        if k is None:
            continue
        if k:
            open_[(task, thread)] = (time, names[k], {t: v for t, v in pairs
                                                       if t in PAYLOAD_TYPES})
        else:
            start, name, payload = open_.pop((task, thread))
            ends = {t: v for t, v in pairs if t in PAYLOAD_TYPES}
            assert ends == {t: 0 for t in payload}, (name, ends, payload)  # 0 at the end
            out[name] = (task, thread, start, time, payload)
    return out


# -- synthetic -------------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["binary", "json", "json_id"])
def synthetic(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"nccl-{request.param}")
    db = sg.nccl_export(d / "nccl.sqlite", request.param)
    result = nsys2prv.translate(db, d / "nccl.prv")
    validate(d / "nccl.prv")
    return result, read_prv(d / "nccl.prv")


def test_calls_on_cpu_threads(synthetic):
    result, tr = synthetic
    labels = _labels(tr, nreg.NCCL_RANGE)
    values = [labels[v] for v in tr.values(nreg.NCCL_RANGE) if v]
    assert sorted(values) == sorted(c.name for c in sg.nccl_calls())  # look-alikes left out
    assert result.counts["nccl_calls"] == 8
    assert result.counts["nccl_calls_with_payload"] == 6
    durations = tr.durations(nreg.NCCL_RANGE)
    assert {labels[v]: d for (_, v), d in durations.items()} == {
        c.name: c.end - c.start for c in sg.nccl_calls()}


def test_call_payload_on_the_call(synthetic):
    _, tr = synthetic
    labels = _labels(tr, nreg.NCCL_RANGE)
    starts = {labels[d[nreg.NCCL_RANGE]]: d for *_, pairs in tr.events
              if (d := dict(pairs)).get(nreg.NCCL_RANGE)}
    assert starts["ncclCommInitRank"][nreg.NCCL_RANK] == 1
    assert starts["ncclCommInitRank"][nreg.NCCL_NRANKS] == 4
    assert starts["ncclCommInitRank"][nreg.NCCL_COMMUNICATOR] == sg.COMM_A & MASK
    assert starts["ncclSend"][nreg.NCCL_PEER] == 2
    assert starts["ncclRecv"][nreg.NCCL_MESSAGE_SIZE] == 3000
    assert starts["ncclAllReduce"][nreg.NCCL_DATATYPE] == 8  # ncclFloat32 + 1
    assert starts["ncclAllReduce"][nreg.NCCL_REDUCTION] == 1  # ncclSum + 1
    assert nreg.NCCL_MESSAGE_SIZE not in starts["ncclGroupEnd"]


def test_operations_on_kernels(synthetic):
    _, tr = synthetic
    ops = {v: k for k, v in nreg.COLLECTIVES.items()}
    got = kernel_payloads(tr)
    comm_a, comm_b = sg.COMM_A & MASK, sg.COMM_B & MASK
    c = nreg
    assert got["ncclDevKernel_AllReduce_RING_LL"][4] == {
        c.NCCL_COLLECTIVE: 1, c.NCCL_MESSAGE_SIZE: 4096, c.NCCL_DATATYPE: 8,
        c.NCCL_REDUCTION: 1, c.NCCL_COMMUNICATOR: comm_a, c.NCCL_RANK: 1, c.NCCL_NRANKS: 4}
    # a group of a send and a receive: one kernel, sizes summed, shared peer and communicator
    assert got["ncclDevKernel_SendRecv"][4] == {
        c.NCCL_COLLECTIVE: nreg.COLLECTIVES["SendRecv"], c.NCCL_MESSAGE_SIZE: 4000,
        c.NCCL_PEER: 2, c.NCCL_COMMUNICATOR: comm_a, c.NCCL_RANK: 1, c.NCCL_NRANKS: 4}
    assert got["ncclDevKernel_Broadcast_RING_LL"][4] == {
        c.NCCL_COLLECTIVE: 4, c.NCCL_MESSAGE_SIZE: 8, c.NCCL_ROOT: 0,
        c.NCCL_COMMUNICATOR: comm_a, c.NCCL_RANK: 1, c.NCCL_NRANKS: 4}
    # launched outside any NCCL call: the operation comes from the kernel name only
    assert got["ncclKernel_AllGather_RING_LL_Sum_float"][4] == {c.NCCL_COLLECTIVE: 2}
    # unnamed (trimmed) domain; no init call for this communicator, so no rank
    assert got["ncclDevKernel_AllGather_RING_LL"][4] == {
        c.NCCL_COLLECTIVE: 2, c.NCCL_MESSAGE_SIZE: 2048, c.NCCL_COMMUNICATOR: comm_b}
    assert got["compute_kernel"][4] == {}
    assert ops[1] == "AllReduce"


def test_kernel_events_follow_the_kernel_to_its_lane(synthetic):
    _, tr = synthetic
    got = kernel_payloads(tr)
    bcast, other = got["ncclDevKernel_Broadcast_RING_LL"], got["compute_kernel"]
    assert bcast[:2] != other[:2]  # the overlapping Broadcast kernel went to a lane row
    lane_label = tr.row.split("LEVEL THREAD SIZE ")[1].splitlines()[bcast[1]]
    assert "lane 1" in lane_label
    durations = tr.durations(nreg.NCCL_COLLECTIVE)
    expected = defaultdict(int)
    for name, _, _, _, start, end, _ in sg.NCCL_KERNELS:
        op = kind.operation_of_kernel(name)
        if op:
            expected[nreg.COLLECTIVES[op]] += (end - start) * sg.US
    assert {v: d for (_, v), d in durations.items()} == dict(expected)


def test_matching_without_translating_cuda_calls(tmp_path):
    """With CUDA calls left out, launches are read from the runtime table directly."""
    db = sg.nccl_export(tmp_path / "nccl.sqlite", "binary")
    result = nsys2prv.translate(db, tmp_path / "nccl.prv", only=["kernels", "nccl"])
    validate(tmp_path / "nccl.prv")
    assert result.counts["nccl_kernels_matched_to_calls"] == 4
    got = kernel_payloads(read_prv(tmp_path / "nccl.prv"))
    assert got["ncclDevKernel_SendRecv"][4][nreg.NCCL_MESSAGE_SIZE] == 4000


@pytest.mark.parametrize("only", [None, ["kernels", "nccl"]])
def test_kernels_in_slices_write_what_whole_ones_do(tmp_path, only):
    """The NCCL kernels are matched a slice at a time (memory of a slice): read two rows a
    chunk, so that every slice holds a few of them, the trace is the same, byte for byte,
    as with all of them in one slice; with CUDA calls left out too (their launches then
    read for every kernel at once)."""
    db = sg.nccl_export(tmp_path / "nccl.sqlite", "binary")
    whole = nsys2prv.translate(db, tmp_path / "whole.prv", only=only)
    sliced = nsys2prv.translate(db, tmp_path / "sliced.prv", only=only, chunk_rows=2)
    kernels = sql(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    assert kernels > 2 * 2  # several slices of NCCL kernels
    assert sliced.counts["nccl_kernels_matched_to_calls"] == \
        whole.counts["nccl_kernels_matched_to_calls"] == 4
    assert sliced.counts["nccl_kernels_with_operation"] == \
        whole.counts["nccl_kernels_with_operation"] > 0
    for ext in (".prv", ".pcf", ".row"):
        assert (tmp_path / f"sliced{ext}").read_bytes() == (tmp_path / f"whole{ext}").read_bytes()


def test_instances_of_every_slice_are_matched_across_ranks(tmp_path):
    """Each slice's NCCL kernels go to the side file the merge matches across the ranks:
    read two rows a chunk, the 4 ranks' 3 all-reduces give the same collective lines as
    read whole (3 x 3 lines from the late rank)."""
    from nsys2prv.paraver.registry import deps as dreg
    from nsys2prv.testing import synth_deps as sd

    paths = sd.nccl_job(tmp_path / "job", 4, 3, 2, 2_000 * sd.US)
    whole = nsys2prv.translate(paths, tmp_path / "whole.prv")
    sliced = nsys2prv.translate(paths, tmp_path / "sliced.prv", chunk_rows=2)
    for r in (whole, sliced):
        assert r.counts["NCCL operation instances matched"] == 3
        assert r.counts["NCCL collective lines"] == 3 * 3
    tr = read_prv(tmp_path / "sliced.prv")
    assert sum(1 for c in tr.comms if c[14] == dreg.TAG_NCCL_COLLECTIVE) == 9
    assert (tmp_path / "sliced.prv").read_bytes() == (tmp_path / "whole.prv").read_bytes()


def test_schema_layouts_and_natural_alignment(tmp_path):
    db = sg.nccl_export(tmp_path / "nccl.sqlite", "binary")
    lay = source.schema_layouts(Report(db))
    bcast = lay.filter(pl.col("schema_id") == sg.STATIC + 6).sort("offset")
    assert bcast.select("field", "offset", "size").rows() == [
        ("comm", 0, 8), ("bytes", 8, 8), ("root", 16, 4)]
    redop = lay.filter((pl.col("schema_id") == sg.STATIC + 5) & (pl.col("field") == "redop"))
    assert redop.select("offset", "size", "signed").row(0) == (16, 4, True)


def test_binary_decoding_of_64_bit_and_signed_fields():
    blob = sg.pack_payload(1, sg.STATIC + 9, {"NCCL communicator ID": (1 << 64) - 2,
                                               "Message size [bytes]": 1 << 40,
                                               "Peer rank": -3})
    lay = pl.DataFrame({"domain_id": [1, 1, 1], "schema_id": [sg.STATIC + 9] * 3,
                        "field": ["comm", "bytes", "peer"], "offset": [0, 8, 16],
                        "size": [8, 8, 4], "signed": [False, False, True]})
    df = pl.DataFrame({"domain_id": [1, 2], "blob": [blob.hex().upper(), ""]})
    out = source.decode_binary(df, lay)
    assert out.row(0, named=True)["_b_comm"] == -2  # signed view of 2^64 - 2
    assert out.row(0, named=True)["_b_bytes"] == 1 << 40
    assert out.row(0, named=True)["_b_peer"] == -3
    assert out.row(1, named=True)["_b_comm"] is None


def test_json_names_and_numbers():
    df = pl.DataFrame({"json": [
        '{"NCCL communicator ID": 18446744073709551615, "Reduction operation": "Max", '
        '"Datatype": "ncclBfloat16", "Message size [bytes]": 12}',
        '{"Reduction operation": 3, "Datatype": 2, "Root": 5}', "not json", None]})
    out = source.decode_json(df).select(
        [f"_j_{f}" for f in ("comm", "redop", "datatype", "bytes", "root")]).rows()
    assert out[0] == (-1, 2, 9, 12, None)
    assert out[1] == (None, 3, 2, None, 5)
    assert out[2] == out[3] == (None,) * 5


def test_group_keys():
    names = ["ncclGroupEnd", "ncclGroupStart", "ncclGroupStart", "ncclSend", "ncclGroupEnd",
             "ncclRecv", "ncclGroupEnd", "ncclAllReduce"]
    calls = pl.DataFrame({"row_id": range(10, 18), "row": [1] * 8, "start": range(8),
                          "name": names})
    keys = kind.group_keys(calls)["key"].to_list()
    # a stray end first (trace began inside a group), then a nested group, then a lone call
    assert keys == [10, 11, 11, 11, 11, 11, 11, 17]


def test_kernel_name_operations():
    assert kind.operation_of_kernel("ncclDevKernel_AllGather_RING_LL") == "AllGather"
    assert kind.operation_of_kernel("ncclAllReduceRingLLKernel_sum_f32") == "AllReduce"
    assert kind.operation_of_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t") == "SendRecv"
    assert kind.operation_of_kernel("ncclDevKernel_Generic") is None
    assert kind.operation_of_call("ncclAlltoAll") == "AllToAll"
    assert kind.operation_of_call("ncclGroupEnd") is None


# -- real exports ------------------------------------------------------------------------------

def _nccl_range_sql(db) -> str:
    """NCCL ranges by SQL alone: domain named NCCL in the same process, or an unnamed non-default
    domain and a text starting with 'nccl' (case-sensitive)."""
    return ("""
    WITH r AS (
      SELECT e.rowid AS rid, e.start, e."end", e.globalTid, e.domainId,
             coalesce(s.value, e.text) AS name, (e.globalTid >> 24) & 16777215 AS pid
      FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
      WHERE e.eventType IN (59, 60, 70, 71)),
    d AS (
      SELECT DISTINCT (e.globalTid >> 24) & 16777215 AS pid, e.domainId,
             coalesce(s.value, e.text) AS dname
      FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 75)
    SELECT r.* FROM r LEFT JOIN d ON d.pid = r.pid AND d.domainId = r.domainId
    WHERE d.dname = 'NCCL' OR (d.dname IS NULL AND coalesce(r.domainId, 0) != 0
                               AND r.name GLOB 'nccl*')""")


def _with_nccl(paths):
    out = []
    for p in paths:
        t = tables(p)
        if "NVTX_EVENTS" in t and sql(p, f"SELECT count(*) FROM ({_nccl_range_sql(p)})")[0][0]:
            out.append(p)
    return out


NCCL_FILES = _with_nccl(corpus_files())


def test_corpus_has_nccl_files():
    if not CORPUS.is_dir():
        pytest.skip(f"real-export corpus not found at {CORPUS}")
    names = {p.name for p in NCCL_FILES}
    assert {"nsysai_mfu2gpu_before.sqlite", "alpa_nccl_nvtx_report1.nsys2022.4.sqlite",
            "dd2360_llmc_nccl_nvtx_report1.nsys2023.4.sqlite",
            "alcf_seqpar_rank0.nsys2023.4.sqlite"} <= names


@pytest.fixture(scope="module", **corpus_cases(NCCL_FILES))
def real(request, tmp_path_factory):
    db, result, out = translate_case(request, tmp_path_factory,
                                     f"real-export corpus not found at {CORPUS} (no NCCL files)")
    validate(out)
    return db, result, read_prv(out)


def test_corpus_calls_match_sql(real):
    db, result, tr = real
    rows = sql(db, f"SELECT name, count(*), sum(\"end\" - start) FROM ({_nccl_range_sql(db)}) "
                   "GROUP BY name")
    labels = _labels(tr, nreg.NCCL_RANGE)
    got_n = defaultdict(int)
    for v in tr.values(nreg.NCCL_RANGE):
        if v:
            got_n[labels[v]] += 1
    assert dict(got_n) == {n: c for n, c, _ in rows}
    got_d = {labels[v]: d for (_, v), d in tr.durations(nreg.NCCL_RANGE).items()}
    assert got_d == {n: d for n, _, d in rows}


def test_corpus_kernels_match_sql(real):
    db, result, tr = real
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables(db):
        assert not tr.values(nreg.NCCL_COLLECTIVE)
        return
    kernels = sql(db, "SELECT s.value, k.\"end\" - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                      "JOIN StringIds s ON s.id = k.shortName WHERE s.value GLOB 'nccl*'")
    # every NCCL kernel here is named ncclDevKernel_<Operation>...
    expected = defaultdict(int)
    for name, dur in kernels:
        expected[name.split("_")[1]] += dur
    labels = _labels(tr, nreg.NCCL_COLLECTIVE)
    got = {labels[v]: d for (_, v), d in tr.durations(nreg.NCCL_COLLECTIVE).items()}
    assert got == dict(expected)
    # kernels whose launching call starts inside an NCCL range of the same thread
    launched_in_range = sql(db, f"""
        SELECT count(DISTINCT k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = k.shortName
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME a ON a.correlationId = k.correlationId
             AND (a.globalTid >> 24) = (k.globalPid >> 24)
        JOIN ({_nccl_range_sql(db)}) n ON n.globalTid = a.globalTid
             AND a.start BETWEEN n.start AND n."end"
        WHERE s.value GLOB 'nccl*'""")[0][0]
    assert result.counts.get("nccl_kernels_matched_to_calls", 0) == launched_in_range
    assert launched_in_range > 0
