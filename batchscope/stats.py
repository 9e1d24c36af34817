"""The statistics every decision reads: intervals from samples, ratios of intervals, paired
ratios and rank tests. Pure Python, no torch, no numpy; every random draw is seeded, so the
same samples give the same interval on any machine.

What each is for:

* :func:`median_interval`: the distribution-free 95% interval of a median from order
  statistics (no assumption on the shape of the step-time distribution, which is skewed:
  most steps fast, every few an allocator or scheduler hiccup). The timing pass stops on it
  (engine/policies.py), and every latency and throughput interval starts from it.
* :func:`ratio_interval`: a quotient of two independent figures (a speedup, a share of the
  best), taken at the ends: conservative, never narrower than either side's.
* :func:`paired_ratio_interval`: the A/B mode's judge. Base and head timed in alternating
  blocks give one ratio per pair; drift that moves both sides of a pair cancels in it
  (duet benchmarking, Bulej et al., ICPE 2020), and the median of the ratios has the same
  order-statistic interval.
* :func:`mann_whitney_u`: Google Benchmark's compare.py test over repetitions, for sides
  with several runs.
* :func:`student_t_cdf` and :func:`student_t_quantile`: Welch's test of ``compare`` over
  sides with a few runs each (no scipy for two functions).
* :func:`bootstrap_interval`: the percentile interval of any figure computed from figures
  with intervals (the knee of a curve), by drawing each input inside its own interval.

Example:
    >>> median_interval([1.0, 1.1, 1.0, 1.2, 1.05, 0.98, 1.02, 1.01, 1.03, 1.04])
    (1.0, 1.1)
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

# z of a two-sided 95% interval.
Z95 = 1.959963984540054
# Draws of a bootstrap: enough that the 2.5% and 97.5% percentiles move by less than a
# percent between seeds, few enough to cost milliseconds.
BOOTSTRAP_DRAWS = 400


def median_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """The distribution-free interval of the median of ``values`` at the confidence ``z``
    stands for (95% by default): the order statistics ``x_(j)`` and ``x_(n-j+1)`` for the
    largest ``j`` whose exact binomial coverage, ``1 - 2·P(Bin(n, 1/2) < j)``, is at least
    that confidence; at least 1, so with eight values or fewer it is their range (which
    covers 95% from six values on, 94% at five, less below).

    Raises:
        ValueError: ``values`` is empty.

    Example:
        >>> median_interval([3.0])
        (3.0, 3.0)
        >>> median_interval([5.0, 1.0, 3.0])
        (1.0, 5.0)
    """
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")
    j = _median_rank(n, math.erfc(z / math.sqrt(2)) / 2)
    return ordered[j - 1], ordered[n - j]


def _median_rank(n: int, tail: float) -> int:
    """The largest 1-based rank ``j`` with ``P(Bin(n, 1/2) <= j - 1) <= tail`` (at least 1)."""
    log_half_n = n * math.log(0.5)
    cumulative = 0.0
    j = 0
    while j < n // 2:
        # P(B = j), added before the rank j + 1 is tried: P(B <= j) is what x_(j+1) leaves out
        cumulative += math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                               + log_half_n)
        if cumulative > tail:
            break
        j += 1
    return max(j, 1)


def median_ci_rel(sorted_values: Sequence[float]) -> float:
    """Half-width of :func:`median_interval`, relative to the median (inf below 2 values or
    at a median of 0): what the adaptive timing pass stops on.

    Example:
        >>> round(median_ci_rel([1.0, 1.0, 1.1, 1.2, 1.2]), 3)  # (1.2 - 1.0) / 2 / 1.1
        0.091
    """
    if len(sorted_values) < 2:
        return math.inf
    median = statistics.median(sorted_values)
    if median <= 0:
        return math.inf
    lo, hi = median_interval(sorted_values)
    return (hi - lo) / 2 / median


def ratio_interval(num: tuple[float, float], den: tuple[float, float]) -> tuple[float, float]:
    """The interval of ``num / den`` for two independent positive intervals, at their ends.

    Example:
        >>> ratio_interval((90.0, 110.0), (45.0, 55.0))
        (1.6363636363636365, 2.4444444444444446)
    """
    (n_lo, n_hi), (d_lo, d_hi) = num, den
    if d_lo <= 0 or d_hi <= 0:
        return (0.0, math.inf)
    return n_lo / d_hi, n_hi / d_lo


def paired_ratio_interval(ratios: Sequence[float]) -> tuple[float, float, float]:
    """(median, low, high) of paired ratios (head over base, one per interleaved pair), the
    interval :func:`median_interval`'s.

    Example:
        >>> paired_ratio_interval([1.1, 1.2, 1.15, 1.14, 1.16, 1.13])
        (1.145, 1.1, 1.2)
    """
    if not ratios:
        raise ValueError("no ratios")
    low, high = median_interval(ratios)
    return statistics.median(ratios), low, high


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> float:
    """The two-sided p-value of the Mann-Whitney U test that ``a`` and ``b`` come from the
    same distribution: normal approximation with the tie correction (what scipy's
    ``mannwhitneyu(method="asymptotic")`` gives, with its continuity correction); 1.0 when
    either side is empty or every value ties.

    Example:
        >>> round(mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]), 4)
        0.0122
    """
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return 1.0
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    ranks = [0.0] * len(pooled)
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[k] = rank
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r1 = sum(r for r, (_, side) in zip(ranks, pooled) if side == 0)
    u1 = r1 - n1 * (n1 + 1) / 2
    mean = n1 * n2 / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u1 - mean) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))


def student_t_cdf(t: float, dof: float) -> float:
    """P(T ≤ t) for Student's t with ``dof`` degrees of freedom (the normal's when
    infinite), from the regularized incomplete beta function.

    Example:
        >>> round(student_t_cdf(2.776, 4), 3), round(student_t_cdf(1.96, math.inf), 3)
        (0.975, 0.975)
    """
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    if math.isinf(dof) or dof > 1e7:
        return 0.5 * math.erfc(-t / math.sqrt(2.0))
    tail = 0.5 * _beta_inc(dof / 2.0, 0.5, dof / (dof + t * t))
    return 1.0 - tail if t > 0 else tail


def student_t_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of Student's t (0.5 < p < 1), by bisection on :func:`student_t_cdf`.

    Example:
        >>> round(student_t_quantile(0.975, 1), 2), round(student_t_quantile(0.975, 10), 3)
        (12.71, 2.228)
    """
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, dof) < p:
        hi *= 2.0
        if hi > 1e12:
            return hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if student_t_cdf(mid, dof) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2


