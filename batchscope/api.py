"""The library API: one call runs the sweep, classifies it and writes the report.

Example:
    >>> import batchscope
    >>> report = batchscope.diagnose_file("samples/mlp.py", out_dir="out")  # doctest: +SKIP
    >>> report.recommendation.batch_size  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from batchscope import __version__
from batchscope.classifiers.allocator import retime_sizes
from batchscope.classifiers.analyze import analyze, early_stop_reason, final_probe_specs
from batchscope.classifiers.sequence_grid import sequence_grid_section
from batchscope.classifiers.recommend import OBJECTIVES
from batchscope.errors import ExitCode, NothingMeasuredError, UsageError
from batchscope.hardware.types import Ceilings
from batchscope.plan import DEFAULT_MAX_BATCH, Limits
from batchscope.profiler.launcher import DistributedConfig, LaunchedRanks
from batchscope.profiler.supervisor import (
    DEFAULT_BATCH_TIMEOUT_S,
    Callbacks,
    Sweep,
    SweepConfig,
)
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.worker_config import (
    AMP_NAMES,
    COMPILE_MODES,
    DTYPE_NAMES,
    WorkerConfig,
)
from batchscope.records import BatchResult, GridPoint, Report, Status
from batchscope.reports import write_all, write_json
from batchscope.serving.report_section import serving_section

if TYPE_CHECKING:  # the parent process of a sweep never imports torch; its worker does
    import torch

DEFAULT_OUT_DIR = "batchscope-report"
# While the sweep runs, report.json (the record) is rewritten after every batch size, but
# report.html and summary.md (0.1-0.2 s to render, longer than measuring a small model's
# batch size) at most this often; all three at the end.
PARTIAL_RENDER_INTERVAL_S = 10.0
_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


@dataclass
class Options:
    """Everything ``diagnose`` can be told; checked by :meth:`validate` before any import."""

    device: str = "auto"
    dtype: str = "fp32"
    amp: str | None = None  # "bf16" or "fp16": torch.autocast over forward and loss
    compile_mode: str | None = None  # torch.compile's mode ("default", ...): compile the model
    batch_sizes: list[int] | None = None
    max_batch: int = DEFAULT_MAX_BATCH
    latency_limit_s: float | None = None
    memory_budget_bytes: int | None = None
    out_dir: str | None = DEFAULT_OUT_DIR
    min_time_s: float | None = None  # None: adaptive (TimingConfig); else fixed seconds
    batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_S
    threads: int | None = None
    trace: bool = False
    recalibrate: bool = False
    op_breakdown: bool = True
    measure_ceilings: bool = True
    measure_all: bool = False  # every batch size up to max_batch: no plateau or predicted stop
    # Predict (never measure) every power of two up to this too: a model too slow or too
    # large to sweep that far (step_model; the report labels them and any pick they make).
    predict_to: int | None = None
    # CPU: time the batch sizes whose page faults were flagged again, with the allocator
    # keeping its buffers, side by side (classifiers/allocator.py).
    allocator_check: bool = True
    mode: str | None = None
    objective: str = "throughput"  # or "energy": J per unit from NVML, where measured
    # Data parallel (profiler/launcher.py): torchrun's arguments; None: one process.
    nproc_per_node: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    global_batch: int | None = None  # the global batch to reach with gradient accumulation
    # Decode models: context lengths for make_inputs(batch_size, context), replacing the
    # file's CONTEXTS; the sweep runs at the first, the context grid at all of them.
    contexts: list[int] | None = None
    # Sequence models: row lengths for make_inputs(batch_size, seq_len), replacing the
    # file's SEQ_LENS; the sweep runs at the first, the batch × length grid at all of them.
    seq_lens: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def distributed(self) -> DistributedConfig | None:
        if self.nproc_per_node is None:
            return None
        return DistributedConfig(self.nproc_per_node, self.nnodes, self.node_rank,
                                 self.rdzv_endpoint)

    def limits(self) -> Limits:
        """The sweep's limits; an explicit list caps the batch size at its largest (nothing
        above it is measured, probed or predicted)."""
        cap = min(self.max_batch, max(self.batch_sizes)) if self.batch_sizes else self.max_batch
        return Limits(cap, self.latency_limit_s, self.memory_budget_bytes, self.predict_to)

    def validate(self) -> None:
        """Raise :class:`UsageError` (exit 4) for any bad option."""
        if not _DEVICE.match(self.device):
            raise UsageError(f"unknown device {self.device!r}; use auto, cpu, cuda or cuda:N.")
        if self.dtype not in DTYPE_NAMES:
            raise UsageError(
                f"unknown dtype {self.dtype!r}; use one of fp32, bf16, fp16."
            )
        if self.amp is not None and self.amp not in AMP_NAMES:
            raise UsageError(f"unknown --amp {self.amp!r}; use bf16 or fp16.")
        if self.amp is not None and self.dtype not in ("fp32", "float32"):
            raise UsageError(f"--amp {self.amp} runs an fp32 model under autocast; drop "
                             f"--dtype {self.dtype} (or --amp to run the model in it).")
        if self.compile_mode is not None and self.compile_mode not in COMPILE_MODES:
            raise UsageError(f"unknown --compile-mode {self.compile_mode!r}; use one of "
                             f"{', '.join(COMPILE_MODES)}.")
        if self.max_batch < 1:
            raise UsageError(f"--max-batch must be at least 1, not {self.max_batch}.")
        if self.predict_to is not None and self.predict_to < 1:
            raise UsageError(f"--predict-to must be at least 1, not {self.predict_to}.")
        if self.predict_to is not None and not self.op_breakdown:
            raise UsageError("--predict-to predicts from the per-op breakdown; drop --no-ops.")
        for name, value in (("--latency-limit-ms", self.latency_limit_s),
                            ("--memory-budget", self.memory_budget_bytes),
                            ("--min-time", self.min_time_s),
                            ("--timeout", self.batch_timeout_s)):
            if value is not None and value <= 0:
                raise UsageError(f"{name} must be positive.")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads must be at least 1, not {self.threads}.")
        if self.objective not in OBJECTIVES:
            raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}, "
                             f"not {self.objective!r}.")
        if self.mode not in (None, "inference", "train"):
            raise UsageError(f"--mode must be inference or train, not {self.mode!r}.")
        dist = self.distributed()
        if dist is None and (self.nnodes != 1 or self.node_rank or self.rdzv_endpoint):
            raise UsageError("--nnodes, --node-rank and --rdzv-endpoint need --nproc-per-node.")
        problem = dist.validate() if dist is not None else ""
        if problem:
            raise UsageError(problem)
        if self.contexts is not None and (
                not self.contexts or len(set(self.contexts)) != len(self.contexts)
                or any(c < 0 for c in self.contexts)):
            raise UsageError("--contexts must list distinct token counts, e.g. 128,512,1024.")
        if self.seq_lens is not None and (
                not self.seq_lens or len(set(self.seq_lens)) != len(self.seq_lens)
                or any(c < 1 for c in self.seq_lens)):
            raise UsageError("--seq-lens must list distinct lengths of at least 1 token, "
                             "e.g. 128,256,512.")
        if self.seq_lens is not None and self.contexts is not None:
            raise UsageError("--contexts and --seq-lens both give a second axis; a sweep "
                             "takes one.")
        if self.global_batch is not None and self.global_batch < 1:
            raise UsageError(f"--global-batch must be at least 1, not {self.global_batch}.")
        if self.out_dir is not None:
            check_writable(Path(self.out_dir))


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
    timing = TimingConfig() if options.min_time_s is None else TimingConfig.fixed(options.min_time_s)
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

    def __init__(self, path: str, options: Options, run: dict[str, Any],
                 inner: Callbacks | None) -> None:
        self.path, self.options, self.run, self.inner = path, options, run, inner
        self.info: dict[str, Any] = {"target": path}
        self.ceilings: Ceilings | None = None
        self.probes_s: dict[str, float] = {}  # kernel probes, filled by the sweep as they run
        self.rendered_at = time.monotonic()  # of the last HTML/Markdown (none yet: the start)

    def on_ready(self, info: dict[str, Any]) -> None:
        self.info = info
        if self.inner:
            self.inner.on_ready(info)

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

    def on_result(self, result: BatchResult, results: list[BatchResult]) -> None:
        if self.options.out_dir is not None:
            report = self.build(results, partial=True, stop_reason="sweep in progress",
                                in_progress=True)
            now = time.monotonic()
            if now - self.rendered_at >= PARTIAL_RENDER_INTERVAL_S:
                write_all(report, self.options.out_dir)
                self.rendered_at = now
            else:
                write_json(report, self.options.out_dir)
        if self.inner:
            self.inner.on_result(result, results)

    def build(self, results: list[BatchResult], partial: bool, stop_reason: str,
              stopped_at_cap: bool = False, grid: list[GridPoint] | None = None,
              kept_buffers: list[BatchResult] | None = None,
              kept_buffers_set_by: str = "", in_progress: bool = False) -> Report:
        report = analyze(self.info, self.ceilings, results, self.options.limits(), self.run,
                         partial=partial, stop_reason=stop_reason,
                         stopped_at_cap=stopped_at_cap, objective=self.options.objective,
                         probes_s=self.probes_s, global_batch=self.options.global_batch,
                         kept_buffers=kept_buffers, kept_buffers_set_by=kept_buffers_set_by,
                         in_progress=in_progress)
        if self.info.get("contexts") and report.model.get("mode") == "inference":
            # A decode model: its context grid, and (once the sweep is done) the what-if.
            report.serving = serving_section(report.to_dict(), grid or [], final=not partial)
            report.explain()
        if self.info.get("seq_lens"):
            report.sequence_grid = sequence_grid_section(report.to_dict(), grid or [])
            report.explain()
        return report


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
    options.validate()
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
        >>> report.save("out")  # doctest: +SKIP
    """
    # Without options the API writes nothing unless asked (Report.save); with them, as told.
    options = _with_overrides(options, overrides if options else {"out_dir": None, **overrides})
    options.validate()
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
        return sys.modules["torch"].__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def follow_node_zero(path: str | os.PathLike[str], options: Options) -> tuple[int, str]:
    """On a node other than 0 of a distributed sweep: run this node's ranks under torch's
    launcher until node 0's sweep ends them; (the launcher's exit code, its output's path).
    Node 0 writes the report."""
    dist = options.distributed()
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
    dist = options.distributed()
    if dist is not None and callables is not None:
        raise UsageError("a distributed sweep runs a model file (its ranks import it): pass "
                         "the file to diagnose_file or to the diagnose command.")
    if dist is not None and dist.node_rank != 0:
        raise UsageError(f"node {dist.node_rank} of a distributed sweep only runs its ranks "
                         "(follow_node_zero, or the diagnose command); node 0 writes the report.")
    started = time.time()
    run = {
        "tool_version": __version__,
        "torch_version": _torch_version(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "options": {k: v for k, v in vars(options).items() if k != "extra"},
    }
    writer = _ReportWriter(target, options, run, callbacks)
    worker = _worker_config(target, options)
    worker.callables = callables
    config = SweepConfig(
        worker=worker,
        batch_sizes=options.batch_sizes,
        limits=options.limits(),
        batch_timeout_s=options.batch_timeout_s,
        recalibrate=options.recalibrate,
        measure_ceilings=options.measure_ceilings,
        measure_all=options.measure_all,
        early_stop=lambda results, remaining, ceilings, prober: early_stop_reason(
            results, remaining, ceilings, options.limits(),
            writer.info.get("unit", "sample"), options.objective, prober),
        final_probes=(lambda results, _ceilings: final_probe_specs(results, options.limits()))
        if options.op_breakdown else None,
        probes_s=writer.probes_s,
        distributed=options.distributed(),
        retime_sizes=retime_sizes if options.allocator_check else None,
    )
    outcome = Sweep(config, writer).run()
    run["wall_s"] = time.time() - started
    run["stop_reason"] = outcome.stop_reason
    report = writer.build(outcome.results, partial=outcome.interrupted,
                          stop_reason=outcome.stop_reason, stopped_at_cap=outcome.stopped_at_cap,
                          grid=outcome.grid, kept_buffers=outcome.kept_buffers,
                          kept_buffers_set_by=outcome.kept_buffers_set_by)
    report.flags[:0] = outcome.flags
    if options.out_dir is not None:
        write_all(report, options.out_dir)
    return report


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
    params = report.model.get("parameter_bytes")
    if first.status in (Status.OOM, Status.KILLED) and params:
        free = first.available_memory_bytes or report.model.get("available_memory_bytes")
        what += f" (the model's parameters and buffers take {params / 2**20:,.0f} MiB"
        what += f"; {free / 2**20:,.0f} MiB was free)" if free else ")"
    return what + "."


__all__ = [
    "NothingMeasuredError",
    "Options",
    "diagnose",
    "diagnose_file",
    "exit_code",
    "follow_node_zero",
]
