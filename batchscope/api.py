"""The library API: one call runs the sweep, classifies it and writes the report.

Example:
    >>> import batchscope
    >>> report = batchscope.diagnose_file("samples/mlp.py", out_dir="out")  # doctest: +SKIP
    >>> report.recommendation.batch_size  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batchscope.assemble import Measured, assemble
from batchscope.classifiers.allocator import retime_sizes
from batchscope.classifiers.analyze import unmeasured_sizes, work_varies_with_inputs
from batchscope.classifiers.early_stop import EarlyStop
from batchscope.classifiers.kernel_roofline import counters_section
from batchscope.classifiers.recommend import OBJECTIVES
from batchscope.errors import BatchscopeError, ExitCode, NothingMeasuredError, UsageError
from batchscope.hardware.busy import OtherLoad
from batchscope.hardware.figures import DatasheetSpec
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.probe_plan import final_probe_specs
from batchscope.profiler.launcher import DistributedConfig, LaunchedRanks
from batchscope.profiler.ncu_export import NcuUnreadable, read_ncu_exports
from batchscope.profiler.ncu_run import (
    CACHE_CONTROL,
    CLOCK_CONTROL,
    NcuFailure,
    find_ncu,
    run_ncu,
)
from batchscope.profiler.supervisor import Callbacks, InterruptHold, Sweep, SweepConfig
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.worker_config import (
    AMP_NAMES,
    COMPILE_MODES,
    DTYPE_NAMES,
    WorkerConfig,
)
from batchscope.records import (
    BatchResult,
    Flag,
    ModelInfo,
    Options,
    Report,
    RunInfo,
    Source,
    Status,
    Stop,
)
from batchscope.records.counter_report import CountersSection
from batchscope.records.counters import NcuExport
from batchscope.records.flag_payloads import InProgressStop, NcuFailed
from batchscope.records.probe import ProbeSpec
from batchscope.records.rounds import RoundBlock
from batchscope.records.run import DEFAULT_OUT_DIR
from batchscope.reports import write_all, write_json
from batchscope.version import __version__

if TYPE_CHECKING:  # the parent process of a sweep never imports torch; its worker does
    import torch

# While the sweep runs, report.json (the record) is rewritten after every batch size, but
# report.html and summary.md (0.1-0.2 s to render, longer than measuring a small model's
# batch size) at most this often; all three at the end.
PARTIAL_RENDER_INTERVAL_S = 10.0
# Set to 1, the decision rounds are skipped as --no-rounds skips them (a CI job sets it
# once); BATCHSCOPE_NO_CONTROL, the name of the drift control they replace, is read too.
NO_ROUNDS_ENVS = ("BATCHSCOPE_NO_ROUNDS", "BATCHSCOPE_NO_CONTROL")
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def distributed_config(options: Options) -> DistributedConfig | None:
    """torchrun's arguments for a data-parallel sweep; None: one process."""
    if options.nproc_per_node is None:
        return None
    return DistributedConfig(options.nproc_per_node, options.nnodes, options.node_rank,
                             options.rdzv_endpoint)


def limits_of(options: Options) -> Limits:
    """The sweep's limits; an explicit list caps the batch size at its largest (nothing
    above it is measured, probed or predicted)."""
    cap = (min(options.max_batch, max(options.batch_sizes)) if options.batch_sizes
           else options.max_batch)
    return Limits(cap, options.latency_limit_s, options.memory_budget_bytes, options.predict_to)


# --ncu: the time one batch size may take under ncu, as a multiple of --timeout, and at least.
NCU_TIMEOUT_FACTOR = 10
NCU_TIMEOUT_MIN_S = 600.0


def _final_probes(results: list[BatchResult], limits: Limits) -> list[ProbeSpec]:
    """The kernel probes the report's prediction uses (probe_plan.final_probe_specs) at the
    measured sizes and the unmeasured ones it predicts (analyze.unmeasured_sizes); none
    where the weights a step reads vary with its data (analyze.work_varies_with_inputs: no
    curve describes batching alone)."""
    if work_varies_with_inputs(results):
        return []
    return final_probe_specs(results, unmeasured_sizes(results, limits), limits.max_batch,
                             limits.predict_to)


