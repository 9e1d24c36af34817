"""The verdict of ``diagnose compare --ab``, and its files (``ab.json``, ``ab.md``).

The profiler timed base and head in pairs of short blocks, in a seeded random order within
each pair (profiler/ab_run.py). Each pair gives one ratio, head over base step time: the
drift of the machine over minutes moves both blocks of a pair alike and cancels in it. The
judge (:func:`judge`) reads:

- **Work, exact** (as ``compare`` does, records/work.py): each side's counted FLOPs, bytes
  and op calls per step at the batch size. More than ``threshold`` more of any is a
  regression, whatever the clock said.
- **Time, paired**: the median ratio with its distribution-free 95% interval
  (:func:`batchscope.stats.paired_ratio_interval`: order statistics, no assumption on the
  shape of the noise), against :func:`ratio_bar` = 1 / (1 - ``threshold``) (1.111 at the
  default 10%: the step time at which throughput has dropped by the threshold).

  * **regression** (exit 1): the whole interval lies above 1 (the head is slower beyond the
    pairs' noise) *and* the median passes the bar. The interval alone would flag a real but
    tiny slowdown, or a steady difference between two worker processes of identical code
    (where each sits in memory, on which core); the bar alone would flag noise.
  * **no regression**: the interval's upper end is at or below the bar, so a slowdown past
    the threshold is ruled out at 95%.
  * **inconclusive** (exit 0): neither, so the pairs were too noisy to tell: more
    ``--pairs``, a quieter machine, or (on a shared CPU) ``--threads 1``. Either the
    interval reaches both 1 and the bar, or it lies above 1 (slower beyond the noise) and
    reaches past the bar while the median falls short of it (:class:`TimeCall`).

  Simulated with 30 pairs whose log ratios scatter by σ (tests/reports/test_ab_compare.py):
  a 15% slower step (ratio 1.15) is caught in 97% of runs at σ = 8%, 95% at σ = 10% and 90%
  at σ = 12%; identical code is flagged in under 0.1% of runs at σ up to 15% (the rule needs
  the interval past 1, which the median of identical code's ratios leaves in ≤ 2.5% of runs,
  *and* a median past 1.111). Measured on this project's 2-core VM while other test
  suites kept a load of 6-8 on it (samples/mlp.py at batch 64, 30 pairs of 0.2 s blocks,
  ``--threads 1``): identical files 0.994× (0.959-1.030), no regression; a copy that spins
  15% of each forward's time after it 1.188× (1.153-1.223), a regression; the ratios
  scattered by ~10% (from their median absolute deviation). With both cores' threads the
  scatter passed 100% (a foreign process on one core stalls every step's thread barrier):
  the verdicts held (1.000×, 0.924-1.100; 1.318×, 1.063-2.495) but with little to spare.

An ``ab.json`` from outside (the comment workflow's CI artifact, docs/github-actions.md) is
read by :func:`load_ab` as its typed measurement only, and judged again here.

Example:
    >>> time_rule([1.0, 1.02, 0.99, 1.01, 1.0, 0.98], 0.10)
    (False, False)
"""

from __future__ import annotations

import json
import math
import os
import statistics
from enum import Enum
from pathlib import Path

from batchscope.records import Interval, Status
from batchscope.records.ab import (
    AB_SCHEMA,
    INNER_INTERVAL_PAIRS,
    ABComparison,
    ABMeasurement,
    ABPair,
    ABStop,
    ABStopKind,
    first_line,
)
from batchscope.records.codec import decode_ab
from batchscope.records.work import WorkDelta, work_delta
from batchscope.reports import fmt
from batchscope.reports.compare import verdict_label, work_sentence
from batchscope.reports.json_report import atomic_write_text, read_capped
from batchscope.stats import median_interval, paired_ratio_interval
from batchscope.typed_json import to_builtins

AB_JSON = "ab.json"
AB_MARKDOWN = "ab.md"
# ab.json holds two sides and the pairs (30 by default, a few hundred bytes each): far under
# this. A larger file is not ours, and is refused before it is read.
MAX_AB_BYTES = 8 * 2**20


def ratio_bar(threshold: float) -> float:
    """The step-time ratio whose throughput drop is ``threshold``: 1 / (1 - threshold)."""
    return 1.0 / (1.0 - threshold)


class TimeCall(Enum):
    """What the paired interval says against 1 and :func:`ratio_bar`."""

    REGRESSION = "regression"  # the interval above 1, the median past the bar
    SLOWER_WITHIN = "slower_within"  # the interval above 1, wholly at or below the bar
    SAME = "same"  # the interval reaches 1, its upper end at or below the bar
    # Inconclusive: the interval passes the bar, and
    SPANS_ONE_AND_BAR = "spans_one_and_bar"  # it reaches 1 too: faster to much slower
    SLOWER_MAYBE_PAST = "slower_maybe_past"  # it lies above 1, the median short of the bar

    @property
    def inconclusive(self) -> bool:
        """Neither a regression nor ruled out."""
        return self in (TimeCall.SPANS_ONE_AND_BAR, TimeCall.SLOWER_MAYBE_PAST)


