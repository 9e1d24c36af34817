"""Phrases the explanation's sections and banners share: a section's record, the speedup and
the equivalent set in words, bounds and ops named."""

from __future__ import annotations

from dataclasses import dataclass, field

from batchscope.records import (
    Bound,
    OpStat,
    Recommendation,
    Report,
    RuleKind,
)
from batchscope.reports import fmt
from batchscope.reports import view as v

# A speedup from batching this large is not "little to share": the prose says where it
# came from rather than denying it.
NOTABLE_SPEEDUP = 1.5

# A share of the step from which it is "most of the step": words such as "mostly" or a
# verdict ("compute-bound", "launch-bound") need the share to hold a majority.
MAJORITY_SHARE = 0.5

@dataclass
class Section:
    """One titled part of the explanation."""

    key: str
    title: str
    paragraphs: list[str] = field(default_factory=list)

def bound_words(bound: Bound) -> str:
    """``Bound.MEMORY`` -> ``"memory-bound"``; an op the roofline could not place says so."""
    if bound in (Bound.MEMORY, Bound.COMPUTE, Bound.OVERHEAD):
        return f"{bound.value}-bound"
    if bound == Bound.COMMUNICATION:
        return "communication (collectives: NCCL on a GPU, gloo on a CPU)"
    if bound == Bound.TRANSFER:
        return "a copy between host and device"
    return "not classified (no FLOP formula or no ceilings)"

def module_of(op: OpStat) -> str:
    """The module path an op ran under, quoted (``*`` stands for several siblings)."""
    return f"“{op.module}”"

def speedup_band(rec: Recommendation) -> str:
    """The speedup from batching with its 95% interval: ``"82.4× (68.2–97.1×)"``."""
    return fmt.ratio_band(rec.speedup_from_batching, rec.speedup_interval)

def peak_ridge_words(report: Report, ridge: float) -> str:
    """The ridge point of the peak of the dtype the matmuls ran in, with whose it is."""
    hw = v.hardware(report)
    whose = "the datasheet's" if hw is not None and hw.source == "datasheet" \
        else "this machine's"
    return (f"the ridge point of {whose} {v.ridge_dtype(report)} peak "
            f"({fmt.number(ridge)} FLOP/byte)")

def speedup_text(rec: Recommendation) -> str:
    """What batching did to throughput, read from the speedup's interval: a lift only where
    its low end is above 1.0, a loss only where its high end is below it, else "within
    noise"; "" with one batch size.

    Example:
        >>> from batchscope.records import Rule
        >>> rec = Recommendation(8, Rule(RuleKind.NEAR_BEST, 0.9, 8, 90.0), 1.08, 1, None,
        ...                      None, False, speedup_interval=Interval(0.97, 1.2))
        >>> speedup_text(rec)  # doctest: +NORMALIZE_WHITESPACE
        "Batching's gain over batch 1 is within noise: the best throughput is 1.1×
        (0.97–1.2×) batch 1's"
        >>> import dataclasses
        >>> speedup_text(dataclasses.replace(rec, speedup_interval=Interval(1.02, 1.2)))
        'Batching lifts throughput 1.1× (1.0–1.2×) over batch 1'
        >>> speedup_text(dataclasses.replace(rec, speedup_from_batching=0.8,
        ...                                  speedup_interval=Interval(0.7, 0.9)))
        ... # doctest: +NORMALIZE_WHITESPACE
        "Batching lowers throughput beyond noise: the best throughput is 0.8× (0.7–0.9×)
        batch 1's"
    """
    speedup, base = rec.speedup_from_batching, rec.speedup_baseline_batch
    if speedup is None:
        return ""
    if v.speedup_is_loss(rec):
        return (f"Batching lowers throughput beyond noise: the best throughput is "
                f"{speedup_band(rec)} batch {base}'s")
    if v.speedup_within_noise(rec):
        return (f"Batching's gain over batch {base} is within noise: the best throughput is "
                f"{speedup_band(rec)} batch {base}'s")
    return f"Batching lifts throughput {speedup_band(rec)} over batch {base}"

def sizes_text(sizes: list[int]) -> str:
    """``[256, 512, 1024]`` -> ``"256, 512 and 1024"``."""
    words = [str(b) for b in sizes]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"

def equivalence_text(rec: Recommendation) -> str:
    """Which batch sizes noise cannot tell from the pick, and the rule that chose among
    them; "" where the rule is not the throughput rule (energy, one size) or the report
    predates intervals.

    Example:
        >>> from batchscope.records import Rule
        >>> rec = Recommendation(256, Rule(RuleKind.NEAR_BEST, 0.9, 512, 9.0), 3.0, 1, None,
        ...                      None, False, equivalent_batch_sizes=[256, 512, 1024])
        >>> equivalence_text(rec)  # doctest: +NORMALIZE_WHITESPACE
        'Batch sizes 256, 512 and 1024 are equivalent within noise; the rule picks the
        smallest whose throughput could be within 90% of the best.'
    """
    sizes = rec.equivalent_batch_sizes
    if not sizes or rec.rule.kind not in (RuleKind.NEAR_BEST, RuleKind.ENERGY_UNAVAILABLE):
        return ""
    share = fmt.pct(rec.near_best_share)
    if sizes == [rec.batch_size]:
        return (f"No other batch size measured is equivalent to batch {rec.batch_size} within "
                f"noise: no other's throughput interval reaches {share} of the bottom of the "
                "best's.")
    curve = rec.rule.curve
    fitted = (" and that the step time fitted through the sizes considered does not put "
              "below that share" if curve is not None and curve.passed_over else "")
    return (f"Batch sizes {sizes_text(sizes)} are equivalent within noise; the rule picks the "
            f"smallest whose throughput could be within {share} of the best{fitted}.")

def share_text(rec: Recommendation, unit: str) -> str:
    """The pick's throughput as a share of the best's, with its interval: what the rule
    gave up for a smaller batch; "" where the pick is the best."""
    share = rec.pick_share_of_best
    if share is None or rec.batch_size == rec.best_batch_size:
        return ""
    return (f"Batch {rec.batch_size} gives {fmt.pct_band(share, rec.pick_share_of_best_interval)} "
            f"of the best measured throughput (batch {rec.best_batch_size}, "
            f"{fmt.rate(rec.best_throughput_per_s, unit)}).")

def accumulation_steps_text(n: int | None) -> str:
    return f"{n} gradient-accumulation step{'s' if n != 1 else ''}"

def dp_pct(value: float) -> str:
    """A share small enough to need its digits: "0.4%", not "0%"."""
    return fmt.pct(value, 0 if value >= 0.095 else 1 if value >= 0.0095 else 2)