def validate_options(options: Options) -> None:
    """Raise :class:`UsageError` (exit 4) for any bad option, before any model is imported."""
    o = options
    if not _DEVICE.match(o.device):
        raise UsageError(f"unknown device {o.device!r}; use auto, cpu, cuda or cuda:N.")
    if o.dtype not in DTYPE_NAMES:
        raise UsageError(f"unknown dtype {o.dtype!r}; use one of fp32, bf16, fp16.")
    if o.amp is not None and o.amp not in AMP_NAMES:
        raise UsageError(f"unknown --amp {o.amp!r}; use bf16 or fp16.")
    if o.amp is not None and o.dtype not in ("fp32", "float32"):
        raise UsageError(f"--amp {o.amp} runs an fp32 model under autocast; drop "
                         f"--dtype {o.dtype} (or --amp to run the model in it).")
    if o.compile_mode is not None and o.compile_mode not in COMPILE_MODES:
        raise UsageError(f"unknown --compile-mode {o.compile_mode!r}; use one of "
                         f"{', '.join(COMPILE_MODES)}.")
    if o.max_batch < 1:
        raise UsageError(f"--max-batch must be at least 1, not {o.max_batch}.")
    if o.predict_to is not None and o.predict_to < 1:
        raise UsageError(f"--predict-to must be at least 1, not {o.predict_to}.")
    if o.predict_to is not None and not o.op_breakdown:
        raise UsageError("--predict-to predicts from the per-op breakdown; drop --no-ops.")
    for name, value in (("--latency-limit-ms", o.latency_limit_s),
                        ("--budget", o.budget_s),
                        ("--memory-budget", o.memory_budget_bytes),
                        ("--min-time", o.min_time_s),
                        ("--timeout", o.batch_timeout_s)):
        if value is not None and value <= 0:
            raise UsageError(f"{name} must be positive.")
    if o.threads is not None and o.threads < 1:
        raise UsageError(f"--threads must be at least 1, not {o.threads}.")
    if o.objective not in OBJECTIVES:
        raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, "
                         f"not {o.objective!r}.")
    if o.mode not in (None, "inference", "train"):
        raise UsageError(f"--mode must be inference or train, not {o.mode!r}.")
    dist = distributed_config(o)
    if dist is None and (o.nnodes != 1 or o.node_rank or o.rdzv_endpoint):
        raise UsageError("--nnodes, --node-rank and --rdzv-endpoint need --nproc-per-node.")
    problem = dist.validate() if dist is not None else ""
    if problem:
        raise UsageError(problem)
    if o.contexts is not None and (
            not o.contexts or len(set(o.contexts)) != len(o.contexts)
            or any(c < 0 for c in o.contexts)):
        raise UsageError("--contexts must list distinct token counts, e.g. 128,512,1024.")
    if o.seq_lens is not None and (
            not o.seq_lens or len(set(o.seq_lens)) != len(o.seq_lens)
            or any(c < 1 for c in o.seq_lens)):
        raise UsageError("--seq-lens must list distinct lengths of at least 1 token, "
                         "e.g. 128,256,512.")
    if o.seq_lens is not None and o.contexts is not None:
        raise UsageError("--contexts and --seq-lens both give a second axis; a sweep "
                         "takes one.")
    if o.ncu:
        if dist is not None:
            raise UsageError("--ncu profiles one process; it does not run with "
                             "--nproc-per-node.")
        if find_ncu() is None:
            raise UsageError("--ncu needs Nsight Compute: ncu is not on PATH (install the "
                             "CUDA toolkit's Nsight Compute, or set BATCHSCOPE_NCU to its "
                             "ncu).")
    if o.global_batch is not None and o.global_batch < 1:
        raise UsageError(f"--global-batch must be at least 1, not {o.global_batch}.")
    if o.out_dir is not None:
        check_writable(Path(o.out_dir))


