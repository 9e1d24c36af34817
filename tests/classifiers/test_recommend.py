from __future__ import annotations

import pytest

from batchscope.classifiers.recommend import recommend
from batchscope.plan import Limits
from batchscope.records import BatchResult, LatencyStats, Status


def ok(b: int, throughput: float) -> BatchResult:
    lat = b / throughput
    return BatchResult(b, Status.OK, latency_s=LatencyStats(lat, lat, lat, 5),
                       throughput_per_s=throughput, peak_memory_bytes=b * 1000)


DECODE = [ok(1, 26.4), ok(2, 28.4), ok(4, 62.9), ok(8, 117), ok(16, 205), ok(32, 275),
          ok(64, 362), ok(128, 371)]


def test_smallest_batch_within_ninety_percent_of_best():
    choice = recommend(DECODE, Limits(), "token")
    # best 371 at 128; 90% of it is 333.9: batch 64 (362) is the smallest above it.
    assert choice.batch_size == 64
    assert choice.best_batch_size == 128
    assert choice.speedup_from_batching == pytest.approx(371 / 26.4)  # ~14.05x
    assert "90%" in choice.rule


def test_latency_limit_excludes_larger_batches():
    # batch 64 takes 64 / 362 = 177 ms, batch 32 takes 32 / 275 = 116 ms.
    choice = recommend(DECODE, Limits(latency_limit_s=0.150), "token")
    assert choice.batch_size == 32
    assert 64 in choice.excluded and 128 in choice.excluded
    # speedup still compares the best measured throughput with batch 1's
    assert choice.speedup_from_batching == pytest.approx(371 / 26.4)


def test_failed_batches_are_ignored_and_nothing_measured_gives_none():
    results = [ok(1, 10.0), BatchResult(2, Status.OOM)]
    assert recommend(results, Limits(), "sample").batch_size == 1
    assert recommend([BatchResult(1, Status.OOM)], Limits(), "sample") is None


def test_energy_objective_picks_by_joules_per_unit():
    results = [ok(b, t) for b, t in ((1, 26.4), (8, 117), (64, 362), (128, 371))]
    for r, joules in zip(results, (2.0, 0.40, 0.110, 0.105)):
        r.energy_per_unit_j = joules
    choice = recommend(results, Limits(), "token", objective="energy")
    # lowest 0.105 J/token at 128; within 1/0.9 of it (<= 0.1167): batch 64 (0.110)
    assert choice.batch_size == 64 and "energy per token" in choice.rule


def test_energy_objective_without_readings_falls_back_and_says_so():
    choice = recommend(DECODE, Limits(), "token", objective="energy")
    assert choice.batch_size == 64 and "energy objective unavailable" in choice.rule
