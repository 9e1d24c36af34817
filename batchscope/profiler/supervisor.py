"""The parent side of the sweep: starts workers, enforces timeouts, survives their deaths.

The parent never imports the user's model nor touches CUDA. It keeps one worker for as many
batch sizes as go well (the model is built once); after any failure the next batch size gets
a fresh worker, so an OOM kill or a poisoned CUDA context costs one batch size only. The
parent owns what the run knows: which batch size is the run's first step (where a failure
the contract explains is a model-file error, exit 4), and when errors repeat.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from batchscope.errors import ModelFileError, NothingMeasuredError
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits, Plan, grid_batch_sizes, predicted_not_to_fit
from batchscope.profiler.launcher import (
    DistributedConfig,
    LaunchedRanks,
    RanksDied,
    RanksTimedOut,
    rendezvous_failed,
)
from batchscope.profiler.worker_config import KEPT_BUFFERS_ENV, WorkerConfig
from batchscope.records import (
    BatchResult,
    GridPoint,
    Status,
    batch_result_from_dict,
    grid_point_from_dict,
)

# A batch size that takes longer than this (warm-up, timing, profiling, counting together) is
# stopped as `timeout`; a hung step must not hang the sweep.
DEFAULT_BATCH_TIMEOUT_S = 600.0
# Starting a worker: spawn, import torch, import the model file, build the model.
WORKER_START_TIMEOUT_S = 600.0
# Starting a distributed sweep's ranks takes at least this long to give up on (three
# processes import torch at once); a rendezvous that cannot form fails sooner, when torch's
# launcher gives up on it (after --timeout).
DISTRIBUTED_START_MIN_S = 120.0
# Measuring the ceilings on a machine seen for the first time (cached after).
CEILINGS_TIMEOUT_S = 300.0
# Time given to a worker to exit after SIGTERM before SIGKILL.
TERMINATE_GRACE_S = 2.0
POLL_S = 0.05


# Times kernel probes in the worker: specs -> {key: seconds} (the ones that ran).
Prober = Callable[[list[dict[str, Any]]], dict[str, float]]
# How the allocator check's worker was told to keep its buffers (report.json
# ``allocator.set_by``).
KEPT_BY_MALLOPT = "mallopt in the sweep's worker"
KEPT_BY_ENV = "the environment of a fresh worker"
# Seconds allowed for one round of kernel probes.
PROBE_TIMEOUT_S = 120.0


@dataclass
class SweepConfig:
    """What to sweep and how."""

    worker: WorkerConfig
    batch_sizes: list[int] | None = None
    limits: Limits = field(default_factory=Limits)
    batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_S
    recalibrate: bool = False
    measure_ceilings: bool = True
    # Why the remaining batch sizes need not be measured, given the results so far and the
    # ceilings ("" to go on); see Plan.early_stop. None: only the plateau rule.
    early_stop: Callable[[list[BatchResult], list[int], Ceilings, Prober], str] | None = None
    measure_all: bool = False  # no plateau or predicted stop: every batch size up to the cap
    # The kernel probes the finished sweep wants for its predictions (results, ceilings ->
    # specs; see profiler/probe.py), run in the worker before it stops; None: none.
    final_probes: Callable[[list[BatchResult], Ceilings], list[dict[str, Any]]] | None = None
    # Probe times by spec key, filled as probes run (the report builder reads the same dict).
    probes_s: dict[str, float] = field(default_factory=dict)
    # A data-parallel sweep: the ranks run under torch's launcher (profiler/launcher.py).
    distributed: DistributedConfig | None = None
    # The batch sizes to time again in a worker whose allocator keeps its buffers (CPU
    # sweeps whose page faults were flagged; classifiers/allocator.py); None: never.
    retime_sizes: Callable[[list[BatchResult]], list[int]] | None = None


@dataclass
class SweepOutcome:
    """What the sweep produced; ``results`` hold every batch size tried, in order."""

    info: dict[str, Any]
    ceilings: Ceilings | None
    results: list[BatchResult]
    stop_reason: str
    interrupted: bool = False
    flags: list[str] = field(default_factory=list)
    stopped_at_cap: bool = False  # the plan's largest batch size was reached (--max-batch)
    grid: list[GridPoint] = field(default_factory=list)  # the context grid (CONTEXTS)
    # The same batch sizes timed with the allocator keeping its buffers, and how it was
    # told to (KEPT_BY_MALLOPT or KEPT_BY_ENV; "" when nothing was re-timed).
    kept_buffers: list[BatchResult] = field(default_factory=list)
    kept_buffers_set_by: str = ""


class Callbacks:
    """Hooks the caller may override to follow the sweep (progress bars, partial reports)."""

    def on_ready(self, info: dict[str, Any]) -> None: ...
    def on_ceilings(self, ceilings: Ceilings) -> None: ...
    def on_phase(self, batch_size: int, phase: str) -> None: ...
    def on_result(self, result: BatchResult, results: list[BatchResult]) -> None: ...
    def on_interrupt(self) -> None: ...


class _WorkerDied(Exception):
    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"worker exited with {exitcode}")
        self.exitcode = exitcode


class _Timeout(Exception):
    pass


# What a worker handle raises when its process (or a rank) dies, and when a deadline passes.
_DIED = (_WorkerDied, RanksDied)
_TIMED_OUT = (_Timeout, RanksTimedOut)


def _worker_entry(conn: Any, config: WorkerConfig) -> None:
    """The worker process's target: imports torch there only, and leaves without teardown.

    The parent refers to this function, not to :mod:`batchscope.profiler.worker`, so it never
    imports torch. After a normal end the process exits at once: an interpreter that has
    loaded torch takes ~0.7 s to tear down, and the parent waits for it. Everything the
    worker produces has been sent through the pipe or written by then.
    """
    from batchscope.profiler.worker import worker_main

    worker_main(conn, config)
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in this process's environment for the block, then restored."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Handle:
    """One worker process and its pipe."""

    def __init__(self, config: WorkerConfig) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_entry, args=(child, config), daemon=True)
        with _environment(config.env or {}):  # the child's libc reads it as it starts
            self.proc.start()
        child.close()

    def send(self, message: tuple[str, Any]) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            raise _WorkerDied(self.proc.exitcode) from None

    def recv(self, deadline: float) -> tuple[str, Any]:
        while True:
            if self.conn.poll(POLL_S):
                try:
                    return self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(TERMINATE_GRACE_S)
                    raise _WorkerDied(self.proc.exitcode) from None
            if not self.proc.is_alive() and not self.conn.poll(0):
                raise _WorkerDied(self.proc.exitcode)
            if time.monotonic() > deadline:
                raise _Timeout()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self, graceful: bool = True) -> None:
        if graceful and self.proc.is_alive():
            try:
                self.conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(TERMINATE_GRACE_S)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(TERMINATE_GRACE_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(TERMINATE_GRACE_S)
        self.conn.close()


def fmt_mib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**20:,.0f} MiB"


def load_oom_message(payload: dict[str, Any]) -> str:
    """One sentence for a model that does not even load onto its device."""
    params = payload.get("parameter_bytes")
    what = f" (its parameters and buffers take {fmt_mib(params)})" if params else ""
    return (
        f"the model does not fit on {payload.get('device', 'the device')}{what}: "
        f"{payload['message']}; {fmt_mib(payload.get('available_memory_bytes'))} was free."
    )


def _death_of(exc: Exception) -> tuple[Status, str]:
    if isinstance(exc, RanksDied):
        return Status.RANK_FAILED, exc.why
    return _death_status(getattr(exc, "exitcode", None))


def _death_status(exitcode: int | None) -> tuple[Status, str]:
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGKILL:
            return Status.KILLED, f"worker killed by {name} (probable host OOM)"
        return Status.KILLED, f"worker killed by {name}"
    return Status.KILLED, f"worker exited unexpectedly with code {exitcode}"


class Sweep:
    """Run the plan, one batch size at a time, in supervised workers.

    Example:
        >>> outcome = Sweep(SweepConfig(WorkerConfig("samples/mlp.py"))).run()  # doctest: +SKIP
    """

    def __init__(self, config: SweepConfig, callbacks: Callbacks | None = None) -> None:
        self.config = config
        self.callbacks = callbacks or Callbacks()
        self.handle: _Handle | LaunchedRanks | None = None
        self.info: dict[str, Any] = {}
        self.ceilings: Ceilings | None = None
        self.results: list[BatchResult] = []
        self.grid: list[GridPoint] = []
        self.kept_buffers: list[BatchResult] = []
        self.kept_buffers_set_by = ""
        self.worker_config = config.worker  # what the next worker started is told
        self.plan: Plan | None = None
        self.ceilings_error = ""
        self.tried: set[str] = set()  # kernel probe keys already sent to a worker
        self.bounded_probe_s = 0.0  # seconds the cost-bounded probes took, measured

    def _new_handle(self) -> _Handle | LaunchedRanks:
        if self.config.distributed is not None:
            return LaunchedRanks(self.config.worker, self.config.distributed,
                                 self.config.batch_timeout_s)
        return _Handle(self.worker_config)

    def _start_worker(self) -> _Handle | LaunchedRanks:
        handle = self._new_handle()
        what = "the ranks" if self.config.distributed else "the worker"
        try:
            kind, payload = handle.recv(time.monotonic() + self._start_timeout_s())
        except _DIED as exc:
            status, why = _death_of(exc)
            handle.stop(graceful=False)
            if isinstance(handle, LaunchedRanks) and rendezvous_failed(handle.output()):
                raise NothingMeasuredError(self._start_timeout_message()) from None
            raise NothingMeasuredError(f"{what} died while loading the model: {why}.")
        except _TIMED_OUT:
            handle.stop(graceful=False)
            raise NothingMeasuredError(self._start_timeout_message()) from None
        if kind == "contract_error":
            handle.stop(graceful=False)
            err = ModelFileError(payload["message"])
            err.detail = payload.get("detail", "")  # type: ignore[attr-defined]
            raise err
        if kind == "load_oom":
            handle.stop(graceful=False)
            raise NothingMeasuredError(load_oom_message(payload))
        self.info = payload
        return handle

    def _start_timeout_s(self) -> float:
        # A rendezvous that cannot form waits for nodes that never come: no ten minutes.
        if self.config.distributed is not None:
            return min(WORKER_START_TIMEOUT_S,
                       max(self.config.batch_timeout_s, DISTRIBUTED_START_MIN_S))
        return WORKER_START_TIMEOUT_S

    def _start_timeout_message(self) -> str:
        dist = self.config.distributed
        seconds = self._start_timeout_s()
        if dist is None:
            return f"loading the model took longer than {seconds:.0f} s."
        where = dist.rdzv_endpoint or "this machine"
        return (f"the {dist.world_size} ranks did not start: the rendezvous at {where} did "
                f"not form within {min(seconds, self.config.batch_timeout_s):.0f} s (are all "
                f"{dist.nnodes} nodes started with the same --rdzv-endpoint, and is its port "
                "reachable?).")

    def _worker(self) -> _Handle | LaunchedRanks:
        if self.handle is None or not self.handle.alive():
            if self.handle is not None:
                self.handle.stop(graceful=False)
            self.handle = self._start_worker()
        return self.handle

    def run(self) -> SweepOutcome:
        """Run until the plan stops or the user interrupts; never lose a finished batch."""
        interrupted = False
        try:
            handle = self._worker()
            self.callbacks.on_ready(self.info)
            if self.config.measure_ceilings:
                self._measure_ceilings(handle)
            explicit = self.config.batch_sizes or self.info.get("batch_sizes")
            self.plan = Plan(explicit, self.config.limits, self._early_stop,
                             self.config.measure_all)
            while (b := self.plan.next_batch(self.results)) is not None:
                skip = predicted_not_to_fit(self.results, b,
                                            self.config.limits.memory_budget_bytes)
                result = BatchResult(b, Status.SKIPPED, error=skip) if skip else self._measure(b)
                self.results.append(result)
                self.callbacks.on_result(result, self.results)
            if self.config.final_probes is not None and self.ceilings is not None:
                self.probe(self.config.final_probes(self.results, self.ceilings))
            self._context_grid()
            self._kept_buffers()
        except KeyboardInterrupt:
            interrupted = True
            self.callbacks.on_interrupt()
        finally:
            if self.handle is not None:
                self.handle.stop(graceful=not interrupted)
                self.handle = None
        stop_reason = "interrupted by the user" if interrupted else (
            self.plan.stop_reason if self.plan else ""
        )
        flags = [self.ceilings_error + "; ops are not classified"] if self.ceilings_error else []
        return SweepOutcome(self.info, self.ceilings, self.results, stop_reason, interrupted,
                            flags, stopped_at_cap=bool(self.plan and self.plan.stopped_at_cap),
                            grid=self.grid, kept_buffers=self.kept_buffers,
                            kept_buffers_set_by=self.kept_buffers_set_by)

    def _context_grid(self) -> None:
        """Time the measured batch sizes at every length of the second axis (timing and
        peak memory only): CONTEXTS for the serving what-if (inference), SEQ_LENS for the
        batch × sequence grid (inference or training). At each length the sizes go up, and
        a failure ends that length's row: a larger batch at the same length would fail too."""
        contexts = self.info.get("contexts") or []
        axis = "context" if contexts else "seq_len"
        lengths = contexts or self.info.get("seq_lens") or []
        if len(lengths) < 2 or self.config.distributed is not None or (
                axis == "context" and self.info.get("mode") != "inference"):
            return
        for length in lengths:
            if axis == "seq_len" and length == lengths[0]:
                continue  # the sweep's own length: its measurements are the grid's row
            for b in grid_batch_sizes(self.results, lengths[0], length,
                                      self.config.limits.memory_budget_bytes, axis,
                                      self.info.get("parameter_bytes")):
                self.callbacks.on_phase(b, f"{axis.replace('_', ' ')} {length}")
                point = self._grid_point(b, length, axis)
                self.grid.append(point)
                if point.status != Status.OK:
                    break

    def _kept_buffers(self) -> None:
        """Time the batch sizes whose page faults took a share of the step again, timing
        only, with the allocator keeping its buffers: the same model side by side with the
        allocator a long-running process would run with. The sweep's own worker takes the
        setting through ``mallopt`` (profiler/glibc_malloc.py); where it cannot, a fresh
        worker starts with KEPT_BUFFERS_ENV."""
        if self.config.retime_sizes is None or self.config.distributed is not None \
                or not str(self.info.get("device", "")).startswith("cpu"):
            return
        sizes = self.config.retime_sizes(self.results)
        if not sizes:
            return
        payload, _, _ = self._request(("keep_buffers", None), "kept_buffers")
        in_place = bool(payload)
        kept_by = self.handle  # the worker that took the setting
        if not in_place:
            self._drop_worker(graceful=True)
            self.worker_config = dataclasses.replace(
                self.config.worker, op_breakdown=False,
                env={**(self.config.worker.env or {}), **KEPT_BUFFERS_ENV})
        self.kept_buffers_set_by = KEPT_BY_MALLOPT if in_place else KEPT_BY_ENV
        try:
            for b in sizes:
                if in_place and (kept_by is None or self.handle is not kept_by
                                 or not kept_by.alive()):
                    break  # a replacement worker would time the default allocator
                self.callbacks.on_phase(b, "allocator keeping its buffers")
                # A failure drops the worker, and the setting with it: the check ends there.
                result = self._timed_only(b)
                self.kept_buffers.append(result)
                if result.status != Status.OK:
                    break
        finally:
            if not in_place:
                self._drop_worker(graceful=True)
                self.worker_config = self.config.worker

    def _timed_only(self, batch_size: int) -> BatchResult:
        """One batch size timed by the current worker (no op breakdown), reported to
        nobody: a failure is this result's status, never the run's."""
        payload, status, why = self._request(
            ("batch", {"batch_size": batch_size, "first_step": False, "op_breakdown": False}),
            "result")
        if payload is None:
            return BatchResult(batch_size, status, error=why)
        result = batch_result_from_dict(payload)
        if result.status != Status.OK:  # the worker exits after a failure
            self._drop_worker(graceful=True)
        return result

    def _grid_point(self, batch_size: int, length: int, axis: str) -> GridPoint:
        payload, status, why = self._request(
            ("grid", {"batch_size": batch_size, "length": length}), "grid_point")
        if payload is None:
            return (GridPoint(batch_size, length, status, error=why) if axis == "context"
                    else GridPoint(batch_size, None, status, error=why, seq_len=length))
        point = grid_point_from_dict(payload)
        if point.status != Status.OK:  # the worker exits after a failure
            self._drop_worker(graceful=True)
        return point

    def _request(self, message: tuple[str, Any], reply: str
                 ) -> tuple[dict[str, Any] | None, Status, str]:
        """Send ``message`` to the worker (started if need be) and wait, within the batch
        timeout, for the ``reply`` message: (its payload, OK, ""), or (None, the status,
        why) when the worker could not start, died or ran out of time."""
        deadline = time.monotonic() + self.config.batch_timeout_s
        try:
            handle = self._worker()
            handle.send(message)
            while True:
                kind, payload = handle.recv(deadline)
                if kind == reply:
                    return payload, Status.OK, ""
        except NothingMeasuredError as exc:  # a replacement worker failed to start
            return None, Status.KILLED, str(exc)
        except (*_DIED, *_TIMED_OUT) as exc:
            self._drop_worker(graceful=False)
            if isinstance(exc, _DIED):
                return None, *_death_of(exc)
            return None, Status.TIMEOUT, f"no result within {self.config.batch_timeout_s:.0f} s"

    def _drop_worker(self, graceful: bool) -> None:
        if self.handle is not None:
            self.handle.stop(graceful=graceful)
            self.handle = None

    def _early_stop(self, results: list[BatchResult], remaining: list[int]) -> str:
        if self.config.early_stop is None or self.ceilings is None:
            return ""
        return self.config.early_stop(results, remaining, self.ceilings, self.probe)

    def probe(self, specs: list[dict[str, Any]]) -> dict[str, float]:
        """Time the kernel probes not timed yet in the worker; all times known for
        ``specs``. A probe round that fails or times out costs the worker, nothing else."""
        known = self.config.probes_s
        wanted = [s for s in specs if s["key"] not in known and s["key"] not in self.tried]
        if self.config.distributed is not None and self.handle is None:
            wanted = []  # the ranks stopped: no relaunch of every rank for probes
        self.tried.update(s["key"] for s in wanted)  # a probe that failed is not retried
        if wanted:
            try:
                handle = self._worker()
                handle.send(("probe", {"specs": wanted, "cache_bytes": self._cold_cache(),
                                       "bounded_spent_s": self.bounded_probe_s}))
                kind, payload = handle.recv(time.monotonic() + PROBE_TIMEOUT_S)
                if kind == "probes":
                    known.update(payload.get("times_s") or {})
                    # Past the cost-bounded probes' budget: a later round, with a larger
                    # budget (the sweep went on), may time them.
                    self.tried.difference_update(payload.get("skipped") or [])
                    self.bounded_probe_s += float(payload.get("bounded_s") or 0.0)
            except (*_DIED, *_TIMED_OUT, NothingMeasuredError):
                if self.handle is not None:
                    self.handle.stop(graceful=False)
                    self.handle = None
        return {s["key"]: known[s["key"]] for s in specs if s["key"] in known}

    def _cold_cache(self) -> int | None:
        """The cache size to keep probes out of, when the model's weights outgrow it (else
        None: probed hot, as such a model runs)."""
        cache = self.ceilings.cache_bytes if self.ceilings else None
        params = self.info.get("parameter_bytes")
        if cache and isinstance(params, (int, float)) and params > cache:
            return cache
        return None

    def _measure_ceilings(self, handle: _Handle) -> None:
        """Ask the worker for the ceilings; without them the sweep still runs, unclassified."""
        try:
            handle.send(("ceilings", self.config.recalibrate))
            kind, payload = handle.recv(time.monotonic() + CEILINGS_TIMEOUT_S)
        except (*_DIED, *_TIMED_OUT) as exc:
            self.ceilings_error = f"measuring the ceilings failed ({exc or 'timed out'})"
            if self.handle is not None:
                self.handle.stop(graceful=False)
                self.handle = None
            return
        self.ceilings = Ceilings.from_dict(payload)
        self.callbacks.on_ceilings(self.ceilings)

    def _measure(self, batch_size: int) -> BatchResult:
        timed: BatchResult | None = None
        started = time.monotonic()
        deadline = started + self.config.batch_timeout_s
        try:
            try:
                handle = self._worker()
            except NothingMeasuredError as exc:  # a replacement worker failed to start
                return BatchResult(batch_size, Status.KILLED, error=str(exc))
            # The run's first step is where the contract is checked; a replacement worker
            # cannot tell, so the parent says.
            handle.send(("batch", {"batch_size": batch_size, "first_step": not self.results}))
            while True:
                kind, payload = handle.recv(deadline)
                if kind == "phase":
                    self.callbacks.on_phase(batch_size, payload["phase"])
                elif kind == "timed":
                    timed = batch_result_from_dict(payload)
                elif kind == "result":
                    result = batch_result_from_dict(payload)
                    if result.status == Status.RANK_FAILED and isinstance(handle, LaunchedRanks):
                        # Rank 0 saw a peer vanish; the launcher knows which rank died.
                        died = handle.launcher_cause()
                        if died:
                            result.error = f"{died} (rank 0 had seen: {result.error})"
                        result.flags.append(f"the ranks' own output: {handle.log_path}")
                    if result.status != Status.OK:  # the worker exits after any failure
                        # (a failed rank cannot take the stop its peers would wait on)
                        handle.stop(graceful=result.status != Status.RANK_FAILED)
                        self.handle = None
                    return result
                elif kind == "contract_error":
                    err = ModelFileError(payload["message"])
                    err.detail = payload.get("detail", "")  # type: ignore[attr-defined]
                    raise err
        except KeyboardInterrupt:
            if timed is not None:
                timed.flags.append("interrupted during the op breakdown")
                self.results.append(timed)
            else:
                self.results.append(BatchResult(batch_size, Status.INTERRUPTED,
                                                error="interrupted by the user"))
            raise
        except _DIED as exc:
            status, why = _death_of(exc)
            return self._failed(batch_size, timed, status, why)
        except _TIMED_OUT:
            who = "the ranks were" if self.config.distributed else "worker"
            why = f"no result within {self.config.batch_timeout_s:.0f} s; {who} stopped"
            return self._failed(batch_size, timed, Status.TIMEOUT, why)

    def _failed(self, batch_size: int, timed: BatchResult | None, status: Status,
                why: str) -> BatchResult:
        if self.handle is not None:
            self.handle.stop(graceful=False)
            self.handle = None
        if timed is not None and status == Status.TIMEOUT:
            timed.flags.append(f"op breakdown lost: {why}")
            return timed
        result = BatchResult(batch_size, status, error=why)
        if timed is not None:
            result.flags.append("the timing pass had finished before the worker died")
        return result
