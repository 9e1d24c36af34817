"""The statistics every decision reads, on seeded synthetic samples (no timing here)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from batchscope.stats import (
    bootstrap_interval,
    mann_whitney_u,
    median_ci_rel,
    median_interval,
    paired_ratio_interval,
    ratio_interval,
)


def _skewed(rng: random.Random, n: int, median: float) -> list[float]:
    """Step times as a shared VM gives them: log-normal around ``median``, every tenth
    step hit by a hiccup up to 3x."""
    out = []
    for _ in range(n):
        x = median * math.exp(rng.gauss(0.0, 0.05))
        out.append(x * rng.uniform(1.5, 3.0) if rng.random() < 0.1 else x)
    return out


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(1)
    # The population median of _skewed: found once from a very large sample.
    truth = statistics.median(_skewed(random.Random(99), 200_000, 1.0))
    covered = 0
    trials = 400
    for _ in range(trials):
        low, high = median_interval(_skewed(rng, 40, 1.0))
        covered += low <= truth <= high
    assert 0.90 <= covered / trials <= 0.995


@pytest.mark.parametrize("n", [9, 20, 50, 100, 1000])
def test_the_median_ranks_cover_at_least_95_percent_exactly(n):
    """The order statistics chosen cover the median with probability 1 - 2·P(Bin(n, 1/2) <
    j), computed exactly, at least 95%, and the next rank in would not."""
    ordered = [float(i) for i in range(n)]
    low, high = median_interval(ordered)
    j = int(low) + 1  # 1-based rank of the low end
    assert high == ordered[n - j]

    def coverage(rank: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(rank)) / 2 ** n

    assert coverage(j) >= 0.95
    assert coverage(j + 1) < 0.95


def test_the_median_interval_of_few_values_is_their_range_and_empty_is_an_error():
    assert median_interval([2.0, 1.0]) == (1.0, 2.0)
    assert median_interval([float(i) for i in range(8)]) == (0.0, 7.0)
    assert median_interval([4.0]) == (4.0, 4.0)
    assert median_ci_rel([4.0]) == math.inf
    with pytest.raises(ValueError):
        median_interval([])


def test_a_ratio_of_intervals_is_taken_at_their_ends():
    assert ratio_interval((9.0, 11.0), (1.0, 2.0)) == (4.5, 11.0)
    assert ratio_interval((9.0, 11.0), (0.0, 2.0)) == (0.0, math.inf)


def test_mann_whitney_rejects_a_shift_and_rarely_rejects_the_same_distribution():
    rng = random.Random(2)
    false_alarms = sum(
        mann_whitney_u(_skewed(rng, 20, 1.0), _skewed(rng, 20, 1.0)) < 0.05
        for _ in range(300))
    assert false_alarms / 300 <= 0.08
    assert mann_whitney_u(_skewed(rng, 20, 1.0), _skewed(rng, 20, 1.15)) < 0.01
    assert mann_whitney_u([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert mann_whitney_u([], [1.0]) == 1.0


def test_paired_ratios_cancel_drift_that_unpaired_medians_cannot():
    """Base and head timed in alternating blocks on a machine whose speed wanders by 30%:
    the ratio of each pair keeps the head's 15% slowdown, the medians of each side blur it."""
    rng = random.Random(3)
    detected = unpaired = 0
    for _ in range(100):
        ratios, base_all, head_all = [], [], []
        for _ in range(20):
            speed = rng.uniform(0.85, 1.15)  # the machine's speed for this pair
            base = speed * math.exp(rng.gauss(0.0, 0.02))
            head = 1.15 * speed * math.exp(rng.gauss(0.0, 0.02))
            ratios.append(head / base)
            base_all.append(base)
            head_all.append(head)
        median, low, high = paired_ratio_interval(ratios)
        detected += low > 1.0
        assert low <= median <= high
        # Unpaired, each side's median with its own interval: the drift hides the slowdown.
        _, base_high = median_interval(base_all)
        head_low, _ = median_interval(head_all)
        unpaired += head_low > base_high
    assert detected >= 95
    assert unpaired <= detected - 20  # 68 of 100 here, against 100 paired


def test_identical_sides_paired_are_rarely_called_different():
    rng = random.Random(4)
    false_alarms = 0
    for _ in range(200):
        ratios = [math.exp(rng.gauss(0.0, 0.03)) for _ in range(20)]
        _, low, high = paired_ratio_interval(ratios)
        false_alarms += not low <= 1.0 <= high
    assert false_alarms / 200 <= 0.06


def test_bootstrap_is_seeded_and_says_nothing_from_too_few_figures():
    def draw(rng: random.Random) -> float:
        return rng.gauss(5.0, 0.5)

    assert bootstrap_interval(draw) == bootstrap_interval(draw)
    low, high = bootstrap_interval(draw)
    assert 3.8 < low < 4.2 and 5.8 < high < 6.2
    assert bootstrap_interval(lambda rng: None) is None