def check_writable(folder: Path) -> None:
    """Make sure ``folder`` exists (creating it) and a file can be written there."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".batchscope-probe-"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write to --out {folder}: {exc.strerror or exc}.") from None


def _worker_config(path: str, options: Options) -> WorkerConfig:
    device = options.device
    timing = (TimingConfig() if options.min_time_s is None
              else TimingConfig.fixed(options.min_time_s))
    trace_dir = str(Path(options.out_dir) / "traces") if options.trace and options.out_dir else None
    return WorkerConfig(
        model_path=path,
        device=device,
        dtype=options.dtype,
        amp=options.amp,
        compile_mode=options.compile_mode,
        mode=options.mode,
        threads=options.threads,
        timing=timing,
        op_breakdown=options.op_breakdown,
        trace_dir=trace_dir,
        recalibrate=options.recalibrate,
        contexts=options.contexts,
        seq_lens=options.seq_lens,
    )


class _ReportWriter(Callbacks):
    """Rewrites the report after every batch size, then forwards to the user's callbacks."""

    def __init__(self, target: str, options: Options, run: RunInfo,
                 inner: Callbacks | None) -> None:
        self.options, self.run, self.inner = options, run, inner
        self.model = ModelInfo(target=target)
        self.ceilings: Ceilings | None = None
        self.probes_s: dict[str, float] = {}  # kernel probes, filled by the sweep as they run
        self.rendered_at = time.monotonic()  # of the last HTML/Markdown (none yet: the start)

    def on_ready(self, model: ModelInfo) -> None:
        self.model = model
        if self.inner:
            self.inner.on_ready(model)

    def on_ceilings(self, ceilings: Ceilings) -> None:
        self.ceilings = ceilings
        if self.inner:
            self.inner.on_ceilings(ceilings)

    def on_phase(self, batch_size: int, phase: str) -> None:
        if self.inner:
            self.inner.on_phase(batch_size, phase)

    def on_interrupt(self) -> None:
        if self.inner:
            self.inner.on_interrupt()

    def on_block(self, block: RoundBlock) -> None:
        if self.inner:
            self.inner.on_block(block)

    def on_result(self, result: BatchResult, results: list[BatchResult]) -> None:
        if self.options.out_dir is not None:
            report = assemble(self.measured(results, stop=Stop.of(InProgressStop()),
                                            partial=True, in_progress=True))
            now = time.monotonic()
            if now - self.rendered_at >= PARTIAL_RENDER_INTERVAL_S:
                write_all(report, self.options.out_dir)
                self.rendered_at = now
            else:
                write_json(report, self.options.out_dir)
        if self.inner:
            self.inner.on_result(result, results)

    def measured(self, results: list[BatchResult], **fields: Any) -> Measured:
        """What the sweep measured so far, for the assembler."""
        return Measured(model=self.model, run=self.run, ceilings=self.ceilings,
                        results=list(results), limits=limits_of(self.options),
                        objective=self.options.objective, probes_s=dict(self.probes_s),
                        global_batch=self.options.global_batch, **fields)


def diagnose_file(path: str | os.PathLike[str], options: Options | None = None,
                  callbacks: Callbacks | None = None, **overrides: Any) -> Report:
    """Sweep the model file at ``path`` and return (and write) its report.

    Args:
        path: a model file following the contract in README.md.
        options: sweep options; keyword ``overrides`` replace single fields.
        callbacks: progress hooks (see :class:`~batchscope.profiler.supervisor.Callbacks`).

    Raises:
        UsageError: a bad option (before the model file is imported).
        ModelFileError: the file breaks the contract.
        NothingMeasuredError: not even the smallest batch size could be measured.
    """
    options = _with_overrides(options, overrides)
    validate_options(options)
    return _run(str(path), None, options, callbacks)


def diagnose(build_model: Callable[[], torch.nn.Module], make_inputs: Callable[[int], Any],
             run: Callable[[torch.nn.Module, Any], Any] | None = None, *,
             make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer] | None = None,
             loss: Callable[[Any, Any], torch.Tensor] | None = None,
             unit: str | None = None, options: Options | None = None,
             callbacks: Callbacks | None = None, **overrides: Any) -> Report:
    """Sweep batch sizes of the model that ``build_model`` builds; the same as the CLI.

    The functions run in a worker process, so they must be importable: defined at the top
    level of a module or script (guard the script's own work with
    ``if __name__ == "__main__":``), not inside a notebook or another function.

    Example:
        >>> from samples.mlp import build_model, make_inputs  # doctest: +SKIP
        >>> report = batchscope.diagnose(build_model, make_inputs, max_batch=64)  # doctest: +SKIP
        >>> batchscope.save(report, "out")  # doctest: +SKIP
    """
    # Without options the API writes nothing unless asked (batchscope.save); with them, as told.
    options = _with_overrides(options, overrides if options else {"out_dir": None, **overrides})
    validate_options(options)
    callables = {"build_model": build_model, "make_inputs": make_inputs, "run": run,
                 "make_optimizer": make_optimizer, "loss": loss, "unit": unit,
                 "mode": options.mode, "batch_sizes": options.batch_sizes}
    for name, fn in callables.items():
        if callable(fn):
            _check_importable(name, fn)
    label = f"{build_model.__module__}.{build_model.__qualname__}"
    callables["name"] = label
    return _run(label, callables, options, callbacks)


def _check_importable(name: str, fn: Callable[..., Any]) -> None:
    qualname = getattr(fn, "__qualname__", "")
    module = sys.modules.get(getattr(fn, "__module__", ""), None)
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise UsageError(f"{name} ({qualname}) is a local function or lambda; the worker "
                         "process can only import functions defined at a module's top level.")
    if module is not None and module.__name__ == "__main__" and not getattr(
            module, "__file__", None):
        raise UsageError(f"{name} is defined in a notebook or an interactive session; put it "
                         "in a .py file and import it, or use batchscope.watch inside your loop.")


