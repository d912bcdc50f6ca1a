"""The memory budget: how many processes run at once and how large their buffers are."""

from __future__ import annotations

import argparse
import importlib
import os

import pytest

import nsys2prv
from nsys2prv.pipeline import budget
from nsys2prv.testing.multi import job
from nsys2prv.testing.synth import write_export

# the module (the package's `translate` attribute is the function)
translate_mod = importlib.import_module("nsys2prv.api")


def test_plan_caps_processes_by_memory():
    # 8 reports, 8 cores, default 2 GiB: four processes of 512 MiB each
    b = budget.plan(None, 8, 8)
    assert (b.total, b.workers, b.share) == (2 << 30, 4, 512 << 20)
    assert b.spill_bytes == 64 << 20 and b.chunk_rows == 32_768
    # one report gets the whole budget; more memory lets more processes run
    assert budget.plan(None, 8, 1).workers == 1
    assert budget.plan(None, 8, 1).spill_bytes == 256 << 20
    assert budget.plan(None, 8, 1).chunk_rows == 100_000
    assert budget.plan(8 << 30, 8, 64).workers == 8
    # never fewer than one process, however small the budget
    assert budget.plan(256 << 20, 8, 8).workers == 1


def test_buffer_sizes_stay_within_share():
    for total in (256 << 20, 1 << 30, 2 << 30, 64 << 30):
        for workers in (1, 2, 4, 8):
            b = budget.Budget(total, workers)
            assert 32 << 20 <= b.spill_bytes <= max(32 << 20, b.share // 8)
            assert 32_768 <= b.chunk_rows <= 100_000


@pytest.mark.parametrize("text,size", [("2G", 2 << 30), ("512M", 512 << 20),
                                       ("1.5GiB", 3 << 29), ("300m", 300 << 20),
                                       ("1073741824", 1 << 30)])
def test_parse_size(text, size):
    assert budget.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "G", "2X", "-1G", "two"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        budget.parse_size(text)


def test_memory_argument_needs_256m():
    with pytest.raises(argparse.ArgumentTypeError):
        budget.memory_size("100M")
    assert budget.memory_size("1G") == 1 << 30


def test_eight_reports_run_at_most_four_at_once(tmp_path, monkeypatch):
    """Translating 8 reports with -j 8 under the default budget starts four processes,
    each with buffers sized for a quarter of the budget (issue 7's load case; the summed
    memory is measured by `benchmarks/run concurrent`)."""
    paths = [write_export(tmp_path / f"r{info.rank}.sqlite", spec, "3.17.1")
             for info, spec in job(ranks=8)]
    seen = []
    real = translate_mod._run_prepare

    def spy(jobs_args, jobs, dask, on_report):
        seen.append((jobs, {a[3].spill_bytes for a in jobs_args},
                     {a[3].chunk_rows for a in jobs_args}))
        return real(jobs_args, 1, dask, on_report)  # in-process: the plan is what is tested

    monkeypatch.setattr(translate_mod, "_run_prepare", spy)
    result = nsys2prv.translate(paths, tmp_path / "job.prv", jobs=8)
    assert seen == [(4, {64 << 20}, {32_768})]
    assert len(result.model.tasks) == 8
    seen.clear()
    nsys2prv.translate(paths, tmp_path / "big.prv", jobs=8, memory=8 << 30)
    assert seen[0][0] == 8


def test_worker_environment_sets_allocator_only_for_workers(monkeypatch):
    monkeypatch.delenv("_RJEM_MALLOC_CONF", raising=False)
    with budget.worker_environment():
        assert os.environ["_RJEM_MALLOC_CONF"] == budget.WORKER_MALLOC_CONF
    assert "_RJEM_MALLOC_CONF" not in os.environ
    monkeypatch.setenv("_RJEM_MALLOC_CONF", "narenas:2")  # the user's choice wins
    with budget.worker_environment():
        assert os.environ["_RJEM_MALLOC_CONF"] == "narenas:2"
    assert os.environ["_RJEM_MALLOC_CONF"] == "narenas:2"
    # nsys2prv's own setting for the main process is replaced in workers, then restored
    from nsys2prv import _alloc
    ours = "dirty_decay_ms:500,muzzy_decay_ms:1000," + _alloc.MAIN_CONF  # as polars leaves it
    monkeypatch.setenv("_RJEM_MALLOC_CONF", ours)
    with budget.worker_environment():
        assert os.environ["_RJEM_MALLOC_CONF"] == budget.WORKER_MALLOC_CONF
    assert os.environ["_RJEM_MALLOC_CONF"] == ours


def test_worker_environment_shares_the_cores_between_workers_that_run_at_once(monkeypatch):
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    with budget.worker_environment(share=2):
        assert os.environ["POLARS_MAX_THREADS"] == "8"
    assert "POLARS_MAX_THREADS" not in os.environ
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with budget.worker_environment(share=2):  # never fewer than one thread
        assert os.environ["POLARS_MAX_THREADS"] == "1"
    with budget.worker_environment():  # workers that do not all run at once: polars decides
        assert "POLARS_MAX_THREADS" not in os.environ
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")  # the user's choice wins
    with budget.worker_environment(share=2):
        assert os.environ["POLARS_MAX_THREADS"] == "3"
    assert os.environ["POLARS_MAX_THREADS"] == "3"