def time_call(median: float, low: float, high: float, threshold: float) -> TimeCall:
    """The call on a median ratio and its 95% interval (:func:`paired_ratio_interval`'s)."""
    bar = ratio_bar(threshold)
    if low > 1.0 and median > bar:
        return TimeCall.REGRESSION
    if high > bar:
        return TimeCall.SLOWER_MAYBE_PAST if low > 1.0 else TimeCall.SPANS_ONE_AND_BAR
    return TimeCall.SLOWER_WITHIN if low > 1.0 else TimeCall.SAME


def time_rule(ratios: list[float], threshold: float) -> tuple[bool, bool]:
    """(regression, inconclusive) for paired head/base step-time ratios: a regression when
    the median's 95% interval lies wholly above 1 and the median passes :func:`ratio_bar`;
    no regression when the interval's upper end is at or below the bar; else inconclusive
    (no pairs: neither)."""
    if not ratios:
        return False, False
    call = time_call(*paired_ratio_interval(ratios), threshold)
    return call == TimeCall.REGRESSION, call.inconclusive


def round_medians(pairs: list[ABPair]) -> list[float]:
    """The median ratio of each round's pairs (one pair of worker processes each), in
    round order; one value for a run of one round.

    Example:
        >>> round_medians([ABPair(0, False, 1.0, 0.86, 0), ABPair(1, True, 1.0, 0.88, 0),
        ...                ABPair(2, False, 1.0, 2.03, 1)])
        [0.87, 2.03]
    """
    by_round: dict[int, list[float]] = {}
    for p in pairs:
        by_round.setdefault(p.round, []).append(p.ratio)
    return [statistics.median(by_round[r]) for r in sorted(by_round)]


def across_rounds(medians: list[float], low: float, high: float) -> tuple[float, float]:
    """The pairs' interval ``(low, high)`` widened for the processes: a pair of worker
    processes can run at its own speed for its whole life, so one pair of processes must
    not decide alone. With fewer rounds than :data:`INNER_INTERVAL_PAIRS` the interval holds
    every round's median; with as many or more, the rounds' medians are samples of their
    own, and it holds their median's distribution-free 95% interval.

    Example:
        >>> across_rounds([0.86, 2.03, 1.0], 0.98, 1.05)
        (0.86, 2.03)
    """
    if len(medians) < 2:
        return low, high
    if len(medians) < INNER_INTERVAL_PAIRS:
        return min(low, *medians), max(high, *medians)
    r_low, r_high = median_interval(medians)
    return min(low, r_low), max(high, r_high)


def stop_text(stop: ABStop) -> str:
    """Why the pairs stopped early, in words."""
    if stop.kind == ABStopKind.INTERRUPTED:
        return f"interrupted by the user during pair {stop.pair}"
    side = "head" if stop.kind == ABStopKind.HEAD_FAILED else "base"
    status = stop.status.value if stop.status is not None else "failed"
    return f"the {side} failed a timing block at pair {stop.pair} ({status}: " \
           f"{first_line(stop.error)})"


def _time_text(call: TimeCall, b: int, ratio: float, interval: Interval, pairs: int,
               threshold: float, medians: list[float] | None = None) -> str:
    bar = _ratio(ratio_bar(threshold))
    rounds = ""
    if medians and len(medians) > 1:
        rounds = (f" over {len(medians)} pairs of worker processes, their medians "
                  f"{', '.join(_ratio(x) for x in medians)}")
    text = (f"step time at batch {b}, head over base, {_ratio(ratio)} (95% interval "
            f"{_ratio(interval.low)}–{_ratio(interval.high)}, {pairs} interleaved "
            f"pairs{rounds}): throughput {fmt.signed_pct(1.0 / ratio - 1.0)}, the threshold "
            f"is −{fmt.pct(threshold)}")
    if call == TimeCall.SPANS_ONE_AND_BAR:
        text += (f" — the interval reaches both 1 and {bar} (the threshold's step time): "
                 "too noisy to tell; rerun with more --pairs to decide")
    elif call == TimeCall.SLOWER_MAYBE_PAST:
        text += (f" — slower beyond the pairs' noise (the interval lies above 1), and the "
                 f"interval reaches past {bar} (the threshold's step time) while the median "
                 "is within it: too noisy to tell whether the drop passes the threshold; "
                 "rerun with more --pairs to decide")
    elif call == TimeCall.SLOWER_WITHIN:
        text += " — slower beyond the pairs' noise, but within the threshold"
    return text