def _with_overrides(options: Options | None, overrides: dict[str, Any]) -> Options:
    options = dataclasses.replace(options) if options else Options()
    for key, value in overrides.items():
        if not hasattr(options, key):
            raise UsageError(f"unknown option {key!r}.")
        setattr(options, key, value)
    return options


def _torch_version() -> str:
    """torch.__version__ without importing torch here (only the worker needs it)."""
    if "torch" in sys.modules:
        return str(sys.modules["torch"].__version__)
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def follow_node_zero(path: str | os.PathLike[str], options: Options) -> tuple[int, str]:
    """On a node other than 0 of a distributed sweep: run this node's ranks under torch's
    launcher until node 0's sweep ends them; (the launcher's exit code, its output's path).
    Node 0 writes the report."""
    dist = distributed_config(options)
    if dist is None or dist.node_rank == 0:
        raise UsageError("follow_node_zero runs on nodes other than 0 (--node-rank 1 or more).")
    ranks = LaunchedRanks(_worker_config(str(path), options), dist, options.batch_timeout_s)
    code = None
    try:
        code = ranks.wait()
        return code, ranks.log_path
    finally:
        ranks.stop(graceful=code == 0)  # the ranks' output is kept when they failed


def _run(target: str, callables: dict[str, Any] | None, options: Options,
         callbacks: Callbacks | None) -> Report:
    dist = distributed_config(options)
    if dist is not None and callables is not None:
        raise UsageError("a distributed sweep runs a model file (its ranks import it): pass "
                         "the file to diagnose_file or to the diagnose command.")
    if dist is not None and dist.node_rank != 0:
        raise UsageError(f"node {dist.node_rank} of a distributed sweep only runs its ranks "
                         "(follow_node_zero, or the diagnose command); node 0 writes the report.")
    if options.ncu and callables is not None:
        raise UsageError("--ncu runs the model file in a process of ncu's: pass the file to "
                         "diagnose_file or to the diagnose command.")
    started = time.time()
    run = RunInfo(source=Source.SWEEP, tool_version=__version__,
                  torch_version=_torch_version(),
                  started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                  options=dataclasses.replace(options))
    writer = _ReportWriter(target, options, run, callbacks)
    worker = _worker_config(target, options)
    worker.callables = callables
    limits = limits_of(options)
    config = SweepConfig(
        worker=worker,
        batch_sizes=options.batch_sizes,
        limits=limits,
        batch_timeout_s=options.batch_timeout_s,
        recalibrate=options.recalibrate,
        measure_ceilings=options.measure_ceilings,
        rounds=options.rounds and all(os.environ.get(e) != "1" for e in NO_ROUNDS_ENVS),
        budget_s=options.budget_s,
        measure_all=options.measure_all,
        early_stop=EarlyStop(limits, options.objective),
        final_probes=((lambda results, _ceilings: _final_probes(results, limits))
                      if options.op_breakdown else None),
        probes_s=writer.probes_s,
        distributed=dist,
        retime_sizes=retime_sizes if options.allocator_check else None,
    )
    # Once every phase has ended, an interrupt waits for the report (supervisor.InterruptHold):
    # raised while it was assembled or written, it left report.json "sweep in progress".
    # After an interrupt the hold is never engaged: a second one still stops at once.
    hold = InterruptHold()
    try:
        with OtherLoad() as load:  # the workers are waited for by its end: theirs is ours
            outcome = Sweep(config, writer).run(hold)
        phase = NcuPhase()
        if options.ncu and not outcome.interrupted and not hold.held:
            # Minutes of ncu's replays: an interrupt stops them (not held, as the report's
            # writing is), and the report keeps what was profiled; a failure of the phase
            # costs its counters, never the sweep's report.
            hold.release()
            try:
                ncu_counters(worker, outcome.results, options, phase)
            except KeyboardInterrupt:
                phase.flags.append(Flag.of(NcuFailed(
                    failure=NcuFailure.INTERRUPTED.value, detail="")))
            except (OSError, BatchscopeError) as exc:
                phase.flags.append(Flag.of(NcuFailed(
                    failure=NcuFailure.ERROR.value, detail=str(exc))))
            hold.engage()
        ceilings = writer.ceilings
        counters = phase.section(ceilings.spec if ceilings is not None else None)
        ncu_flags = phase.flags
        writer.run = dataclasses.replace(
            run, wall_s=time.time() - started, drift=outcome.drift, amp_off=outcome.amp_off,
            rounds=outcome.rounds,
            other_cpu_share=load.share if math.isfinite(load.share) else None)
        report = assemble(writer.measured(
            outcome.results, stop=outcome.stop, partial=outcome.interrupted,
            flags=outcome.flags + ncu_flags, grid=outcome.grid,
            kept_buffers=outcome.kept_buffers, kept_buffers_set_by=outcome.kept_buffers_set_by,
            counters=counters))
        if options.out_dir is not None:
            write_all(report, options.out_dir)
    finally:
        hold.release()
    return report


