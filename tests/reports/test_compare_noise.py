"""The time half of ``diagnose compare`` on seeded synthetic runs (issue 31): identical code
on a drifting machine must not fail the gate, and the words must agree with the numbers.

Every run here is the recorded mlp report with its throughput scaled by a drawn speed: no
test reads this machine's speed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random

import pytest

from batchscope.records import DriftControl, Interval, Report
from batchscope.reports.compare import (
    RUN_DRIFT,
    NoiseSource,
    compare,
    side_noise,
    spread_warning,
    welch_dof,
)
from batchscope.stats import student_t_cdf, student_t_quantile
from tests.reports.conftest import REPORTS, typed

BASE = typed(json.loads((REPORTS / "mlp.json").read_text(encoding="utf-8")))
GATE = BASE.recommendation.batch_size if BASE.recommendation else 0


def run(speed: float, drift: float | None = None, interval: float | None = None) -> Report:
    """The mlp report as one run at ``speed`` times its throughput; ``drift``: its control's
    measured drift; ``interval``: its gate throughput's relative 95% half-width."""
    batches = []
    for b in BASE.batches:
        if b.throughput_per_s and b.latency_s:
            lat = b.latency_s
            t = b.throughput_per_s * speed
            b = dataclasses.replace(
                b, throughput_per_s=t,
                latency_s=dataclasses.replace(lat, median=lat.median / speed,
                                              p25=lat.p25 / speed, p75=lat.p75 / speed),
                throughput_interval_per_s=(Interval(t * (1 - interval), t * (1 + interval))
                                           if interval is not None else None))
        batches.append(b)
    control = (DriftControl(GATE, 1e-3, 1e-3 * (1 + drift), 30.0, drift)
               if drift is not None else None)
    return dataclasses.replace(BASE, batches=batches,
                               run=dataclasses.replace(BASE.run, drift=control))


def exits_1(pairs: list[tuple[Report, Report]]) -> float:
    """The share of ordered (base, head) pairs that fail the gate."""
    return sum(compare(b, h).regression for b, h in pairs) / len(pairs)


def test_the_student_t_machinery_matches_its_tables() -> None:
    for dof, q in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042),
                   (math.inf, 1.960)):
        assert student_t_quantile(0.975, dof) == pytest.approx(q, abs=1e-3)
        assert student_t_cdf(q, dof) == pytest.approx(0.975, abs=1e-4)
    assert student_t_cdf(0.0, 3) == pytest.approx(0.5)
    assert student_t_cdf(-1e6, 2) < 1e-9 and student_t_cdf(math.inf, 2) == 1.0


def test_identical_code_under_run_to_run_drift_fails_in_at_most_5_percent_of_pairs() -> None:
    # Each run's speed drawn log-normal with the 25% deviation a single run is given: the
    # gate then fails about 2.5% of ordered pairs (the one-sided 97.5% bound), never 5%.
    rng = random.Random(31)
    runs = [run(math.exp(rng.gauss(0.0, RUN_DRIFT))) for _ in range(24)]
    share = exits_1(list(itertools.permutations(runs, 2)))
    assert share <= 0.05, share


def test_identical_code_on_a_vm_drifting_10_to_30_percent_never_fails() -> None:
    # Issue 31's machine: its speed drifts 10-30% over minutes. Each run lands somewhere in
    # that range (and its own control measured some drift): no ordered pair fails.
    rng = random.Random(13)
    runs = [run(1 / (1 + rng.uniform(0.0, 0.30)), drift=rng.uniform(0.0, 0.1))
            for _ in range(16)]
    assert exits_1(list(itertools.permutations(runs, 2))) == 0.0


def test_issue_31s_pair_is_inconclusive_and_its_reverse_no_regression() -> None:
    slower = compare(run(1.0), run(0.78))  # identical code, -22% between the two runs
    assert not slower.regression and slower.inconclusive
    assert slower.gate_change == pytest.approx(-0.22)
    assert slower.confidence is not None and 0.6 < slower.confidence < 0.95  # not 99.9%
    assert slower.detectable_drop is not None and slower.detectable_drop > 0.45
    assert "−22.0%" in slower.verdict and "within that noise" in slower.verdict
    faster = compare(run(0.78), run(1.0))
    assert not faster.regression and not faster.inconclusive
    assert faster.verdict.startswith("no regression")


def test_a_drop_far_past_the_drift_of_single_runs_is_a_regression() -> None:
    result = compare(run(1.0), run(0.4))
    assert result.regression and result.time_regression and not result.work_regression
    assert result.verdict.startswith("regression: throughput at batch")


