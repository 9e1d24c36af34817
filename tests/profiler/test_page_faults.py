"""Page faults per step: counted over the timed steps of the real sweep, flagged when they
cost a share of the step."""

from __future__ import annotations

import resource

import pytest

from batchscope.api import Options, diagnose_file
from batchscope.assemble import Measured, assemble
from batchscope.classifiers.allocator import PAGE_FAULT_FLAG_SHARE, page_fault_flags
from batchscope.plan import Limits
from batchscope.profiler.memory import PageFaults
from batchscope.profiler.protocol import KeepBuffers
from batchscope.profiler.supervisor import Sweep
from batchscope.records import (
    BatchResult,
    FlagKind,
    LatencyStats,
    ModelInfo,
    Report,
    RunInfo,
    Status,
)
from batchscope.records.report import AllocatorSetBy
from batchscope.reports.flag_text import flag_text
from tests.conftest import ROOT

MODELS = ROOT / "tests" / "models"
FAST = {"min_time_s": 0.05, "measure_ceilings": False, "op_breakdown": False, "device": "cpu"}


def _assembled(results: list[BatchResult], kept: list[BatchResult] | None = None) -> Report:
    """The report of ``results`` (an image model, no ceilings), as the sweep's would be."""
    return assemble(Measured(ModelInfo(target="t", unit="image"), RunInfo(), None, results,
                             Limits(), kept_buffers=kept or []))


def test_counter_sees_memory_touched_for_the_first_time() -> None:
    import mmap

    faults = PageFaults()
    faults.start()
    with mmap.mmap(-1, 256 * 4096) as m:  # fresh anonymous pages, faulted in on first write
        for page in range(256):
            m[page * 4096] = 1
    assert faults.stop() >= 256


