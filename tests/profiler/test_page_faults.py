"""Page faults per step: counted over the timed steps of the real sweep, flagged when they
cost a share of the step."""

from __future__ import annotations

import resource

import pytest

from batchscope.api import Options, diagnose_file
from batchscope.classifiers.analyze import PAGE_FAULT_FLAG_SHARE, page_fault_flags
from batchscope.profiler.memory import PageFaults
from batchscope.records import BatchResult, LatencyStats, Status
from tests.conftest import ROOT

MODELS = ROOT / "tests" / "models"
FAST = dict(min_time_s=0.05, measure_ceilings=False, op_breakdown=False, device="cpu")


def test_counter_sees_memory_touched_for_the_first_time() -> None:
    import mmap

    faults = PageFaults()
    faults.start()
    with mmap.mmap(-1, 256 * 4096) as m:  # fresh anonymous pages, faulted in on first write
        for page in range(256):
            m[page * 4096] = 1
    assert faults.stop() >= 256


def test_sweep_counts_a_fresh_buffer_per_step_and_flags_it(tmp_path) -> None:
    report = diagnose_file(MODELS / "fresh_buffer.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 2], **FAST))
    for r in report.batches:
        assert r.status == Status.OK
        # 64 MiB = 16,384 pages a step; the allocator's own bookkeeping adds a few
        assert 16_000 <= r.page_faults_per_step <= 20_000
    (flag,) = [f for f in report.flags if "page faults per step" in f]
    assert "batch 1: 16," in flag and "batch 2: 16," in flag and "MALLOC_MMAP_THRESHOLD_" in flag


def test_sweep_of_a_model_that_reuses_its_memory_faults_little(tmp_path) -> None:
    report = diagnose_file(MODELS / "tiny.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 4], **FAST))
    assert all(r.page_faults_per_step is not None and r.page_faults_per_step < 10
               for r in report.batches)
    assert not any("page faults" in f for f in report.flags)


def _result(faults: float, step_s: float) -> BatchResult:
    return BatchResult(4, Status.OK, latency_s=LatencyStats(step_s, step_s, step_s, 5),
                       page_faults_per_step=faults)


def test_flag_only_when_the_faults_cost_a_share_of_the_step() -> None:
    # 59,526 faults at ~1 µs in a 372 ms step (the CNN sample at 16): ~16%, flagged
    (flag,) = page_fault_flags([_result(59_526, 0.372)])
    assert "batch 4: 59,526 (233 MiB, ~16%)" in flag
    # the same faults in a step 10x longer fall under the bar
    assert 59_526 * 1e-6 / 3.72 < PAGE_FAULT_FLAG_SHARE
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
    from batchscope.classifiers.analyze import analyze
    from batchscope.plan import Limits
    from batchscope.records import BatchResult, LatencyStats, Status
    from batchscope.reports import narrative
    from batchscope.reports.markdown import render_summary

    def batch(b: int, latency_s: float, faults: float) -> BatchResult:
        return BatchResult(batch_size=b, status=Status.OK, throughput_per_s=b / latency_s,
                           latency_s=LatencyStats(latency_s, latency_s, latency_s, 50),
                           page_faults_per_step=faults)

    # batch 2 spends 20 of its 30 ms faulting in memory (20,000 faults at ~1 us)
    report = analyze({"unit": "image"}, None, [batch(1, 0.010, 0), batch(2, 0.030, 20_000)],
                     Limits(), {})
    assert report.recommendation.batch_size == 1
    assert report.recommendation.batch_size_without_page_faults == 2
    doc = report.to_dict()
    headline = narrative.allocator_headline(doc)
    assert "67%" in headline and "batch 2 instead of 1" in headline
    top = render_summary(doc).split("| batch |")[0]  # before the batch table
    assert "batch 2 instead of 1" in top
    quiet = analyze({"unit": "image"}, None, [batch(1, 0.010, 0), batch(2, 0.015, 100)],
                    Limits(), {})
    assert narrative.allocator_headline(quiet.to_dict()) is None
    assert quiet.recommendation.batch_size_without_page_faults is None
