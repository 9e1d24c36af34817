"""The worker process: loads the model file once and measures one batch size per request.

The parent (:mod:`batchscope.profiler.supervisor`) starts it with the ``spawn`` method and
talks to it over a pipe, in the typed messages of :mod:`batchscope.profiler.protocol`:

- at the start it sends :class:`~batchscope.profiler.protocol.Ready` (the model's
  :class:`~batchscope.records.ModelInfo`), or ``ContractError`` / ``LoadOom`` and exits;
- ``MeasureCeilings`` -> ``CeilingsMeasured``;
- ``MeasureBatch`` -> ``Phase`` per pass, ``Timed`` (the timing pass alone, before the op
  breakdown) and ``BatchDone``; ``ContractError`` instead at the run's first step;
- ``TimeGridPoint`` -> ``GridTimed``; ``RunProbes`` -> ``ProbesTimed``;
  ``KeepBuffers`` -> ``BuffersKept``; ``StopWorker``: it exits.

After a failed batch size or grid point it exits: a fresh worker takes the next.

Only this process imports the user's code and touches the device, so a crash, an OOM kill
or a poisoned CUDA context costs the parent nothing it has already received.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext, suppress
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from batchscope.contract import (
    ModelSpec,
    check_inputs,
    load_model_file,
    spec_from_callables,
)
from batchscope.errors import ModelFileError
from batchscope.hardware.nvml_sampler import NullSampler, NvmlSampler
from batchscope.profiler import counting
from batchscope.profiler.capture import (
    ProfilerUnavailable,
    capture_agreeing,
    capture_steps,
)
from batchscope.profiler.count_extrapolation import CountPlan
from batchscope.profiler.device import DeviceBackend, backend
from batchscope.profiler.device_time import apply_device_time
from batchscope.profiler.join import fill_breakdown
from batchscope.profiler.measurement import record_timing
from batchscope.profiler.memory import available_bytes
from batchscope.profiler.model_info import parameter_bytes, parameter_count
from batchscope.profiler.outcome import MISMATCH_HINT, classify_exception, is_mismatch
from batchscope.profiler.protocol import (
    BatchDone,
    BuffersKept,
    CeilingsMeasured,
    ContractError,
    GridTimed,
    KeepBuffers,
    LoadOom,
    MeasureBatch,
    MeasureCeilings,
    Phase,
    Ready,
    Reply,
    Request,
    RunProbes,
    StopWorker,
    Timed,
    TimeGridPoint,
)
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.training import (
    default_optimizer,
    is_compiled,
    step_description,
    training_step,
)
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import (
    BatchResult,
    CountedOp,
    Flag,
    GridPoint,
    ModelInfo,
    Status,
)
from batchscope.records.flag_payloads import BreakdownFailed, NoBreakdown
from batchscope.records.report import Mode
from batchscope.tensors import iter_tensors, map_tensors
from batchscope.tracebacks import describe_exception, user_frames

DTYPES = {
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16,
}
# A decision round's inputs stay built between its blocks while all kept together take at
# most this share of the memory free when the first was kept; larger ones are built again
# for each block, with a warm-up step to map them (a decode batch of 1024 holds ~10 GB of
# KV cache). Half: the decode sample's batches 128-512 (8.4 GB of KV) stay built on a
# 24 GB host, and what the steps allocate has the other half.
KEEP_INPUTS_SHARE = 0.5
# What the worker sends its replies with (the pipe's send; a rank's link to the parent).
Send = Callable[[Reply], None]
Step = Callable[[], Any]


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else the CPU; called in the worker only."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _become_oom_victim() -> None:
    """Make this process the kernel OOM killer's first choice, sparing the parent."""
    with suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")


class _MoveFailed(Exception):
    """Moving the built model onto its device failed; with the bytes it would have taken."""

    def __init__(self, cause: BaseException, parameter_bytes: int) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.parameter_bytes = parameter_bytes