def test_a_runs_own_drift_control_and_interval_widen_its_noise() -> None:
    plain = side_noise([run(1.0)], [1.0], GATE, RUN_DRIFT)
    assert (plain.per_run, plain.source, plain.dof) == (RUN_DRIFT, NoiseSource.RUN_DRIFT, math.inf)
    controlled = side_noise([run(1.0, drift=0.45)], [1.0], GATE, RUN_DRIFT)
    assert (controlled.per_run, controlled.source) == (0.45, NoiseSource.CONTROL)
    wide = side_noise([run(1.0, interval=0.6)], [1.0], GATE, RUN_DRIFT)
    assert wide.source == NoiseSource.INTERVAL and wide.per_run > 0.3
    # a -60% drop fails against plain single runs, not against a run that drifted 45%
    assert compare(run(1.0), run(0.4)).regression
    noisy = compare(run(1.0, drift=0.45), run(0.4))
    assert not noisy.regression and noisy.inconclusive


def test_several_runs_use_their_scatter_with_welchs_degrees_of_freedom() -> None:
    bases = [run(s) for s in (1.0, 1.01, 0.99)]
    heads = [run(s) for s in (0.88, 0.89, 0.87)]
    result = compare(bases, heads)
    assert result.regression and result.runs == (3, 3)
    assert result.noise is not None and {n.source for n in result.noise} == {NoiseSource.SCATTER}
    assert result.dof is not None and 3.5 < result.dof < 4.5
    assert result.u_test_p is not None and result.u_test_p == pytest.approx(0.0809, abs=1e-3)
    assert "Mann-Whitney U p = 0.0809" in result.verdict
    # two runs a side barely estimate their scatter: Welch's t asks far more than 1.96
    two = compare([run(1.0), run(0.9)], [run(0.85), run(0.8)])
    assert two.dof is not None and two.dof < 3 and not two.regression


def test_runs_that_agree_exactly_count_as_one_run() -> None:
    # the same report given twice a side: a zero scatter once made any drop past the
    # threshold a regression quoted "±0.0%"; the side is one run, with its drift floor
    twice = compare([run(1.0), run(1.0)], [run(0.85), run(0.85)])
    assert not twice.regression and twice.inconclusive
    assert twice.noise is not None and all(
        (n.runs, n.source, n.per_run) == (1, NoiseSource.RUN_DRIFT, RUN_DRIFT)
        for n in twice.noise)
    assert twice.standard_error is not None and twice.standard_error > 0.2
    assert "±0.0%" not in twice.verdict
    once = compare(run(1.0), run(0.85))
    assert once.standard_error == twice.standard_error
    assert "drift between runs ±50.0% at 95%" in once.verdict
    assert "drift between runs ±50.0% at 95%" in twice.verdict


def test_the_scatter_of_runs_is_floored_at_the_noise_each_run_measured() -> None:
    # runs 0.1% apart, each with a ±20% gate interval: their scatter does not make the
    # side's mean sharper than the runs themselves say they are
    bases = [run(s, interval=0.2) for s in (1.0, 1.001)]
    heads = [run(s, interval=0.2) for s in (0.88, 0.881)]
    result = compare(bases, heads)
    assert result.noise is not None
    assert {n.source for n in result.noise} == {NoiseSource.INTERVAL}
    assert all(n.dof == math.inf and n.runs == 2 and n.per_run > 0.1 for n in result.noise)
    assert not result.regression and result.inconclusive
    # a drift control that measured more than the interval raises the floor again
    controlled = side_noise([run(1.0, drift=0.3, interval=0.2), run(1.001)], [1.0, 1.001],
                            GATE, RUN_DRIFT)
    assert (controlled.per_run, controlled.source) == (0.3, NoiseSource.CONTROL)
    # a scatter past the floor still decides, with its degrees of freedom
    wide = side_noise([run(1.0, interval=0.02), run(1.3, interval=0.02)], [1.0, 1.3], GATE,
                      RUN_DRIFT)
    assert wide.source == NoiseSource.SCATTER and wide.dof == 1.0


def test_several_runs_are_averaged_on_the_log_scale_the_test_works_on() -> None:
    # speeds 0.5 and 2.0: their geometric mean is 1.0 (the arithmetic one, 1.25, would call
    # a head at 1.0 20% slower)
    result = compare([run(0.5), run(2.0)], run(1.0))
    assert result.gate_change == pytest.approx(0.0, abs=1e-12)


def test_welch_dof_of_assumed_noise_is_infinite() -> None:
    single = side_noise([run(1.0)], [1.0], GATE, RUN_DRIFT)
    assert welch_dof([single, single]) == math.inf


@pytest.mark.parametrize(("spread", "words"), [
    (0.27, "wider than the 10% threshold itself"),
    (0.10, "wider than the 10% threshold itself"),
    (0.06, "more than half the 10% threshold"),
])
def test_the_spread_warning_says_how_it_compares_with_the_threshold(spread: float,
                                                                    words: str) -> None:
    text = spread_warning("base", 8, spread, 0.10)
    assert words in text and "close to" not in text
    assert f"spreads {spread * 100:.1f}%" in text