def judge(m: ABMeasurement, threshold: float) -> ABComparison:
    """The verdict on an A/B run (``threshold``: the largest tolerated throughput drop and
    work growth, a share)."""
    b = m.batch_size
    warnings = []
    work: WorkDelta | None = None
    if m.base.work is not None and m.head.work is not None:
        work = work_delta(b, m.base.work, m.head.work, threshold)
    work_regression = work is not None and bool(work.more_work)
    ratios = [p.ratio for p in m.pairs]
    ratio = interval = change = call = None
    if ratios:
        ratio, low, high = paired_ratio_interval(ratios)
        low, high = across_rounds(round_medians(m.pairs), low, high)
        interval = Interval(low, high)
        change = 1.0 / ratio - 1.0
        call = time_call(ratio, low, high, threshold)
    time_regression = call == TimeCall.REGRESSION
    inconclusive = call is not None and call.inconclusive
    head_failed = m.head.status != Status.OK
    if head_failed:
        time_regression, inconclusive = True, False
    regression = time_regression or work_regression
    inconclusive = inconclusive and not regression
    if head_failed:
        time_text = (f"the head could not run batch {b} ({m.head.status.value}: "
                     f"{first_line(m.head.error)}), the base could")
    elif ratio is None or interval is None or call is None:
        time_text = f"no pair was timed at batch {b}"
    else:
        time_text = _time_text(call, b, ratio, interval, len(ratios), threshold,
                               round_medians(m.pairs))
    work_text = work_sentence(b, work, threshold, where="")
    parts = [work_text, time_text] if work_regression else [time_text, work_text]
    verdict = f"{verdict_label(regression, inconclusive)}: " + "; ".join(parts)
    if m.stop is not None:
        warnings.append(f"the pairs stopped after {len(m.pairs)} of {m.pairs_asked}: "
                        f"{stop_text(m.stop)}")
    if 0 < len(ratios) < INNER_INTERVAL_PAIRS:
        warnings.append(f"only {len(ratios)} pairs: the interval is their whole range "
                        f"(an inner one needs {INNER_INTERVAL_PAIRS})")
    bm, hm = m.base.model, m.head.model
    for key, vb, vh in (("unit", bm.unit, hm.unit), ("mode", bm.mode.value, hm.mode.value),
                        ("dtype", bm.dtype, hm.dtype), ("device", bm.device, hm.device)):
        if vb != vh:
            warnings.append(f"{key} differs: {vb} in the base, {vh} in the head")
    if ratio is not None and interval is not None and len(ratios) >= 2 and \
            max(math.log(interval.high / ratio), math.log(ratio / interval.low)) > threshold / 2:
        spread = _robust_sd(ratios)
        hint = "a quieter machine, a longer --block-time or more --pairs sharpen it"
        if bm.device.startswith("cpu") and (bm.threads or 0) > 1:
            hint = (f"on a shared CPU, --threads 1 keeps a foreign process from stalling the "
                    f"barrier of every step's {bm.threads} threads (on a loaded 2-core VM it "
                    "took the scatter from over 100% to about 6%); else " + hint)
        warnings.append(f"the interval of the median ratio reaches more than half the "
                        f"{fmt.pct(threshold)} threshold from it: the pairs' ratios scatter by "
                        f"{fmt.pct(spread, 1)} (one standard deviation of their logs, from "
                        f"their median absolute deviation); {hint}")
    return ABComparison(
        schema=AB_SCHEMA, measurement=m, threshold=threshold, ratio=ratio,
        ratio_interval=interval, throughput_change=change, work=work,
        time_regression=time_regression, work_regression=work_regression,
        regression=regression, inconclusive=inconclusive, verdict=verdict, warnings=warnings)


def _ratio(value: float) -> str:
    return f"{value:.3f}×"


# The median absolute deviation of a normal sample times this is its standard deviation.
MAD_TO_SD = 1.4826


def _robust_sd(ratios: list[float]) -> float:
    """The scatter of the ratios' logs, from their median absolute deviation: a stall that
    hit one block in a pair moves it no more than any other ratio past the median."""
    logs = [math.log(r) for r in ratios if r > 0]
    if len(logs) < 2:
        return 0.0
    mid = statistics.median(logs)
    return MAD_TO_SD * statistics.median(abs(x - mid) for x in logs)


def ab_json(c: ABComparison) -> str:
    """``ab.json``'s text: the typed record, every field."""
    return json.dumps(to_builtins(c), indent=1, allow_nan=False) + "\n"


def load_ab(path: str | os.PathLike[str]) -> ABMeasurement:
    """Read an ``ab.json`` that came from outside (a CI artifact) as its typed measurement;
    judge it again with :func:`judge` (the verdict in the file is the writer's, not read).

    Example:
        >>> verdict = judge(load_ab("batchscope-ab/ab.json"), 0.10)  # doctest: +SKIP

    Raises:
        UsageError: one sentence naming the file and what is wrong with it (exit 4).
    """
    path = Path(path)
    return decode_ab(read_capped(path, MAX_AB_BYTES, "an A/B result"), str(path))


def write_ab(c: ABComparison, out_dir: str | Path, markdown: str) -> list[Path]:
    """Write ``ab.json`` and ``ab.md`` (``markdown``, compare_render.render_ab_markdown's)
    into ``out_dir`` (made if need be); the paths written."""
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / AB_JSON, folder / AB_MARKDOWN]
    atomic_write_text(paths[0], ab_json(c))
    atomic_write_text(paths[1], markdown)
    return paths
