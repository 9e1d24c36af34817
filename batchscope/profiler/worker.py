"""The worker process: loads the model file once and measures one batch size per request.

The parent (:mod:`batchscope.profiler.supervisor`) starts it with the ``spawn`` method and
talks to it over a pipe. Messages are ``(kind, payload)`` tuples of plain Python values:

parent -> worker: ``("ceilings", recalibrate)``, ``("batch", batch_size)``, ``("stop", None)``
worker -> parent: ``("ready", ModelInfo dict)``, ``("contract_error", {message, detail})``,
``("ceilings", dict)``, ``("phase", {batch_size, phase})``, ``("result", BatchResult dict)``

Only this process imports the user's code and touches the device, so a crash, an OOM kill
or a poisoned CUDA context costs the parent nothing it has already received.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from batchscope.errors import ModelFileError
from batchscope.hardware.nvml import NvmlWindow, energy_per_unit_j, make_sampler
from batchscope.profiler import counting
from batchscope.profiler.capture import ProfilerUnavailable, capture_steps
from batchscope.profiler.join import fill_breakdown
from batchscope.profiler.memory import PageFaults, PeakMemory, available_bytes
from batchscope.profiler.outcome import MISMATCH_HINT, classify_exception, is_mismatch
from batchscope.profiler.timing import Monitors, time_steps
from batchscope.profiler.training import default_optimizer, persistent_tensors, training_step
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import BatchResult, Status, to_jsonable
from batchscope.spec import (
    ModelSpec,
    check_inputs,
    describe_exception,
    iter_tensors,
    load_model_file,
    map_tensors,
    spec_from_callables,
    user_frames,
)

# Power readings average over ~1 s on recent GPUs and the energy counter ticks slowly: the
# timed steps of a batch size on a GPU last at least this long.
NVML_WINDOW_MIN_S = 1.0

DTYPES = {
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16,
}


def resolve_device(name: str) -> torch.device:
    """``auto`` is CUDA when present, else the CPU; called in the worker only."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _cuda_identity(device: torch.device) -> tuple[int, str | None]:
    """CUDA index and the UUID torch reports, for the NVML handle (0, None on the CPU)."""
    if device.type != "cuda":
        return 0, None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return index, str(torch.cuda.get_device_properties(index).uuid)


def _become_oom_victim() -> None:
    """Make this process the kernel OOM killer's first choice, sparing the parent."""
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass


