"""The one assembler: what a sweep, a ``watch``, a trace or a data-parallel run measured,
turned into a complete :class:`~batchscope.records.Report`, every section included.

The front ends (``api``, ``watching``, ``traces.diagnose``, the trainer callbacks) only say
what they measured, in a :class:`Measured`; the classification, the predictions, the
recommendation, the flags and the sections (serving, sequence grid, allocator, data
parallel, estimates) are made here, once, and nothing changes the report after. Numbers
only: the sentences are the reports layer's.

Example:
    >>> report = assemble(Measured(model, run, ceilings, results, Limits()))  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from batchscope.classifiers.allocator import (
    allocator_summary,
    page_fault_flags,
    page_fault_share,
    pick_without_page_faults,
)
from batchscope.classifiers.analyze import (
    accumulation,
    amp_measured_flags,
    ceiling_flags,
    compiled_flags,
    dtype_hints,
    failed_flags,
    noise_flags,
    run_flags,
    unmeasured_sizes,
    work_flags,
    work_varies_with_inputs,
)
from batchscope.classifiers.coverage import uncounted_work
from batchscope.classifiers.critical_batch import (
    ComputeBoundPrediction,
    KneePrediction,
    measured_knee,
    predict_compute_bound_batch,
    predict_critical_batch,
)
from batchscope.classifiers.data_parallel import data_parallel_summary
from batchscope.classifiers.estimate import estimate_batch
from batchscope.classifiers.evidence import evidence
from batchscope.classifiers.kernel_roofline import counter_flags, judge_ops
from batchscope.classifiers.recommend import NEAR_BEST_SHARE, Choice, predicted_pick, recommend
from batchscope.classifiers.roofline import (
    achieved_ceilings,
    batch_response,
    classify_batch,
    families_run,
    time_share,
)
from batchscope.classifiers.sequence_grid import sequence_grid_section
from batchscope.classifiers.step_model import median_peaks, predict
from batchscope.classifiers.uncertainty import drift_allowance, knee_interval, with_intervals
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.records import (
    BatchResult,
    Flag,
    GridPoint,
    Interval,
    ModelInfo,
    PredictionTerms,
    Recommendation,
    Report,
    RunInfo,
    Status,
    Stop,
    StopKind,
)
from batchscope.records.counter_report import CountersSection
from batchscope.records.flag_payloads import GlobalBatchInInference
from batchscope.records.report import AllocatorSetBy, Estimate, Mode, Source
from batchscope.records.target import TargetSection
from batchscope.serving.report_section import serving_section


@dataclass
class Measured:
    """What one run measured, from whichever front end, before any judgement.

    Attributes:
        model, run: what was measured and how.
        ceilings: the roofs (measured, cached, or a GPU's datasheet); None: unclassified.
        results: every batch size tried, in order.
        limits: the user's limits (and the sizes the plan would have tried).
        stop: why the sweep ended where it did.
        partial: interrupted (or the loop ended early): the report says so.
        in_progress: written between batch sizes of a running sweep: no pick is made from
            the predictions of sizes it is about to measure.
        objective: "throughput" or "energy".
        probes_s: kernel probe times by key (the step-time model's).
        global_batch: --global-batch.
        flags: what the front end noticed (the ceilings failed, a trace it could not read,
            the trainer a callback watched).
        grid: the second axis's points (CONTEXTS or SEQ_LENS).
        kept_buffers: the batch sizes timed again with the allocator keeping its buffers,
            and how it was told to.
        estimate_factors: ``watch``: estimate these multiples of the measured batch size.
        recommends: False for a trace of unknown batch size: nothing to recommend.
    """

    model: ModelInfo
    run: RunInfo
    ceilings: Ceilings | None
    results: list[BatchResult]
    limits: Limits = field(default_factory=Limits)
    stop: Stop | None = None
    partial: bool = False
    in_progress: bool = False
    objective: str = "throughput"
    probes_s: dict[str, float] = field(default_factory=dict)
    global_batch: int | None = None
    flags: list[Flag] = field(default_factory=list)
    grid: list[GridPoint] = field(default_factory=list)
    kept_buffers: list[BatchResult] = field(default_factory=list)
    kept_buffers_set_by: AllocatorSetBy | None = None
    estimate_factors: tuple[int, ...] = ()
    recommends: bool = True
    # diagnose trace --ncu and diagnose ncu: the profiled kernels, and the ops joined to
    # them (unjudged).
    counters: CountersSection | None = None
    # diagnose --target-gpu: the prediction on a named GPU (nothing measured here).
    target: TargetSection | None = None


def assemble(m: Measured) -> Report:
    """Classify every op, predict and measure B*, recommend a batch size, flag what the
    reader should know, and build every section that applies. A report of what was not
    measured here (Nsight Compute's exports alone, a prediction on a named GPU) holds its
    section and nothing to judge: the front end built it (traces/ncu_diagnose.py,
    target/predict.py, whose pick is classifiers/recommend's rule)."""
    if m.run.source in (Source.NCU, Source.TARGET) and not m.results:
        return Report(model=m.model, hardware=None, batches=[], recommendation=None,
                      run=m.run, stop=m.stop, flags=list(m.flags), counters=m.counters,
                      target=m.target)
    model = m.model
    ceilings = achieved_ceilings(m.ceilings, m.results) if m.ceilings is not None else None
    # A recorded trace has time shares without roofs (a CPU-only trace, a GPU not in the
    # datasheets); a sweep without ceilings leaves its ops unclassified.
    shares = m.run.source == Source.TRACE
    allowance = drift_allowance(m.run.drift)
    run = dataclasses.replace(m.run, drift_allowance=allowance)
    control = m.run.drift
    batches = [with_intervals(_classified(r, ceilings, shares), allowance,
                              control.timing(r.batch_size) if control is not None else None)
               for r in m.results]
    choice = (recommend(batches, m.limits, m.objective, allowance, m.run.rounds)
              if m.recommends else None)
    varies = work_varies_with_inputs(batches)  # then no curve describes batching alone
    prediction = None
    if ceilings is not None and not varies:
        prediction = predict(batches, ceilings, unmeasured_sizes(batches, m.limits),
                             m.probes_s, model.units_per_row)
    distributed = data_parallel_summary(model, batches, choice.batch_size if choice else None,
                                        m.global_batch, drift_allowance=allowance,
                                        control=control, prediction=prediction)
    # The step-time model has no term for the all-reduce: on a data-parallel sweep its
    # pick stands only where every size it predicts lies inside the band the measured
    # neighbours and all-reduces give (data_parallel.predicted_band).
    trusted = distributed is None or all(p.step_model_inside is not False
                                         for p in distributed.predictions)
    # Ops nobody counted took a share of a step: every figure read from the counts says
    # so, and the step-time model, which sees their time but not their work, moves no pick.
    uncounted = uncounted_work(batches)
    if prediction is not None and m.objective == "throughput" and not m.in_progress \
            and trusted and uncounted is None:
        prediction = dataclasses.replace(
            prediction, pick=predicted_pick(batches, prediction, m.limits, choice))
    counters = _counters(m, batches, ceilings)
    report = Report(
        model=model,
        hardware=ceilings,
        batches=batches,
        recommendation=(_recommendation(m, batches, ceilings, choice, varies, allowance)
                        if choice is not None else None),
        run=run,
        stop=m.stop,
        partial=m.partial,
        batch_response=batch_response(batches),
        flags=_flags(m, batches, ceilings, counters),
        estimates=_estimates(m, batches, ceilings),
        prediction=prediction,
        distributed=distributed,
        allocator=allocator_summary(batches, m.kept_buffers, m.limits, m.objective,
                                    m.kept_buffers_set_by, allowance),
        sequence_grid=sequence_grid_section(model, batches, m.grid,
                                            m.limits.memory_budget_bytes),
        counters=counters,
        uncounted=uncounted,
    )
    report = dataclasses.replace(report, evidence=evidence(run, batches, report.recommendation,
                                                           m.stop))
    if model.contexts and model.mode == Mode.INFERENCE:
        # A decode model: its context grid, and (once the sweep is done) the what-if,
        # simulated from the report's own step times.
        report = dataclasses.replace(
            report, serving=serving_section(report, m.grid, final=not m.partial
                                            and not m.in_progress))
    return report


def _classified(result: BatchResult, ceilings: Ceilings | None, shares: bool) -> BatchResult:
    """A new record: the result with its ops placed on the roofline, its time shares
    (``shares``: even without roofs) and its page faults' share of the step (for the
    renderers)."""
    r = classify_batch(result, ceilings) if ceilings is not None else result
    return dataclasses.replace(
        r, time_share=time_share(r) if shares and r.time_share is None else r.time_share,
        page_fault_share=page_fault_share(r))


def _recommendation(m: Measured, batches: list[BatchResult], ceilings: Ceilings | None,
                    choice: Choice, varies: bool, allowance: float) -> Recommendation:
    predicted = (predict_critical_batch(batches, ceilings)
                 if ceilings is not None and not varies else None)
    lowered = median_peaks(ceilings) if ceilings is not None and predicted else None
    at_median = predict_critical_batch(batches, lowered) if lowered is not None else None
    layers = (predict_compute_bound_batch(batches, ceilings, m.model.compute_dtype)
              if ceilings is not None and not varies else None)
    knee, knee_inside = measured_knee(batches)
    return Recommendation(
        batch_size=choice.batch_size,
        rule=choice.rule,
        speedup_from_batching=choice.speedup_from_batching,
        speedup_baseline_batch=choice.speedup_baseline_batch,
        predicted_critical_batch=predicted.batch if predicted else None,
        measured_knee_batch=knee,
        measured_knee_within_sweep=knee_inside,
        equivalent_batch_sizes=choice.equivalent_batch_sizes,
        speedup_interval=choice.speedup_interval,
        pick_share_of_best=choice.pick_share_of_best,
        pick_share_of_best_interval=choice.pick_share_of_best_interval,
        # B* under the ceilings' best repeats and under their medians: its exact counts
        # carry no noise, the roofs they are divided by do.
        predicted_critical_batch_interval=(
            Interval(min(predicted.batch, at_median.batch), max(predicted.batch, at_median.batch))
            if predicted and at_median else
            Interval(predicted.batch, predicted.batch) if predicted else None),
        measured_knee_interval=knee_interval(batches, allowance) if knee is not None else None,
        predicted_compute_bound_batch=layers.batch if layers else None,
        predicted_compute_bound_infinite=bool(layers and layers.batch is None),
        near_best_share=NEAR_BEST_SHARE,
        prediction=prediction_terms(predicted, layers),
        best_batch_size=choice.best_batch_size,
        best_throughput_per_s=choice.best_throughput_per_s,
        still_rising_at_cap=_still_rising_at_cap(
            batches, choice, m.stop is not None and m.stop.kind == StopKind.CAP),
        work_varies_with_inputs=varies,
        batch_size_without_page_faults=pick_without_page_faults(
            batches, m.limits, m.objective, m.kept_buffers, allowance),
        accumulation=accumulation(m.model, batches, choice.batch_size, m.global_batch),
    )


def prediction_terms(knee: KneePrediction | None,
                     layers: ComputeBoundPrediction | None) -> PredictionTerms:
    """The numbers the predictions came from, for renderers to quote (all per step)."""
    terms = PredictionTerms()
    if knee is not None:
        terms = dataclasses.replace(terms, shared_s=knee.shared_s, per_row_s=knee.per_row_s)
    if layers is not None:
        terms = dataclasses.replace(
            terms,
            layers_fixed_bytes=layers.fixed_bytes,
            layers_bytes_per_row=layers.per_row_bytes,
            layers_state_bytes_per_row=layers.state_bytes_per_row,
            layers_flops_per_row=layers.flops.slope,
            peak_flops_per_s=layers.peak_flops_per_s,
            bandwidth_bytes_per_s=layers.bandwidth_bytes_per_s,
        )
    return terms


def _still_rising_at_cap(results: list[BatchResult], choice: Choice,
                         stopped_at_cap: bool) -> bool:
    """True when the best throughput came at the largest batch and the plan's cap ended the
    sweep (rather than an OOM, a limit or a plateau), so a larger batch was never tried."""
    largest = max((r.batch_size for r in results if r.status == Status.OK), default=None)
    return stopped_at_cap and choice.best_batch_size == largest


def _counters(m: Measured, batches: list[BatchResult], ceilings: Ceilings | None
              ) -> CountersSection | None:
    """The counters section with its ops judged: measured against modelled, both placed
    against each op's roof (classifiers/kernel_roofline.judge_ops)."""
    if m.counters is None or not m.counters.ops:
        return m.counters
    batch = next((b for b in batches if b.batch_size == m.counters.batch_size), None)
    return dataclasses.replace(m.counters, ops=judge_ops(m.counters.ops, batch, ceilings))


def _flags(m: Measured, batches: list[BatchResult], ceilings: Ceilings | None,
           counters: CountersSection | None = None) -> list[Flag]:
    """The front end's flags, each batch size's own (with its batch size), then the run's.
    Op flags stay on their ops (renderers list them with the op's id)."""
    flags = list(m.flags)
    if counters is not None and counters.batch_size is not None:
        flags += counter_flags(counters.ops, counters.batch_size)
    flags += [f if f.batch_size is not None else dataclasses.replace(f, batch_size=r.batch_size)
              for r in batches for f in r.flags]
    flags += run_flags(m.model)
    flags += compiled_flags(m.model, batches)
    flags += dtype_hints(m.model, ceilings, batches)
    flags += amp_measured_flags(m.model, m.run.amp_off, batches, drift_allowance(m.run.drift))
    if m.global_batch is not None and m.model.mode != Mode.TRAIN:
        flags.append(Flag.of(GlobalBatchInInference(global_batch=m.global_batch)))
    flags += work_flags(batches)
    flags += noise_flags(batches)
    flags += page_fault_flags(batches)
    flags += ceiling_flags(ceilings, m.model.compute_dtype, families_run(batches))
    flags += failed_flags(batches)
    return flags


def _estimates(m: Measured, batches: list[BatchResult],
               ceilings: Ceilings | None) -> list[Estimate]:
    """``watch``'s labelled estimates of larger batch sizes, from its one measured size."""
    measured = next((r for r in batches if r.status == Status.OK), None)
    if not m.estimate_factors or measured is None or ceilings is None:
        return []
    estimates = [estimate_batch(measured, ceilings, measured.batch_size * k,
                                m.model.units_per_row) for k in m.estimate_factors]
    return [e for e in estimates if e is not None]