@dataclass
class NcuPhase:
    """What the ``--ncu`` phase gathered so far: each profiled batch size's export, and a
    flag for each size without counters (kept when the phase is interrupted)."""

    exports: list[tuple[int, NcuExport]] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)

    def section(self, spec: DatasheetSpec | None) -> CountersSection | None:
        """report.json ``counters``: every profiled launch of every size classified
        together (one kernel floor, one set of roofs), each stamped with its batch size."""
        if not self.exports:
            return None
        merged = NcuExport(kernels=[k for _, e in self.exports for k in e.kernels],
                           files=[f for _, e in self.exports for f in e.files],
                           notes=[n for _, e in self.exports for n in e.notes])
        sizes = [b for b, e in self.exports for _ in e.kernels]
        section = counters_section(merged, spec)
        return dataclasses.replace(
            section, cache_control=CACHE_CONTROL, clock_control=CLOCK_CONTROL,
            kernels=[dataclasses.replace(k, batch_size=b)
                     for k, b in zip(section.kernels, sizes, strict=True)])


def ncu_counters(worker: WorkerConfig, results: list[BatchResult], options: Options,
                 phase: NcuPhase) -> None:
    """``--ncu``: one step at each measured batch size under Nsight Compute, gathered into
    ``phase``: its export, or a flag saying why there is none. Once ncu is refused the
    counters, or cannot start, no other size is tried (the same answer at every size). The
    CSVs are kept in the output folder's ``ncu/`` (a temporary folder, removed, without
    one)."""
    ncu = find_ncu()
    if ncu is None:
        return
    # ncu replays each kernel once per counter pass: far longer than the step itself.
    timeout_s = max(options.batch_timeout_s * NCU_TIMEOUT_FACTOR, NCU_TIMEOUT_MIN_S)
    with contextlib.ExitStack() as stack:
        root = (Path(options.out_dir) if options.out_dir is not None
                else Path(stack.enter_context(tempfile.TemporaryDirectory())))
        for r in results:
            if r.status != Status.OK:
                continue
            run = run_ncu(ncu, dataclasses.replace(worker, op_breakdown=False), r.batch_size,
                          root / "ncu", timeout_s)
            if run.failure is None and run.csv_path is not None:
                try:
                    phase.exports.append((r.batch_size, read_ncu_exports([Path(run.csv_path)])))
                except NcuUnreadable as exc:
                    run = dataclasses.replace(run, failure=NcuFailure.UNREADABLE,
                                              detail=str(exc))
            if run.failure is not None:
                phase.flags.append(Flag.of(NcuFailed(
                    failure=run.failure.value, detail=run.detail), r.batch_size))
                if run.failure in (NcuFailure.PERMISSION, NcuFailure.NOT_STARTED):
                    break


def exit_code(report: Report) -> ExitCode:
    """The documented exit code for a finished (or interrupted) run."""
    if report.partial:
        return ExitCode.INTERRUPTED
    statuses = [b.status for b in report.batches]
    if Status.OK not in statuses:
        return ExitCode.NOTHING_MEASURED
    if any(s not in (Status.OK, Status.OOM, Status.SKIPPED) for s in statuses):
        return ExitCode.SOME_FAILED
    return ExitCode.OK


def nothing_measured_message(report: Report) -> str:
    """One sentence for exit 5: why even the smallest batch size failed."""
    if not report.batches:
        return "no batch size was measured."
    first = report.batches[0]
    what = f"batch {first.batch_size} ended as {first.status.value}"
    if first.error:
        what += f": {first.error.splitlines()[0]}"
    params = report.model.parameter_bytes
    if first.status in (Status.OOM, Status.KILLED) and params:
        free = first.available_memory_bytes or report.model.available_memory_bytes
        what += f" (the model's parameters and buffers take {params / 2**20:,.0f} MiB"
        what += f"; {free / 2**20:,.0f} MiB was free)" if free else ")"
    return what + "."


__all__ = [
    "DEFAULT_OUT_DIR",
    "NothingMeasuredError",
    "Options",
    "diagnose",
    "diagnose_file",
    "exit_code",
    "follow_node_zero",
    "limits_of",
    "validate_options",
]