@pytest.mark.slow
def test_sweep_counts_a_fresh_buffer_per_step_and_flags_it(tmp_path) -> None:
    report = diagnose_file(MODELS / "fresh_buffer.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 2], **FAST))
    for r in report.batches:
        assert r.status == Status.OK
        # 64 MiB = 16,384 pages a step; the allocator's own bookkeeping adds a few
        assert 16_000 <= r.page_faults_per_step <= 20_000
    (flag,) = [flag_text(f) for f in report.flags if f.kind == FlagKind.PAGE_FAULTS]
    assert "batch 1: 16," in flag and "batch 2: 16," in flag and "MALLOC_MMAP_THRESHOLD_" in flag


@pytest.mark.slow
def test_sweep_of_a_model_that_reuses_its_memory_faults_little(tmp_path) -> None:
    report = diagnose_file(MODELS / "tiny.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 4], **FAST))
    assert all(r.page_faults_per_step is not None and r.page_faults_per_step < 10
               for r in report.batches)
    assert not any(f.kind == FlagKind.PAGE_FAULTS for f in report.flags)


def _result(faults: float, step_s: float) -> BatchResult:
    return BatchResult(4, Status.OK, latency_s=LatencyStats(step_s, step_s, step_s, 5),
                       page_faults_per_step=faults)


def test_flag_only_when_the_faults_cost_a_share_of_the_step() -> None:
    # 59,526 faults at ~1 µs in a 372 ms step (the CNN sample at 16): ~16%, flagged
    (flag,) = page_fault_flags([_result(59_526, 0.372)])
    assert "batch 4: 59,526 (233 MiB, ~16%)" in flag_text(flag)
    # the same faults in a step 10x longer fall under the bar
    assert PAGE_FAULT_FLAG_SHARE > 59_526 * 1e-6 / 3.72
    assert page_fault_flags([_result(59_526, 3.72)]) == []
    assert page_fault_flags([_result(None, 0.1), _result(0, 0.1)]) == []  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(resource, "getrusage"), reason="no getrusage")
def test_counter_is_none_safe_when_getrusage_fails(monkeypatch) -> None:
    from batchscope.profiler import memory

    monkeypatch.setattr(memory.resource, "getrusage", lambda *_: (_ for _ in ()).throw(OSError()))
    faults = PageFaults()
    faults.start()
    assert faults.stop() is None


def test_page_faults_that_change_the_pick_are_said_first() -> None:
    # issue 13, finding 1: with glibc keeping its buffers a MobileNetV2-shaped net's pick went
    # from 1 to 2, and the flag never reached the terminal or the top of the reports
    from batchscope.reports import narrative
    from batchscope.reports.markdown import render_summary

    def batch(b: int, latency_s: float, faults: float) -> BatchResult:
        return BatchResult(batch_size=b, status=Status.OK, throughput_per_s=b / latency_s,
                           latency_s=LatencyStats(latency_s, latency_s, latency_s, 50),
                           page_faults_per_step=faults)

    # batch 2 spends 20 of its 30 ms faulting in memory (20,000 faults at ~1 us)
    report = _assembled([batch(1, 0.010, 0), batch(2, 0.030, 20_000)])
    assert report.recommendation.batch_size == 1
    assert report.recommendation.batch_size_without_page_faults == 2
    headline = narrative.allocator_headline(report)
    assert "67%" in headline and "batch 2 instead of 1" in headline
    top = render_summary(report).split("| batch |")[0]  # before the batch table
    assert "batch 2 instead of 1" in top
    quiet = _assembled([batch(1, 0.010, 0), batch(2, 0.015, 100)])
    assert narrative.allocator_headline(quiet) is None
    assert quiet.recommendation.batch_size_without_page_faults is None


@pytest.mark.slow
def test_flagged_faults_are_timed_again_with_the_buffers_kept(tmp_path) -> None:
    # issue 13, finding 1: both allocators measured side by side on a real CNN stem whose
    # activations at batch 8 (49 MiB) sit above glibc's mmap ceiling
    from batchscope.reports import narrative
    from batchscope.reports.html import render_html

    report = diagnose_file(MODELS / "wide_conv.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 8], **FAST))
    section = report.allocator
    assert section is not None
    assert section.env["MALLOC_MMAP_THRESHOLD_"] == str(2**40)
    if _glibc_version() >= (2, 35):  # mallopt takes a threshold over 32 MiB
        assert section.set_by == AllocatorSetBy.MALLOPT  # the sweep's own worker re-timed
    (row,) = [r for r in section.batches if r.batch_size == 8]
    # glibc takes the setting: the faults go (a count, not a speed: any machine)
    assert row.status == Status.OK and row.taken and section.taken
    assert row.page_faults_per_step > 8_000  # 49 MiB = 12,544 pages, mapped every step
    assert row.kept_page_faults_per_step < 0.5 * row.page_faults_per_step
    assert row.kept_latency_s > 0 and row.speedup == pytest.approx(
        row.latency_s / row.kept_latency_s)
    # the pick with the buffers kept is the rule applied to the kept figures
    assert report.recommendation.batch_size_without_page_faults == section.batch_size
    headline = narrative.allocator_headline(report)
    assert "measured side by side" in headline and "MALLOC_MMAP_THRESHOLD_=" in headline
    assert headline in render_html(report).replace("&#39;", "'")
    assert "buffers kept" in render_html(report)
    top = (tmp_path / "summary.md").read_text().split("| batch |")[0]
    assert "measured side by side" in top


def _glibc_version() -> tuple[int, ...]:
    import os

    try:  # "glibc 2.36"
        return tuple(int(p) for p in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split("."))
    except (ValueError, OSError, IndexError, AttributeError):
        return (0,)


@pytest.mark.slow
def test_mallopt_keeps_freed_buffers_in_a_running_process() -> None:
    # In a fresh interpreter (the setting would stay in pytest's): a 64 MiB buffer freed
    # and made again faults its pages in again by default, and not once mallopt took.
    import subprocess
    import sys

    script = """
import ctypes, resource, sys
from batchscope.profiler.glibc_malloc import keep_freed_buffers
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(2**26)  # 64 MiB, written and freed, as a step's activation
    ctypes.memset(block, 1, 2**26)
    libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults()
default = faults()
taken = keep_freed_buffers() if sys.argv[1] == "keep" else False
faults()
print(taken, default, faults())
"""
    # Relative counts: with transparent huge pages always on, a fault maps 2 MiB, not 4 KiB.
    for how in ("default", "keep"):
        out = subprocess.run([sys.executable, "-c", script, how], capture_output=True,
                             text=True, check=True, cwd=ROOT).stdout.split()
        taken, default, after = out[0] == "True", int(out[1]), int(out[2])
        assert default > 0  # mapped afresh each time
        if how == "default" or not taken:
            assert after > 0.5 * default
        else:
            assert after < 0.1 * default
        if how == "keep" and _glibc_version() >= (2, 35):
            assert taken


@pytest.mark.slow
def test_a_libc_that_refuses_mallopt_gets_a_fresh_worker(tmp_path, monkeypatch) -> None:
    # The sweep's worker refusing the setting (glibc before 2.35, musl): the batch sizes
    # are timed again in a fresh worker started with KEPT_BUFFERS_ENV (which glibc 2.36
    # takes; an older one caps the threshold from the environment too).
    request = Sweep._request

    def refuse(self, message, reply_type):
        if isinstance(message, KeepBuffers):
            return None, Status.OK, ""
        return request(self, message, reply_type)

    monkeypatch.setattr(Sweep, "_request", refuse)
    report = diagnose_file(MODELS / "wide_conv.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[8], **FAST))
    section = report.allocator
    assert section is not None and section.set_by == AllocatorSetBy.ENVIRONMENT
    (row,) = section.batches
    assert row.status == Status.OK
    if _glibc_version() >= (2, 35):  # glibc takes 1 TiB from the environment
        assert row.taken
        assert row.kept_page_faults_per_step < 0.5 * row.page_faults_per_step


@pytest.mark.slow
def test_the_allocator_check_can_be_turned_off(tmp_path) -> None:
    report = diagnose_file(MODELS / "fresh_buffer.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1],
                                   allocator_check=False, **FAST))
    assert report.allocator is None
    assert any(f.kind == FlagKind.PAGE_FAULTS for f in report.flags)  # still flagged
    # the headline then gives the labelled estimate at ~1 µs a fault
    from batchscope.reports import narrative

    assert "at ~1 µs a fault" in narrative.allocator_headline(report)


def _kept(b: int, latency_s: float, faults: float) -> BatchResult:
    return BatchResult(b, Status.OK, throughput_per_s=b / latency_s,
                       latency_s=LatencyStats(latency_s, latency_s, latency_s, 5),
                       page_faults_per_step=faults)


def test_side_by_side_summary_picks_from_the_kept_figures() -> None:
    from batchscope.classifiers.allocator import allocator_summary, pick_without_page_faults
    from batchscope.records.report import KeptBatch

    # default: batch 2 pays 20 ms of faults; kept: batch 2 is twice batch 1's throughput
    default = [_kept(1, 0.010, 0), _kept(2, 0.030, 20_000)]
    kept = [_kept(2, 0.010, 10)]
    assert pick_without_page_faults(default, Limits(), "throughput", kept) == 2
    summary = allocator_summary(default, kept, Limits(), "throughput")
    assert summary.batch_size == 2 and summary.throughput_per_s == pytest.approx(200)
    (row,) = summary.batches
    assert row.speedup == pytest.approx(3.0) and row.taken
    assert summary.cost_per_fault_s == pytest.approx(0.020 / 19_990)
    # a worker whose allocator ignored the setting faults as much: not taken, no cost
    ignored = allocator_summary(default, [_kept(2, 0.029, 19_000)], Limits(), "throughput")
    assert not ignored.taken and ignored.cost_per_fault_s is None
    # a size that never faulted says nothing about whether the setting took
    quiet = allocator_summary(default, [_kept(1, 0.010, 0)], Limits(), "throughput")
    assert quiet.batches[0].taken is None and not quiet.taken
    # a re-timed size that failed is listed with its error, and picks fall back to default
    failed = [BatchResult(2, Status.OOM, error="out of memory\nframes")]
    summary = allocator_summary(default, failed, Limits(), "throughput")
    assert summary.batches == [KeptBatch(2, Status.OOM, error="out of memory")]
    assert summary.batch_size == 1


def test_which_sizes_are_timed_again() -> None:
    from batchscope.classifiers.allocator import retime_sizes

    # nothing flagged (every share under 5%): nothing re-timed
    assert retime_sizes([_kept(1, 0.1, 1_000), _kept(2, 0.1, 4_000)]) == []
    # one flagged: every measured size, so the kept pick compares like with like
    assert retime_sizes([_kept(1, 0.1, 500), _kept(2, 0.1, 2_000), _kept(4, 0.1, 9_000),
                         BatchResult(8, Status.OOM)]) == [1, 2, 4]


def test_kept_buffers_that_gained_nothing_are_said_so() -> None:
    from batchscope.reports import narrative

    # flagged by the count (20,000 faults at ~1 us in 30 ms), yet no faster kept: noise
    default = [_kept(1, 0.010, 0), _kept(2, 0.030, 20_000)]
    kept = [_kept(1, 0.0101, 0), _kept(2, 0.0302, 50)]
    headline = narrative.allocator_headline(_assembled(default, kept))
    assert "no batch size ran faster" in headline and "cost" in headline
    assert not any(f"-{d}" in headline or f"−{d}" in headline for d in "0123456789")