class Worker:
    """Holds the model between batch sizes and measures each one."""

    def __init__(self, config: WorkerConfig, send: Send) -> None:
        self.config = config
        self.send = send
        self.device = resolve_device(config.device)
        self.dtype = DTYPES[config.dtype]
        # --amp: the forward (and loss) under autocast in this dtype; weights stay fp32
        self.amp = DTYPES[config.amp] if config.amp else None
        if config.threads:
            torch.set_num_threads(config.threads)
        self.spec: ModelSpec = (
            load_model_file(config.model_path, config.contexts, config.seq_lens)
            if config.callables is None
            else spec_from_callables(**config.callables, contexts=config.contexts,
                                     seq_lens=config.seq_lens))
        self.mode = config.mode or self.spec.mode
        model = self._call_user(self.spec.build_model, "build_model()")
        if not isinstance(model, torch.nn.Module):
            raise ModelFileError(
                f"{self.spec.path}: build_model() returned a {type(model).__name__}, "
                "not a torch.nn.Module."
            )
        try:
            self.model: torch.nn.Module = model.to(device=self.device, dtype=self.dtype)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            # what it would have taken on the device, in the dtype it was moving to
            raise _MoveFailed(exc, parameter_bytes(model, self.dtype)) from exc
        if config.compile_mode and not is_compiled(self.model):
            # --compile: compiled lazily, at each new shape's first step (LatencyStats.
            # first_step_s); counted through the eager module (Worker.measure)
            self.model = torch.compile(self.model, mode=config.compile_mode)  # type: ignore[assignment]
        if is_compiled(self.model):
            # Inductor's CPU kernels then get a profiler event each, named after the aten
            # ops they fused (join.fused_ops); the code is generated at the first step,
            # after this, so a file that compiled its own model gets them too.
            import torch._inductor.config as inductor_config

            inductor_config.cpp.enable_kernel_profile = True
        self.optimizer: torch.optim.Optimizer | None = None
        if self.mode == "train":
            self.model.train()
            make = self.spec.make_optimizer or default_optimizer
            self.optimizer = self._call_user(make, "make_optimizer(model)", self.model)
        else:
            self.model.eval()
        self.backend: DeviceBackend = backend(self.device)
        self.sync = self.backend.sync
        self.count_plan = CountPlan()
        self.last_coverage: float | None = None
        self.timing = self.backend.timing(config.timing)
        # The decision rounds' blocks (time_block): inputs kept between blocks, the
        # memory they may take, and the sizes this worker has run.
        self.kept_inputs: dict[int, Any] = {}
        self.keep_bytes: int | None = None
        self.ran: set[int] = set()

    @property
    def sampler(self) -> NvmlSampler | NullSampler:
        """The device's NVML sampler (its backend's)."""
        return self.backend.sampler

    def _call_user(self, fn: Callable[..., Any], what: str, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            if classify_exception(exc)[0] == Status.OOM:
                raise  # running out of memory is a status, not a contract problem
            raise ModelFileError(f"{self.spec.path}: {what} raised {describe_exception(exc)}",
                                 detail=user_frames(exc)) from None

    def info(self) -> ModelInfo:
        """What was loaded, for the report (``parameter_bytes``: parameters and buffers)."""
        return ModelInfo(
            target=str(self.spec.path),
            mode=Mode(self.mode),
            unit=self.spec.unit,
            units_per_row=self.spec.units_per_row,
            dtype=str(self.dtype).replace("torch.", ""),
            amp=str(self.amp).replace("torch.", "") if self.amp is not None else None,
            parameters=parameter_count(self.model),
            parameter_bytes=parameter_bytes(self.model),
            device=str(self.device),
            threads=torch.get_num_threads(),
            available_memory_bytes=available_bytes(self.device),
            batch_sizes=self.spec.batch_sizes,
            contexts=list(self.spec.contexts or []),
            seq_lens=list(self.spec.seq_lens or []),
            units_per_row_per_token=self.spec.per_token,
            compiled=is_compiled(self.model),
            training_step=step_description(self.spec) if self.mode == "train" else None,
        )

    def make_inputs(self, batch_size: int, context: int | None = None) -> Any:
        if self.spec.lengths is not None and context is None:
            context = self.spec.base_context
        label = (f"make_inputs({batch_size})" if self.spec.lengths is None
                 else f"make_inputs({batch_size}, {context})")
        inputs = self._call_user(self.spec.call_make_inputs, label, batch_size, context)
        check_inputs(inputs, batch_size, str(self.spec.path))

        def cast(t: torch.Tensor) -> torch.Tensor:
            if t.is_floating_point():
                return t.to(device=self.device, dtype=self.dtype)
            return t.to(device=self.device)

        return map_tensors(inputs, cast)

    def measure(self, batch_size: int, first_step: bool,
                op_breakdown: bool | None = None) -> BatchResult:
        """Timing pass, then (when enabled) capture and counting passes, then the join.

        Args:
            batch_size: the batch size to measure.
            op_breakdown: False to time it only (None: as the config says).
            first_step: True for the run's first batch size (the parent knows; a replacement
                worker does not): only there does a failure the contract explains (make_inputs
                raising or returning the wrong thing, a device or dtype mismatch) raise
                :class:`ModelFileError`. At any later batch size it is that batch size's
                ``model_error``.

        Raises:
            ModelFileError: at the first step, the model file breaks the contract.
        """
        started = time.perf_counter()
        result = BatchResult(batch_size=batch_size, status=Status.OK, worker_pid=os.getpid())
        phase = "make_inputs"
        try:
            inputs = self.make_inputs(batch_size)
            step = self._step(self.model, inputs)
            grad = torch.inference_mode() if self.mode == "inference" else nullcontext()
            with grad:
                phase = "timing"
                self.send(Phase(batch_size, phase))
                timed = self.backend.measure(step, self.timing)
                result = record_timing(result, timed, self.spec.units_per_row)
                # The timing result goes out first: it survives a crash in the later passes.
                self.send(Timed(result))
                if self.config.op_breakdown if op_breakdown is None else op_breakdown:
                    phase = "profiling"
                    self.send(Phase(batch_size, phase))
                    # A torch.compile'd model is counted through its eager module: the
                    # counting mode run through the compiled one left every later batch
                    # size running eager (dynamo recompiled it so).
                    eager = getattr(self.model, "_orig_mod", self.model)
                    count_step = step if eager is self.model else self._step(eager, inputs)
                    # Rebound at each stage: a failure in a later one keeps what the
                    # stages before it filled.
                    for stage in self._op_breakdown(result, step, inputs, count_step, eager):
                        result = stage
        except ModelFileError as exc:
            if first_step:
                raise  # nothing measured yet in the run: the file breaks the contract
            result = dataclasses.replace(
                result, status=Status.MODEL_ERROR,
                error=f"{exc}\n{exc.detail}" if exc.detail else str(exc))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            if first_step and is_mismatch(exc):
                raise ModelFileError(
                    f"{self.spec.path}: the first step at batch {batch_size} raised "
                    f"{describe_exception(exc)}; {MISMATCH_HINT}.",
                    detail=user_frames(exc)) from None
            status, label = classify_exception(exc)
            if phase != "timing" and phase != "make_inputs" and result.latency_s is not None:
                # The timing pass succeeded; keep it and say the breakdown failed.
                result = dataclasses.replace(result, flags=[*result.flags, Flag.of(
                    BreakdownFailed(phase=phase, error=describe_exception(exc)),
                    batch_size)])
            else:
                error = f"{label}{describe_exception(exc)}"
                frames = user_frames(exc)
                if frames and status == Status.MODEL_ERROR:
                    error += "\n" + frames
                result = dataclasses.replace(result, status=status, error=error)
        result = dataclasses.replace(result, available_memory_bytes=available_bytes(self.device),
                                     wall_s=time.perf_counter() - started)
        self.ran.add(batch_size)
        return result

    def time_block(self, batch_size: int, block_s: float, warmup_steps: int,
                   min_samples: int = 1) -> BatchResult:
        """One block of a decision round (:mod:`batchscope.rounds`): ``batch_size`` timed
        for ``block_s`` seconds of steps and at least ``min_samples`` samples, timing only,
        through the one timer.

        The inputs of earlier blocks are reused while kept (:data:`KEEP_INPUTS_SHARE`);
        ``warmup_steps`` untimed steps come first, at least one where the inputs were just
        built or the worker never ran the size (its first steps map memory and choose
        kernels). Every failure is the result's status, as in :meth:`measure`."""
        started = time.perf_counter()
        result = BatchResult(batch_size=batch_size, status=Status.OK, worker_pid=os.getpid())
        try:
            inputs = self.kept_inputs.get(batch_size)
            fresh = inputs is None
            if fresh:
                inputs = self.make_inputs(batch_size)
                self._keep_inputs(batch_size, inputs)
            warm = warmup_steps if not fresh and batch_size in self.ran else max(warmup_steps, 1)
            step = self._step(self.model, inputs)
            config = TimingConfig(warmup_min_steps=warm, warmup_min_s=0.0,
                                  measure_min_steps=max(min_samples, 1),
                                  measure_min_s=block_s, measure_max_s=block_s)
            grad = torch.inference_mode() if self.mode == "inference" else nullcontext()
            with grad:
                timed = self.backend.measure(step, config)
            result = record_timing(result, timed, self.spec.units_per_row)
            self.ran.add(batch_size)
        except ModelFileError as exc:
            result = dataclasses.replace(
                result, status=Status.MODEL_ERROR,
                error=f"{exc}\n{exc.detail}" if exc.detail else str(exc))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            status, label = classify_exception(exc)
            result = dataclasses.replace(result, status=status,
                                         error=f"{label}{describe_exception(exc)}")
        return dataclasses.replace(result, wall_s=time.perf_counter() - started)

    def _keep_inputs(self, batch_size: int, inputs: Any) -> None:
        """Keep ``inputs`` for the next block of ``batch_size`` if they fit beside those
        kept (:data:`KEEP_INPUTS_SHARE` of the memory free when the first was kept)."""
        size = sum(t.numel() * t.element_size() for t in iter_tensors(inputs))
        if self.keep_bytes is None:
            free = available_bytes(self.device)
            self.keep_bytes = int(KEEP_INPUTS_SHARE * free) if free else 0
        kept = sum(sum(t.numel() * t.element_size() for t in iter_tensors(i))
                   for i in self.kept_inputs.values())
        if kept + size <= self.keep_bytes:
            self.kept_inputs[batch_size] = inputs

    def time_grid_point(self, batch_size: int, length: int) -> GridPoint:
        """Step time and peak memory at one (batch size, length) of the second axis's grid
        (CONTEXTS or SEQ_LENS): the timing pass only (the per-op split comes from the
        sweep's own length)."""
        axis = self.spec.grid_axis
        units_per_row = self.spec.units_per_row_at(length)
        point = GridPoint(batch_size, length if axis == "context" else None, Status.OK,
                          seq_len=length if axis == "seq_len" else None,
                          units_per_row=units_per_row)
        try:
            inputs = self.make_inputs(batch_size, length)
            point.input_bytes = sum(t.numel() * t.element_size() for t in iter_tensors(inputs))
            step = self._step(self.model, inputs)
            grad = torch.inference_mode() if self.mode == "inference" else nullcontext()
            with grad:
                timed = self.backend.measure(step, self.timing, monitored=False)
                point.latency_s = timed.latency
                point.peak_memory_bytes = timed.memory.peak_bytes
            point.throughput_per_s = batch_size * units_per_row / timed.latency.median
        except ModelFileError as exc:
            point.status, point.error = Status.MODEL_ERROR, str(exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            status, label = classify_exception(exc)
            point.status, point.error = status, f"{label}{describe_exception(exc)}"
        return point

    def _autocast(self) -> AbstractContextManager[Any]:
        return torch.autocast(self.device.type, dtype=self.amp)

    def _step(self, model: torch.nn.Module, inputs: Any) -> Step:
        """One step of ``model`` on ``inputs``: the training step, or the file's forward;
        under autocast with --amp (forward and loss only)."""
        autocast = self._autocast if self.amp is not None else None
        if self.optimizer is not None:
            return training_step(self.spec, model, inputs, self.optimizer, autocast)
        forward = self.spec.step_fn(model, inputs)
        if autocast is None:
            return forward

        def step() -> Any:
            with autocast():
                return forward()

        return step

    def _op_breakdown(self, result: BatchResult, step: Step, inputs: Any, count_step: Step,
                      count_root: torch.nn.Module) -> Iterator[BatchResult]:
        """The capture and counting passes and the join: yields a new record after each
        stage that filled fields of ``result``, the last one complete, so that the caller
        holds what the stages before a failure filled (as one record filled in place did)."""
        trace = None
        if self.config.trace_dir:
            trace = Path(self.config.trace_dir) / f"trace_b{result.batch_size}.json"
        try:
            step_s = result.latency_s.median if result.latency_s else None
            capture = (capture_agreeing(step, self.sync, self.device, step_s, trace_path=trace)
                       if step_s else
                       capture_steps(step, self.sync, self.device, trace_path=trace))
        except ProfilerUnavailable as exc:
            yield dataclasses.replace(result, flags=[*result.flags, Flag.of(
                NoBreakdown(reason=str(exc)), result.batch_size)])
            return
        def count() -> list[CountedOp]:
            return counting.count_model_step(count_step, self.model, self.optimizer, inputs,
                                             root=count_root)

        counted, carried_from = self.count_plan.counts(result.batch_size, count)
        flags = list(result.flags)
        if capture.flag is not None:
            flags.append(dataclasses.replace(capture.flag, batch_size=result.batch_size))
        result = dataclasses.replace(result, trace_path=capture.trace_path, flags=flags)
        yield result
        result = fill_breakdown(result, counted, capture.steps)
        yield result
        if carried_from and _joined_worse(result.coverage, self.last_coverage):
            # The op sequence changed at this size: count it, and every size after it.
            self.count_plan.reject()
            result = fill_breakdown(result, self.count_plan.record(result.batch_size, count()),
                                    capture.steps)
            carried_from = []
        result = dataclasses.replace(result, counts_extrapolated_from=carried_from)
        yield result
        self.last_coverage = result.coverage
        if self.device.type == "cuda":
            yield apply_device_time(result, step_s)


# Coverage lower than the previous size's by more than this after extrapolated counts means
# they did not match the profile: the size is counted after all.
COVERAGE_DROP = 0.05


def _joined_worse(coverage: float | None, before: float | None) -> bool:
    return coverage is not None and before is not None and coverage < before - COVERAGE_DROP


def load_failure(exc: BaseException, config: WorkerConfig) -> ContractError | LoadOom:
    """What the parent is told when the worker could not load the model (called while
    ``exc`` is handled): it did not fit on its device, or the file is at fault."""
    if isinstance(exc, ModelFileError):
        return ContractError(str(exc), exc.detail)
    params = None
    if isinstance(exc, _MoveFailed):
        params, exc = exc.parameter_bytes, exc.cause
    failed = f"loading {config.model_path} failed: {describe_exception(exc)}"
    if not isinstance(exc, (torch.OutOfMemoryError, MemoryError, RuntimeError)):
        return ContractError(failed, traceback.format_exc())
    status, label = classify_exception(exc)
    if status != Status.OOM:
        return ContractError(failed, user_frames(exc))
    device = resolve_device(config.device)
    return LoadOom(message=f"{label}{describe_exception(exc)}", device=str(device),
                   parameter_bytes=params, available_memory_bytes=available_bytes(device))


def answer(worker: Worker, request: Request) -> bool:
    """Answer one request (not :class:`StopWorker`) through ``worker.send``; False when the
    worker must exit after it (a failure: a fresh worker takes the next request)."""
    send = worker.send
    if isinstance(request, MeasureCeilings):
        from batchscope.hardware import load_or_measure

        send(CeilingsMeasured(load_or_measure(worker.device, recalibrate=request.recalibrate)))
    elif isinstance(request, RunProbes):
        from batchscope.profiler.probe import run_probes

        send(run_probes(request.specs, worker.dtype, worker.device, worker.sync,
                        request.cache_bytes, request.bounded_spent_s, request.round_s))
    elif isinstance(request, KeepBuffers):
        from batchscope.profiler.glibc_malloc import keep_freed_buffers

        send(BuffersKept(keep_freed_buffers()))
    elif isinstance(request, TimeGridPoint):
        point = worker.time_grid_point(request.batch_size, request.length)
        send(GridTimed(point))
        return point.status == Status.OK  # as after a failed batch size
    elif isinstance(request, MeasureBatch) and request.block_s is not None:
        result = worker.time_block(request.batch_size, request.block_s, request.warmup_steps,
                                   request.block_samples)
        send(BatchDone(result))
        return result.status == Status.OK
    elif isinstance(request, MeasureBatch):
        try:
            result = worker.measure(request.batch_size, first_step=request.first_step,
                                    op_breakdown=request.op_breakdown)
        except ModelFileError as exc:
            send(ContractError(str(exc), exc.detail))
            return False
        send(BatchDone(result))
        return result.status == Status.OK  # after any failure a fresh worker takes the next
    return True


def worker_main(conn: Connection, config: WorkerConfig) -> None:
    """Entry point of the worker process: load the model, then answer requests until
    :class:`StopWorker`, a failure, or the parent's end of the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C does
    _become_oom_victim()

    def send(reply: Reply) -> None:
        conn.send(reply)

    try:
        worker = Worker(config, send)
    except BaseException as exc:  # noqa: BLE001 - every load failure is told to the parent
        send(load_failure(exc, config))
        return
    send(Ready(worker.info()))
    while True:
        try:
            request: Request = conn.recv()
        except EOFError:
            return
        if isinstance(request, StopWorker):
            worker.backend.close()
            return
        if not answer(worker, request):
            return
