"""``batchscope.watch``: diagnose the batch size a real training loop already uses, in-process.

Example:
    >>> with batchscope.watch(model, optimizer=opt, out_dir="report") as w:  # doctest: +SKIP
    ...     for x, y in loader:
    ...         loss = loss_fn(model(x), y)
    ...         loss.backward(); opt.step(); opt.zero_grad()
    ...         w.step()

Between consecutive ``w.step()`` calls lies one step of the user's loop. ``watch`` lets the
first steps warm up, times the next ones (wall clock between ``step()`` calls, the device
synchronised: the loop as it runs, data loading included), profiles a few with
torch.profiler, counts one under the counting mode, then removes every hook and writes the
same report as ``diagnose`` for that one batch size, plus labelled estimates of larger
batch sizes. Nothing it does changes the loop's numerics: the profiler only observes, and
the counting mode runs every op exactly as it would run anyway.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from batchscope import __version__
from batchscope.classifiers.analyze import analyze
from batchscope.classifiers.estimate import estimate_batch
from batchscope.plan import Limits
from batchscope.profiler.capture import STEP_TAG, parse_events
from batchscope.profiler.counting import counting
from batchscope.profiler.join import fill_breakdown
from batchscope.profiler.memory import PeakMemory, available_bytes
from batchscope.profiler.timing import latency_stats
from batchscope.profiler.training import persistent_tensors
from batchscope.records import BatchResult, Status
from batchscope.report import Report
from batchscope.spec import iter_tensors

WARMUP_STEPS = 2  # first steps allocate gradients and optimizer state, autotune kernels
TIMED_STEPS = 8
PROFILED_STEPS = 3  # plus one dropped: the first step under a fresh profiler runs slow
ESTIMATE_FACTORS = (2, 4, 8)  # larger batch sizes to estimate, as multiples of the measured


class watch:  # noqa: N801 - used as a context manager, named like one
    """Profile a few steps of the user's own loop and report on its batch size.

    Args:
        model: the module the loop trains or runs.
        optimizer: its optimizer, so its state counts with the weights.
        batch_size: rows per step; found from the first tensor given to ``model`` if None.
        unit: what one row yields ("sample", "token", "image").
        out_dir: where to write report.json (and the other formats); None writes nothing.
        warmup_steps, timed_steps, profiled_steps: how many loop steps each phase takes.
    """

    def __init__(self, model: torch.nn.Module, *, optimizer: torch.optim.Optimizer | None = None,
                 batch_size: int | None = None, unit: str = "sample",
                 out_dir: str | None = "batchscope-report", warmup_steps: int = WARMUP_STEPS,
                 timed_steps: int = TIMED_STEPS, profiled_steps: int = PROFILED_STEPS) -> None:
        self.model, self.optimizer = model, optimizer
        self.batch_size, self.unit, self.out_dir = batch_size, unit, out_dir
        self.plan = ["warmup"] * warmup_steps + ["timed"] * timed_steps + \
            ["profiled"] * (1 + profiled_steps) + ["counted"]
        self.index = 0
        self.report: Report | None = None
        self._stack = ExitStack()
        self._phase_stack = ExitStack()
        self._hook: Any = None
        self._inputs: list[torch.Tensor] = []
        self._samples: list[float] = []
        self._last = 0.0
        self._profiler: profile | None = None
        self._session: Any = None
        self._device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self._memory = PeakMemory(self._device)

    # -- the context manager -------------------------------------------------------------
    def __enter__(self) -> watch:
        self._hook = self.model.register_forward_pre_hook(self._see_inputs)
        self._stack.callback(self._hook.remove)
        self._begin(self.plan[0] if self.plan else "done")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.report is None:
            self._finish(partial=True)

    @property
    def active(self) -> bool:
        """False once the watched steps are over: ``step()`` then does nothing."""
        return self.report is None

    def step(self) -> None:
        """Mark the end of one step of the user's loop."""
        if self.report is not None:
            return
        self._sync()
        now = time.perf_counter()
        phase = self.plan[self.index]
        self._end(phase, now)
        self.index += 1
        if self.index >= len(self.plan):
            self._finish(partial=False)
            return
        self._begin(self.plan[self.index])
        self._last = time.perf_counter()

    # -- phases --------------------------------------------------------------------------
    def _see_inputs(self, module: torch.nn.Module, args: Any) -> None:
        tensors = [t for t in iter_tensors(args) if t.dim() > 0]
        if self.batch_size is None and tensors:
            self.batch_size = int(tensors[0].shape[0])
        if self._session is not None:
            self._session.add_state(tensors)
            self._inputs.extend(tensors)

    def _sync(self) -> None:
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def _begin(self, phase: str) -> None:
        if phase == "timed" and not self._samples:
            self._memory.start()
        elif phase == "profiled":
            if self._profiler is None:
                activities = [ProfilerActivity.CPU]
                if self._device.type == "cuda":
                    activities.append(ProfilerActivity.CUDA)
                self._profiler = profile(activities=activities, record_shapes=True)
                self._profiler.__enter__()
            self._phase_stack.enter_context(record_function(STEP_TAG))
        elif phase == "counted":
            self._session = self._phase_stack.enter_context(counting(
                weights=list(persistent_tensors(self.model, self.optimizer)), state=[],
                root=self.model))
        self._last = time.perf_counter()

    def _end(self, phase: str, now: float) -> None:
        if phase == "timed":
            self._samples.append(now - self._last)
        elif phase in ("profiled", "counted"):
            self._phase_stack.close()
            next_phase = self.plan[self.index + 1] if self.index + 1 < len(self.plan) else ""
            if phase == "profiled" and next_phase != "profiled" and self._profiler is not None:
                self._profiler.__exit__(None, None, None)

    # -- the report ----------------------------------------------------------------------
    def _result(self) -> BatchResult:
        b = self.batch_size or 1
        result = BatchResult(b, Status.OK)
        if self._samples:
            reading = self._memory.stop()
            stats = latency_stats(self._samples)
            result.latency_s, result.throughput_per_s = stats, b / stats.median
            result.peak_memory_bytes, result.peak_memory_method = (reading.peak_bytes,
                                                                   reading.method)
            result.baseline_memory_bytes = reading.baseline_bytes
        result.available_memory_bytes = available_bytes(self._device)
        if self._profiler is not None and self._session is not None:
            steps = parse_events(self._profiler.events())[1:]
            fill_breakdown(result, self._session.ops, steps)
        return result

    def _finish(self, partial: bool) -> None:
        self._phase_stack.close()
        if self._profiler is not None and torch.autograd._profiler_enabled():
            self._profiler.__exit__(None, None, None)
        self._stack.close()  # hooks off: the loop runs untouched from here
        from batchscope.hardware import load_or_measure

        ceilings = load_or_measure(self._device.type)
        result = self._result()
        info = {"target": f"watch({type(self.model).__name__})", "unit": self.unit,
                "mode": "train" if self.model.training else "inference",
                "parameters": sum(p.numel() for p in self.model.parameters()),
                "parameter_bytes": sum(p.numel() * p.element_size()
                                       for p in self.model.parameters()),
                "dtype": str(next((p.dtype for p in self.model.parameters()),
                                  torch.float32)).replace("torch.", ""),
                "device": str(self._device), "threads": torch.get_num_threads()}
        run = {"tool_version": __version__, "torch_version": torch.__version__,
               "watch": {"steps": self.index, "timed_steps": len(self._samples)}}
        report = analyze(info, ceilings, [result] if result.latency_s else [], Limits(), run,
                         partial=partial, stop_reason="watched steps done" if not partial
                         else "the loop ended before the watched steps were done")
        classified = report.batches[0] if report.batches else None
        if classified is not None:
            estimates = [estimate_batch(classified, ceilings, classified.batch_size * k)
                         for k in ESTIMATE_FACTORS]
            report.estimates = [e for e in estimates if e is not None]
        self.report = report
        if self.out_dir is not None:
            from batchscope.reports import write_all

            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            write_all(report, self.out_dir)
