"""The sweep's predicted stop, as a phase in two pure steps: which kernel probes it wants
(probe_plan.stop_probe_specs, once the stop can judge), then a decision on their times
(step_model.predicted_stop). The sweep runs the probes in
between; nothing here calls back into it.

Example:
    >>> policy = EarlyStop(Limits())  # doctest: +SKIP
    >>> specs = policy.probes(results, remaining, ceilings)  # doctest: +SKIP
    >>> stop = policy.decide(results, remaining, ceilings, sweep.probe(specs))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscope.classifiers.analyze import work_varies_with_inputs
from batchscope.classifiers.coverage import has_hole
from batchscope.classifiers.recommend import NEAR_BEST_SHARE, recommend
from batchscope.classifiers.roofline import achieved_ceilings, classify_batch
from batchscope.classifiers.step_model import plateau_overruled, predicted_stop
from batchscope.classifiers.uncertainty import throughput_interval
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.probe_plan import stop_probe_specs
from batchscope.records import BatchResult, Flag, Status, Stop
from batchscope.records.probe import ProbeSpec


@dataclass(frozen=True)
class EarlyStop:
    """The predicted stop of one sweep: its limits and objective. Throughput only: an
    energy pick has no step-time model."""

    limits: Limits
    objective: str = "throughput"

    def applies(self, results: list[BatchResult]) -> bool:
        """Throughput only, over work that is the batch's (not the data's) and counted: a
        step with a hole in its counts (coverage.has_hole) has time the model cannot see."""
        return (self.objective == "throughput" and not work_varies_with_inputs(results)
                and not any(has_hole(r) for r in results))

    def probes(self, results: list[BatchResult], remaining: list[int],
               ceilings: Ceilings) -> list[ProbeSpec]:
        """The kernel probes the decision reads ([] when it will not judge: nothing is
        timed for a decision that cannot stop)."""
        if not self.applies(results) or self._pick(results, ceilings) is None:
            return []
        return stop_probe_specs(results, remaining)

    def decide(self, results: list[BatchResult], remaining: list[int], ceilings: Ceilings,
               probes_s: dict[str, float]) -> Stop | None:
        """The stop, judged against the batch size the rule picks from ``results`` so far;
        None to go on."""
        if not self.applies(results):
            return None
        picked = self._pick(results, ceilings)
        if picked is None:
            return None
        batches, pick_per_s = picked
        return predicted_stop(batches, achieved_ceilings(ceilings, results), remaining,
                              pick_per_s, NEAR_BEST_SHARE, probes_s)

    def overrules_plateau(self, results: list[BatchResult], remaining: list[int],
                          ceilings: Ceilings, bar_per_s: float,
                          probes_s: dict[str, float]) -> Flag | None:
        """Why the plateau rule's stop is overruled (step_model.plateau_overruled), or None
        to let it stand; the kernel probes of :meth:`probes` are its inputs too."""
        if not self.applies(results):
            return None
        achieved = achieved_ceilings(ceilings, results)
        batches = [classify_batch(r, achieved) for r in results]
        return plateau_overruled(batches, achieved, remaining, bar_per_s, probes_s)

    def deciding_sizes(self, results: list[BatchResult], ceilings: Ceilings) -> list[int]:
        """The measured sizes the stop rests on: the pick so far, the best so far and the
        last measured (the one the model projects from); what the sweep times in paired
        rounds before it takes the stop."""
        ok = [r for r in results if r.status == Status.OK and r.throughput_per_s]
        if not ok:
            return []
        achieved = achieved_ceilings(ceilings, results)
        choice = recommend([classify_batch(r, achieved) for r in results], self.limits,
                           self.objective)
        sizes = {ok[-1].batch_size, max(ok, key=lambda r: r.throughput_per_s or 0.0).batch_size}
        if choice is not None:
            sizes.add(choice.batch_size)
        return sorted(sizes)

    def _pick(self, results: list[BatchResult], ceilings: Ceilings
              ) -> tuple[list[BatchResult], float] | None:
        """The results classified and the top of the throughput interval of the batch size
        the rule picks from them so far (the pick moves once a larger size's median passes
        it over the rule's share); None without a pick."""
        achieved = achieved_ceilings(ceilings, results)
        batches = [classify_batch(r, achieved) for r in results]
        choice = recommend(batches, self.limits, self.objective)
        picked = next((r for r in batches if choice and r.batch_size == choice.batch_size),
                      None)
        interval = throughput_interval(picked) if picked is not None else None
        if interval is None:
            return None
        return batches, interval.high
