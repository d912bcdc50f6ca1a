"""The documentation that is generated or checked against the code stays in sync."""

from __future__ import annotations

from pathlib import Path

from nsys2prv.paraver import docs, registry as reg

ROOT = Path(__file__).resolve().parent.parent


def test_events_md_is_generated_from_the_registry():
    assert (ROOT / "docs" / "events.md").read_text() == docs.render(), \
        "run: python -m nsys2prv.paraver.docs > docs/events.md"


def test_registry_numbers_are_unique_and_in_range():
    numbers = [t.type for t in reg.EVENT_TYPES]
    assert len(numbers) == len(set(numbers))
    lo, hi = reg.PRIVATE_RANGE
    for t in reg.EVENT_TYPES:
        assert t.extrae or lo <= t.type <= hi, t
        assert 0 < t.type < 2**31
    for r in reg.TYPE_RANGES:
        assert r.extrae or lo <= r.base and r.base + r.size - 1 <= hi
        assert not any(r.base <= n < r.base + r.size for n in numbers)
    spans = sorted((r.base, r.base + r.size) for r in reg.TYPE_RANGES)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # a retired number is never used again
    for lo, hi, _ in reg.RETIRED:
        assert not any(lo <= n <= hi for n in numbers)
        assert not any(r.base <= hi and lo < r.base + r.size for r in reg.TYPE_RANGES)


def test_extrae_numbers_keep_extrae_meaning():
    extrae = {t.type: t.label for t in reg.EVENT_TYPES if t.extrae}
    # Extrae's own labels (extrae src/common/events.h and its .pcf writers)
    expected = {63000000: "CUDA library call", 63000006: "CUDA kernel",
                63000008: "Stream ID destination",
                63000011: "CUDA Kernel blocks per grid",
                63000012: "CUDA Kernel threads per block",
                63000013: "CUDA Kernel shared memory bytes", 61000000: "pthread call",
                50000001: "MPI Point-to-point", 50000002: "MPI Collective Comm",
                50000003: "MPI Other", 50000004: "MPI One-sided", 50000005: "MPI I/O",
                30000000: "Sampled functions"}
    for number, label in expected.items():
        if number in extrae:
            assert extrae[number] == label
    assert set(extrae) <= set(expected) | {n for n in extrae if 50_000_000 <= n < 51_000_000
                                           or 66_000_000 <= n < 66_100_000}
    # Extrae's sampled callers and traced-call callers (extrae src/merger/paraver/addr2info.c,
    # src/common/events.h MAX_CALLERS): 30000000+k "Sampled functions (depth k)" below
    # 30000100 (Extrae's source line), 70000000+k "Caller at level k"
    ranges = {r.name: r for r in reg.TYPE_RANGES if r.extrae}
    assert set(ranges) == {"sampled_depth", "callers"}
    depth, callers = ranges["sampled_depth"], ranges["callers"]
    assert (depth.base, depth.base + depth.size - 1) == (30000001, 30000099)
    assert depth.label.format(key=3) == "Sampled functions (depth 3)"
    assert depth.type_of_key("3") == 30000003
    assert (callers.base, callers.base + callers.size - 1) == (70000001, 70000099)
    assert callers.label.format(key=2) == "Caller at level 2"
    assert callers.type_of_key("2") == 70000002
    assert reg.EXTRAE_CUDA_CALL_VALUES["cudaLaunch"] == 1
    assert reg.EXTRAE_CUDA_CALL_VALUES["cudaMalloc3DArray"] == 40