def _sync_fn(device: torch.device):
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class Worker:
    """Holds the model between batch sizes and measures each one."""

    def __init__(self, config: WorkerConfig, send) -> None:
        self.config = config
        self.send = send
        self.device = resolve_device(config.device)
        self.dtype = DTYPES[config.dtype]
        if config.threads:
            torch.set_num_threads(config.threads)
        self.spec: ModelSpec = (load_model_file(config.model_path) if config.callables is None
                                else spec_from_callables(**config.callables))
        self.mode = config.mode or self.spec.mode
        model = self._call_user(self.spec.build_model, "build_model()")
        if not isinstance(model, torch.nn.Module):
            raise ModelFileError(
                f"{self.spec.path}: build_model() returned a {type(model).__name__}, "
                "not a torch.nn.Module."
            )
        self.parameter_bytes = sum(
            t.numel() * self.dtype.itemsize if t.is_floating_point() else t.numel() * t.element_size()
            for t in list(model.parameters()) + list(model.buffers())
        )
        try:
            self.model = model.to(device=self.device, dtype=self.dtype)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            exc.parameter_bytes = self.parameter_bytes  # type: ignore[attr-defined]
            raise
        self.optimizer: torch.optim.Optimizer | None = None
        if self.mode == "train":
            self.model.train()
            make = self.spec.make_optimizer or default_optimizer
            self.optimizer = self._call_user(make, "make_optimizer(model)", self.model)
        else:
            self.model.eval()
        self.sync = _sync_fn(self.device)
        self.measured_once = False
        self.sampler = make_sampler(self.device.type, *_cuda_identity(self.device))
        if self.device.type == "cuda":  # NVML needs a steady window of at least a second
            t = config.timing
            config.timing = dataclasses.replace(
                t, measure_min_s=max(t.measure_min_s, NVML_WINDOW_MIN_S),
                measure_max_s=max(t.measure_max_s, NVML_WINDOW_MIN_S))

    def _call_user(self, fn, what: str, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - user code: one sentence + their frames
            if classify_exception(exc)[0] == Status.OOM:
                raise  # running out of memory is a status, not a contract problem
            err = ModelFileError(f"{self.spec.path}: {what} raised {describe_exception(exc)}")
            err.detail = user_frames(exc)  # type: ignore[attr-defined]
            raise err from None

    def info(self) -> dict[str, Any]:
        params = list(self.model.parameters())
        buffers = list(self.model.buffers())
        return {
            "target": str(self.spec.path),
            "parameters": sum(p.numel() for p in params),
            "parameter_bytes": sum(p.numel() * p.element_size() for p in params + buffers),
            "dtype": str(self.dtype).replace("torch.", ""),
            "mode": self.mode,
            "unit": self.spec.unit,
            "batch_sizes": self.spec.batch_sizes,
            "threads": torch.get_num_threads(),
            "device": str(self.device),
            "available_memory_bytes": available_bytes(self.device),
        }

    def _energy(self, result: BatchResult, window: NvmlWindow, batch_size: int,
                steps: int) -> None:
        """Keep the NVML window of the timed steps; energy per unit; warn on throttling."""
        result.nvml = window.to_dict()
        result.energy_per_unit_j = energy_per_unit_j(window, batch_size, steps)
        warning = window.throttle_warning()
        if warning:
            result.flags.append(warning)

    def make_inputs(self, batch_size: int) -> Any:
        inputs = self._call_user(self.spec.make_inputs, f"make_inputs({batch_size})", batch_size)
        check_inputs(inputs, batch_size, str(self.spec.path))

        def cast(t: torch.Tensor) -> torch.Tensor:
            if t.is_floating_point():
                return t.to(device=self.device, dtype=self.dtype)
            return t.to(device=self.device)

        return map_tensors(inputs, cast)

    def measure(self, batch_size: int) -> BatchResult:
        """Timing pass, then (when enabled) capture and counting passes, then the join."""
        started = time.perf_counter()
        result = BatchResult(batch_size=batch_size, status=Status.OK, worker_pid=os.getpid())
        phase = "make_inputs"
        try:
            inputs = self.make_inputs(batch_size)
            if self.optimizer is not None:
                step = training_step(self.spec, self.model, inputs, self.optimizer)
            else:
                step = self.spec.step_fn(self.model, inputs)
            grad = torch.inference_mode() if self.mode == "inference" else nullcontext()
            with grad:
                phase = "timing"
                self.send(("phase", {"batch_size": batch_size, "phase": phase}))
                memory = PeakMemory(self.device)
                memory.start()
                # Host page faults only matter to a step that runs on the host.
                faults = PageFaults() if self.device.type == "cpu" else None
                stats, _, (window, fault_count) = time_steps(
                    step, self.sync, self.config.timing, monitor=Monitors(self.sampler, faults))
                reading = memory.stop()
                self._energy(result, window, batch_size, stats.n)
                if fault_count is not None:
                    result.page_faults_per_step = fault_count / stats.n
                result.latency_s = stats
                result.throughput_per_s = batch_size / stats.median
                result.peak_memory_bytes = reading.peak_bytes
                result.baseline_memory_bytes = reading.baseline_bytes
                result.peak_memory_method = reading.method
                # The timing result goes out first: it survives a crash in the later passes.
                self.send(("timed", to_jsonable(result)))
                if self.config.op_breakdown:
                    phase = "profiling"
                    self.send(("phase", {"batch_size": batch_size, "phase": phase}))
                    self._op_breakdown(result, step, inputs)
        except ModelFileError as exc:
            if not self.measured_once:
                raise  # before any batch size went well: the file breaks the contract
            result.status = Status.MODEL_ERROR
            result.error = str(exc)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
            if isinstance(exc, KeyboardInterrupt):
                raise
            if not self.measured_once and is_mismatch(exc):
                err = ModelFileError(
                    f"{self.spec.path}: the first step at batch {batch_size} raised "
                    f"{describe_exception(exc)}; {MISMATCH_HINT}."
                )
                err.detail = user_frames(exc)  # type: ignore[attr-defined]
                raise err from None
            status, label = classify_exception(exc)
            if phase != "timing" and phase != "make_inputs" and result.latency_s is not None:
                # The timing pass succeeded; keep it and say the breakdown failed.
                result.flags.append(f"op breakdown failed in {phase}: {describe_exception(exc)}")
            else:
                result.status = status
                result.error = f"{label}{describe_exception(exc)}"
                frames = user_frames(exc)
                if frames and status == Status.MODEL_ERROR:
                    result.error += "\n" + frames
        if result.status == Status.OK:
            self.measured_once = True
        result.available_memory_bytes = available_bytes(self.device)
        result.wall_s = time.perf_counter() - started
        return result

    def _op_breakdown(self, result: BatchResult, step, inputs: Any) -> None:
        trace = None
        if self.config.trace_dir:
            trace = Path(self.config.trace_dir) / f"trace_b{result.batch_size}.json"
        try:
            step_s = result.latency_s.median if result.latency_s else None
            capture = capture_steps(step, self.sync, self.device, trace_path=trace,
                                    step_s=step_s)
        except ProfilerUnavailable as exc:
            result.flags.append(f"no op breakdown: {exc}")
            return
        weights = list(persistent_tensors(self.model, self.optimizer))
        counted = counting.count_step(
            step, weights=weights, state=iter_tensors(inputs), root=self.model
        )
        result.trace_path = capture.trace_path
        fill_breakdown(result, counted, capture.steps)


def worker_main(conn, config: WorkerConfig) -> None:
    """Entry point of the worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C does
    _become_oom_victim()

    def send(message: tuple[str, Any]) -> None:
        conn.send(message)

    try:
        worker = Worker(config, send)
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
        status, label = classify_exception(exc)
        if status != Status.OOM:
            send(("contract_error", {
                "message": f"loading {config.model_path} failed: {describe_exception(exc)}",
                "detail": user_frames(exc),
            }))
            return
        device = resolve_device(config.device)
        send(("load_oom", {
            "message": f"{label}{describe_exception(exc)}",
            "available_memory_bytes": available_bytes(device),
            "parameter_bytes": getattr(exc, "parameter_bytes", None),
            "device": str(device),
        }))
        return
    except ModelFileError as exc:
        send(("contract_error", {"message": str(exc), "detail": getattr(exc, "detail", "")}))
        return
    except BaseException as exc:  # noqa: BLE001
        send(("contract_error", {
            "message": f"loading {config.model_path} failed: {describe_exception(exc)}",
            "detail": traceback.format_exc(),
        }))
        return
    send(("ready", worker.info()))
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "stop":
            worker.sampler.close()
            return
        if kind == "ceilings":
            from batchscope.hardware import load_or_measure

            ceilings = load_or_measure(worker.device.type, recalibrate=bool(payload))
            send(("ceilings", ceilings.to_dict()))
        elif kind == "batch":
            try:
                result = worker.measure(int(payload))
            except ModelFileError as exc:
                send(("contract_error", {"message": str(exc),
                                         "detail": getattr(exc, "detail", "")}))
                return
            send(("result", to_jsonable(result)))
            if result.status != Status.OK:
                return  # after any failure a fresh worker takes the next batch size