def _beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Numerical Recipes' continued
    fraction, modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _beta_inc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return front * h / a


def lognormal_draw(rng: random.Random, value: float, low: float, high: float) -> float:
    """One draw of a positive figure whose 95% interval is ``[low, high]`` around ``value``:
    log-normal, its spread taken from the wider side (a one-sided interval stays honest)."""
    if value <= 0 or low <= 0 or high <= 0:
        return value
    sigma = max(math.log(value / low), math.log(high / value), 0.0) / Z95
    return value * math.exp(rng.gauss(0.0, sigma)) if sigma > 0 else value


def bootstrap_interval(figure: Callable[[random.Random], float | None],
                       draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float] | None:
    """The 2.5% and 97.5% percentiles of ``figure`` over ``draws`` seeded draws (each call
    draws its own inputs from the generator it is given); None when fewer than half the
    draws gave a figure.

    Example:
        >>> lo, hi = bootstrap_interval(lambda rng: rng.gauss(10.0, 1.0))
        >>> 7.5 < lo < 8.5 and 11.5 < hi < 12.5
        True
    """
    rng = random.Random(seed)
    values = sorted(v for _ in range(draws) if (v := figure(rng)) is not None
                    and math.isfinite(v))
    if len(values) < draws / 2:
        return None
    return _quantile(values, 0.025), _quantile(values, 0.975)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
