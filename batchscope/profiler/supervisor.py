"""The parent side of the sweep: starts workers, enforces timeouts, survives their deaths.

The parent never imports the user's model nor touches CUDA. It keeps one worker for as many
batch sizes as go well (the model is built once); after any failure the next batch size gets
a fresh worker, so an OOM kill or a poisoned CUDA context costs one batch size only. The
parent owns what the run knows: which batch size is the run's first step (where a failure
the contract explains is a model-file error, exit 4), and when errors repeat.

The sweep runs in phases, each a method returning its part of the :class:`SweepOutcome`:
the ceilings, the plan's batch sizes (with the predicted stop between them), the final
kernel probes, the second axis's grid (CONTEXTS or SEQ_LENS) and the allocator re-timing.
It talks to its worker in the typed messages of :mod:`batchscope.profiler.protocol`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing as mp
import os
import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any, Protocol, TypeVar

from batchscope.errors import ModelFileError, NothingMeasuredError
from batchscope.hardware.types import Ceilings
from batchscope.plan import (
    PLATEAU_GAIN,
    PLATEAU_PATIENCE,
    Limits,
    Plan,
    grid_batch_sizes,
    over_limits,
    predicted_not_to_fit,
)
from batchscope.profiler.launcher import (
    DistributedConfig,
    LaunchedRanks,
    RanksDied,
    rendezvous_failed,
)
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
    ProbesTimed,
    Ready,
    Reply,
    Request,
    RunProbes,
    StopWorker,
    Timed,
    TimeGridPoint,
    WorkerDied,
    WorkerHandle,
    WorkerTimedOut,
)
from batchscope.profiler.rounds_run import RoundsRun, rounds_drift
from batchscope.profiler.worker_config import KEPT_BUFFERS_ENV, WorkerConfig
from batchscope.records import (
    BatchResult,
    Flag,
    GridPoint,
    ModelInfo,
    Status,
    Stop,
    StopKind,
)
from batchscope.records.flag_payloads import (
    BreakdownInterrupted,
    BreakdownLost,
    BudgetSkipped,
    BudgetStop,
    CeilingsFailed,
    InterruptedStop,
    PlateauStop,
    PlateauUnconfirmed,
    PredictedStopUnconfirmed,
    RanksOutput,
    TimedBeforeDeath,
)
from batchscope.records.interval import ControlTiming, DriftControl
from batchscope.records.noise import control_timing
from batchscope.records.probe import ProbeSpec
from batchscope.records.report import AllocatorSetBy, Mode
from batchscope.records.rounds import DecisionRounds, RoundBlock, RoundsStop
from batchscope.records.run import DEFAULT_BATCH_TIMEOUT_S
from batchscope.rounds import (
    BLOCK_SAMPLES,
    CHECK_MAX_ROUNDS,
    CHECK_MIN_ROUNDS,
    ROUNDS_MIN_S,
    WORKERS,
    Verdict,
    decision_candidates,
    least_rounds_s,
    measured,
    paired_view,
    plateau_verdict,
)

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
# Time given to a SIGKILLed worker to be gone: the kernel unmaps its memory first, seconds
# for tens of GB. Bounded, so that a worker stuck in the kernel (a hung GPU driver) cannot
# hang the command; one not gone by then is waited for again on the way out (reap_workers).
REAP_AFTER_KILL_S = 30.0
POLL_S = 0.05
# The allocator's re-timing (retime_keeping_buffers) times each size for this long (at least
# BLOCK_SAMPLES samples), not the sweep's adaptive pass: it was a fifth of a CNN sweep's wall
# time, timing every measured size up to a second again.
ALLOCATOR_BLOCK_S = 0.2
# Seconds allowed for one round of kernel probes (past them the round and the worker are lost).
PROBE_TIMEOUT_S = 120.0
# The rounds of kernel probes together may take at most this share of the wall time the
# sweep has spent measuring its batch sizes, each round at least PROBE_ROUND_MIN_S and at
# most PROBE_ROUND_MAX_S (well inside PROBE_TIMEOUT_S); the worker skips, not begins, a
# probe it expects to end past its round (profiler/probe.run_probes), and a later round may
# time it. Unbounded, a 2-layer GPT-2 training step's matmuls at every power of two to 1024
# ran past PROBE_TIMEOUT_S after 42 s of sweep: 122 s spent, every probe lost and the
# worker restarted; a T5's batch 16 took 134 s so, for a 954 ms step. A quarter since the
# decision rounds (issue 47): at half, the probes took 15 of the decode sample's 51 s.
PROBE_ROUND_SHARE = 0.25
PROBE_ROUND_MIN_S = 3.0
PROBE_ROUND_MAX_S = 45.0

R = TypeVar("R", BatchDone, GridTimed, BuffersKept)


class EarlyStopPolicy(Protocol):
    """The sweep's predicted stop (classifiers/early_stop.EarlyStop): which kernel probes it
    wants, then its decision on their times. The sweep runs the probes in between."""

    def probes(self, results: list[BatchResult], remaining: list[int],
               ceilings: Ceilings) -> list[ProbeSpec]: ...

    def decide(self, results: list[BatchResult], remaining: list[int], ceilings: Ceilings,
               probes_s: dict[str, float]) -> Stop | None: ...

    def overrules_plateau(self, results: list[BatchResult], remaining: list[int],
                          ceilings: Ceilings, bar_per_s: float,
                          probes_s: dict[str, float]) -> Flag | None: ...

    def deciding_sizes(self, results: list[BatchResult], ceilings: Ceilings) -> list[int]:
        """The measured sizes whose figures the stop rests on (the pick so far, the best,
        the last): what paired rounds time before the stop is taken."""
        ...


@dataclass
class SweepConfig:
    """What to sweep and how."""

    worker: WorkerConfig
    batch_sizes: list[int] | None = None
    limits: Limits = field(default_factory=Limits)
    batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_S
    recalibrate: bool = False
    measure_ceilings: bool = True
    # The decision rounds (profiler/rounds_run.py): the plateau and predicted stops checked
    # on paired rounds, and the pick made from them once the plan ends. False (--no-rounds):
    # every decision reads the sequential timings, and the report says so.
    rounds: bool = True
    # The shuffles' seed (None: drawn afresh, and recorded in the report).
    rounds_seed: int | None = None
    # --budget: the whole sweep's wall time, plan and rounds; None: no limit.
    budget_s: float | None = None
    # The predicted stop, asked before each batch size once the ceilings are known (not
    # for an explicit list, nor with measure_all). None: only the plan's own rules.
    early_stop: EarlyStopPolicy | None = None
    measure_all: bool = False  # no plateau or predicted stop: every batch size up to the cap
    # The kernel probes the finished sweep wants for its predictions (results, ceilings ->
    # specs; see profiler/probe.py), run in the worker before it stops; None: none.
    final_probes: Callable[[list[BatchResult], Ceilings], list[ProbeSpec]] | None = None
    # Probe times by spec key, filled as probes run (the report builder reads the same dict).
    probes_s: dict[str, float] = field(default_factory=dict)
    # A data-parallel sweep: the ranks run under torch's launcher (profiler/launcher.py).
    distributed: DistributedConfig | None = None
    # The batch sizes to time again in a worker whose allocator keeps its buffers (CPU
    # sweeps whose page faults were flagged; classifiers/allocator.py); None: never.
    retime_sizes: Callable[[list[BatchResult]], list[int]] | None = None


@dataclass(frozen=True)
class SweepOutcome:
    """What the sweep produced; ``results`` hold every batch size tried, in order.

    Attributes:
        model: the model as the worker saw it.
        ceilings: the machine's roofs; None when not measured (or measuring them failed:
            then ``flags`` says so).
        results: every batch size tried, in order.
        stop: why the sweep ended where it did (None: it never got to the plan).
        interrupted: the user stopped it; what was measured is kept.
        flags: what the sweep noticed about the run (the ceilings failed).
        grid: the second axis's points (CONTEXTS or SEQ_LENS).
        kept_buffers: batch sizes timed again with the allocator keeping its buffers, and
            how it was told to (None when nothing was re-timed).
        drift: the plan's timings against the decision rounds' (None: no rounds ran).
        rounds: the decision rounds (None: none ran).
        amp_off: under ``--amp``, the fastest batch size timed again with autocast off
            (None: no --amp, or it did not run).
    """

    model: ModelInfo
    ceilings: Ceilings | None
    results: list[BatchResult]
    stop: Stop | None
    interrupted: bool = False
    flags: list[Flag] = field(default_factory=list)
    grid: list[GridPoint] = field(default_factory=list)
    kept_buffers: list[BatchResult] = field(default_factory=list)
    kept_buffers_set_by: AllocatorSetBy | None = None
    drift: DriftControl | None = None
    amp_off: ControlTiming | None = None
    rounds: DecisionRounds | None = None


class Callbacks:
    """Hooks the caller may override to follow the sweep (progress bars, partial reports)."""

    def on_ready(self, model: ModelInfo) -> None: ...
    def on_ceilings(self, ceilings: Ceilings) -> None: ...
    def on_phase(self, batch_size: int, phase: str) -> None: ...
    def on_result(self, result: BatchResult, results: list[BatchResult]) -> None: ...
    def on_block(self, block: RoundBlock) -> None: ...
    def on_interrupt(self) -> None: ...


class ProcessDied(WorkerDied):
    """A worker process that exited, with its exit code (negative: the signal)."""

    def __init__(self, exitcode: int | None) -> None:
        super().__init__(f"worker exited with {exitcode}")
        self.exitcode = exitcode


class _Timeout(WorkerTimedOut):
    pass


def _worker_entry(conn: Connection, config: WorkerConfig) -> None:
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


# Every worker process started and not yet waited for (reaped): what reap_workers ends.
_UNREAPED: set[BaseProcess] = set()


def _forget_if_reaped(proc: BaseProcess) -> None:
    if proc.exitcode is not None:  # set once the process was waited for
        _UNREAPED.discard(proc)


def reap_workers(within_s: float = REAP_AFTER_KILL_S) -> bool:
    """Kill every worker this process started that is still running, and wait for each,
    within ``within_s`` in all; True when none is left unreaped.

    For the command's way out, whichever it takes (a second Ctrl-C exits at once, without
    the sweep's own stop): a worker left running, or dead and not waited for, stayed
    behind in the caller's process group after the command ended (what a CI step or
    ``timeout`` counts)."""
    deadline = time.monotonic() + within_s
    for proc in list(_UNREAPED):
        if proc.is_alive():
            proc.kill()
    for proc in list(_UNREAPED):
        proc.join(max(0.0, deadline - time.monotonic()))
        _forget_if_reaped(proc)
    return not _UNREAPED


def reap_children(within_s: float = REAP_AFTER_KILL_S) -> None:
    """On the way out of the command: every worker waited for (:func:`reap_workers`), then
    multiprocessing's resource tracker stopped and waited for.

    The ``spawn`` start method starts that tracker with the first worker and Python 3.11
    never waits for it: it outlived the command, and under a PID 1 that reaps nothing (a
    container's ``sleep infinity``) stayed in the caller's process group as a defunct
    process. Closing our end of its pipe stops it once no other process holds the pipe, so
    only when every worker is gone, and it is waited for within ``within_s`` (a process a
    worker left behind may still hold the pipe: then it is left as it is). Not for the
    library: its caller's process may use the tracker after the sweep."""
    deadline = time.monotonic() + within_s
    if not reap_workers(within_s):
        return
    from multiprocessing import resource_tracker

    # What ResourceTracker._stop does, but with a bounded wait (its waitpid has none). Its
    # private fields, there since Python 3.8; without them the tracker is left as it is.
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if tracker is None or not isinstance(fd, int) or not isinstance(pid, int):
        return
    tracker._fd = tracker._pid = None  # a later use starts another
    with contextlib.suppress(OSError):
        os.close(fd)
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] or time.monotonic() > deadline:
                return
        except ChildProcessError:  # not ours, or already waited for
            return
        time.sleep(POLL_S / 5)


# The signals that stop a sweep (Ctrl-C, and SIGTERM where the CLI turns it into one).
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_Handler = Callable[[int, FrameType | None], Any]


class InterruptHold:
    """Ctrl-C and SIGTERM held off while the run's last steps run, once everything is
    measured: stopping the worker, assembling the report, writing and printing it.

    A KeyboardInterrupt raised in the middle of those lost the whole report: report.json
    stayed "sweep in progress" and no table was printed. While engaged, the first signal is
    recorded (:attr:`held`) and the steps go on: the report they finish is complete. A
    second one goes to the handler the hold replaced ("a second Ctrl-C exits at once").
    Only signals whose handler is Python code are held (SIGTERM left to its default still
    ends the process as asked), and only in the main thread, the one that receives them.

    Example:
        >>> hold = InterruptHold()
        >>> hold.engage()
        >>> # ... write the report ...
        >>> hold.release()
        >>> hold.held
        []
    """

    def __init__(self) -> None:
        self.held: list[int] = []
        self._previous: dict[int, _Handler] = {}

    def engage(self) -> None:
        """Hold the signals from now on (again nothing when already engaged)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for signum in INTERRUPT_SIGNALS:
            handler = signal.getsignal(signum)
            if callable(handler):
                self._previous[signum] = handler
                signal.signal(signum, self._hold)

    def release(self) -> None:
        """Put back the handlers the hold replaced; the held signal is not delivered again
        (the run it would have stopped has ended)."""
        for signum, handler in self._previous.items():
            if signal.getsignal(signum) == self._hold:  # not one set since (on_interrupt's)
                signal.signal(signum, handler)
        self._previous = {}

    def _hold(self, signum: int, frame: FrameType | None) -> None:
        passed_on = self._previous.get(signum)
        if not self.held or passed_on is None:
            self.held.append(signum)
            return
        passed_on(signum, frame)

    def __enter__(self) -> InterruptHold:
        self.engage()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ProcessHandle:
    """One worker process and its pipe: a :class:`WorkerHandle`."""

    def __init__(self, config: WorkerConfig) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_entry, args=(child, config), daemon=True)
        with _environment(config.env or {}):  # the child's libc reads it as it starts
            self.proc.start()
        _UNREAPED.add(self.proc)
        child.close()

    def send(self, request: Request) -> None:
        try:
            self.conn.send(request)
        except (BrokenPipeError, OSError):
            raise ProcessDied(self.proc.exitcode) from None

    def recv(self, deadline: float) -> Reply:
        while True:
            if self.conn.poll(POLL_S):
                try:
                    reply: Reply = self.conn.recv()
                except (EOFError, OSError):
                    self.proc.join(TERMINATE_GRACE_S)
                    raise ProcessDied(self.proc.exitcode) from None
                return reply
            if not self.proc.is_alive() and not self.conn.poll(0):
                raise ProcessDied(self.proc.exitcode)
            if time.monotonic() > deadline:
                raise _Timeout()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self, graceful: bool = True) -> None:
        if graceful and self.proc.is_alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(StopWorker())
            self.proc.join(TERMINATE_GRACE_S)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(TERMINATE_GRACE_S)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(REAP_AFTER_KILL_S)
        _forget_if_reaped(self.proc)
        self.conn.close()


def by_batch(specs: list[ProbeSpec]) -> list[ProbeSpec]:
    """The probes in the order to time them, so that a round cut short by its time loses
    the costliest, at the sizes furthest from any measured, and never a whole op: every op
    at the smallest size, then every op at the next (each op's sizes stay ascending, as
    run_probes wants them); the cost-bounded ones after them, in their own
    (cheapest-first) order."""
    free = [s for s in specs if s.budget_s is None]
    bounded = [s for s in specs if s.budget_s is not None]
    return sorted(free, key=lambda s: s.batch if s.batch is not None else 0) + bounded


def fmt_mib(n: int | None) -> str:
    return "unknown" if n is None else f"{n / 2**20:,.0f} MiB"


def load_oom_message(oom: LoadOom) -> str:
    """One sentence for a model that does not even load onto its device."""
    params = oom.parameter_bytes
    what = f" (its parameters and buffers take {fmt_mib(params)})" if params else ""
    return (
        f"the model does not fit on {oom.device or 'the device'}{what}: "
        f"{oom.message}; {fmt_mib(oom.available_memory_bytes)} was free."
    )


def _death_of(exc: WorkerDied) -> tuple[Status, str]:
    if isinstance(exc, RanksDied):
        return Status.RANK_FAILED, exc.why
    return death_status(exc.exitcode if isinstance(exc, ProcessDied) else None)


def death_status(exitcode: int | None) -> tuple[Status, str]:
    """How a batch size ends when its worker exited with ``exitcode``, and why in words."""
    if exitcode is not None and exitcode < 0:
        sig = -exitcode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        if sig == signal.SIGKILL:
            return Status.KILLED, f"worker killed by {name} (probable host OOM)"
        return Status.KILLED, f"worker killed by {name}"
    return Status.KILLED, f"worker exited unexpectedly with code {exitcode}"


def _contract_error(reply: ContractError) -> ModelFileError:
    return ModelFileError(reply.message, detail=reply.detail)


class Sweep:
    """Run the plan, one batch size at a time, in supervised workers.

    Example:
        >>> outcome = Sweep(SweepConfig(WorkerConfig("samples/mlp.py"))).run()  # doctest: +SKIP
        >>> outcome.stop  # doctest: +SKIP
    """

    def __init__(self, config: SweepConfig, callbacks: Callbacks | None = None) -> None:
        self.config = config
        self.callbacks = callbacks or Callbacks()
        self.handle: WorkerHandle | None = None
        self.model = ModelInfo(target=config.worker.model_path)  # the worker's, once ready
        self.ceilings: Ceilings | None = None
        self.flags: list[Flag] = []
        # What the phases measured so far: an interrupt keeps all of it.
        self.results: list[BatchResult] = []
        self.grid: list[GridPoint] = []
        self.kept_buffers: list[BatchResult] = []
        self.kept_buffers_set_by: AllocatorSetBy | None = None
        self.drift: DriftControl | None = None
        self.amp_off: ControlTiming | None = None
        self.measured_at: dict[int, float] = {}  # monotonic seconds each size finished
        self.worker_config = config.worker  # what the next worker started is told
        self.plan: Plan | None = None
        self.tried: set[str] = set()  # kernel probe keys already sent to a worker
        self.bounded_probe_s = 0.0  # seconds the cost-bounded probes took, measured
        self.probe_rounds_s = 0.0  # wall seconds of every round of probes so far
        self.worker_serial = 0  # which worker process answers (each fresh one: the next)
        self.started_at = time.monotonic()
        self.deadline = (self.started_at + config.budget_s if config.budget_s is not None
                         else None)
        self.rounds: DecisionRounds | None = None
        dist = config.distributed
        seed = (config.rounds_seed if config.rounds_seed is not None
                else random.SystemRandom().randrange(2**31))
        # A fresh launch of the ranks is only possible on one node (another node's
        # launcher waits on node 0's group and cannot start again).
        workers = WORKERS if dist is None or dist.nnodes == 1 else 1
        self.rounds_run = (RoundsRun(self, seed, workers=workers,
                                     on_block=self.callbacks.on_block)
                           if config.rounds else None)

    # -- the run ---------------------------------------------------------------------------
    def run(self, hold: InterruptHold | None = None) -> SweepOutcome:
        """Run every phase until the plan stops or the user interrupts; never lose a
        finished batch size.

        Args:
            hold: engaged once every phase has ended, before the worker is stopped: an
                interrupt from then on is held, not raised, and the caller, which writes
                the report, releases it (None: the worker's stop can be interrupted).
        """
        interrupted = False
        try:
            self._worker()
            self.callbacks.on_ready(self.model)
            if self.config.measure_ceilings:
                self.ceilings = self.measure_ceilings()
            self.plan = self.measure_batches()
            self.rounds = self.decide()
            self.amp_off = self.time_without_amp()
            skipped: list[str] = []  # phases --budget left undone
            if self.over_budget():
                skipped.append("the final kernel probes")
            else:
                self.final_probes()
            if self.over_budget():
                skipped.append("the second axis's grid")
            else:
                self.grid = self.time_grid()
            if self.over_budget():
                skipped.append("the allocator's re-timing")
            else:
                self.kept_buffers_set_by = self.retime_keeping_buffers()
            if skipped:
                self.flags.append(Flag.of(BudgetSkipped(phases=skipped)))
            if hold is not None:
                hold.engage()  # everything is measured: nothing left to cut short
        except KeyboardInterrupt:
            interrupted = True
            self.callbacks.on_interrupt()
        finally:
            self._drop_worker(graceful=not interrupted)
        if interrupted:
            stop: Stop | None = Stop.of(InterruptedStop())
        else:
            stop = self.plan.stop if self.plan else None
        if self.rounds is None and self.rounds_run is not None and self.rounds_run.blocks:
            # Interrupted, or ended before its decision: the checks' blocks are kept.
            self.rounds = self.rounds_run.record(
                sorted({b.batch_size for b in self.rounds_run.blocks}), set(),
                RoundsStop.INTERRUPTED if interrupted else RoundsStop.FAILED,
                self.rounds_run.spent_s)
        if self.rounds is not None:
            self.drift = self._drift_of(self.rounds)
        return SweepOutcome(
            model=self.model, ceilings=self.ceilings, results=self.results, stop=stop,
            interrupted=interrupted, flags=list(self.flags), grid=self.grid,
            kept_buffers=self.kept_buffers, kept_buffers_set_by=self.kept_buffers_set_by,
            drift=self.drift, amp_off=self.amp_off, rounds=self.rounds)

    def over_budget(self) -> bool:
        """Whether --budget is spent (a phase left undone then says so in a flag)."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    # -- phase: the ceilings -----------------------------------------------------------------
    def measure_ceilings(self) -> Ceilings | None:
        """Ask the worker for the ceilings; without them the sweep still runs, unclassified
        (a CEILINGS_FAILED flag says why)."""
        deadline = time.monotonic() + CEILINGS_TIMEOUT_S
        try:
            handle = self._worker()
            handle.send(MeasureCeilings(self.config.recalibrate))
            while not isinstance(reply := handle.recv(deadline), CeilingsMeasured):
                pass  # nothing else is sent in answer; skipped rather than misread
        except (WorkerDied, WorkerTimedOut) as exc:
            self.flags.append(Flag.of(CeilingsFailed(error=str(exc) or "timed out")))
            self._drop_worker(graceful=False)
            return None
        self.callbacks.on_ceilings(reply.ceilings)
        return reply.ceilings

    # -- phase: the plan -----------------------------------------------------------------------
    def measure_batches(self) -> Plan:
        """Measure the plan's batch sizes in order, each result reported as it comes; before
        each one, the predicted stop may end the plan. Returns the plan (its ``stop``)."""
        explicit = self.config.batch_sizes or self.model.batch_sizes
        plan = self.plan = Plan(explicit, self.config.limits, self.config.measure_all)
        while ((b := plan.next_batch(self.results)) is not None or self._overrule(plan)
               or self._plateau_unconfirmed(plan)):
            if b is None:
                continue  # the plateau stop was overruled: ask the plan again
            stop = self.predicted_stop(plan)
            if stop is not None:
                plan.stop_early(stop)
                break
            budget = self._budget_stop(plan, b)
            if budget is not None:
                plan.stop_early(budget)
                break
            skip = predicted_not_to_fit(self.results, b, self.config.limits.memory_budget_bytes)
            result = (BatchResult(b, Status.SKIPPED, flags=[skip]) if skip is not None
                      else self._measure(b))
            self.results.append(result)
            self.measured_at[b] = time.monotonic()
            self.callbacks.on_result(result, self.results)
        return plan

    # -- phase: the decision rounds ------------------------------------------------------------
    def decide(self) -> DecisionRounds | None:
        """Once the plan has ended: the candidate sizes timed in interleaved rounds, in the
        sweep's worker and again in a fresh one (profiler/rounds_run.py), until the pick
        stands clear of the noise or their time is spent. Their paired shares make the
        pick (classifiers/recommend.py); their timings against the plan's are the run's
        drift (``run.drift``). None without rounds or with fewer than two sizes measured."""
        if self.rounds_run is None:
            return None
        dist = self.config.distributed
        if dist is not None and dist.nnodes > 1 and self.handle is None:
            return None  # the ranks ended with a failure: node 0 alone cannot launch again
        excluded = {r.batch_size for r in measured(self.results)
                    if over_limits(r, self.config.limits) is not None}
        return self.rounds_run.decide(self.results, excluded, self.deadline)

    def _drift_of(self, rounds: DecisionRounds) -> DriftControl | None:
        """The plan's timings against the rounds' (rounds_run.rounds_drift)."""
        ok = measured(self.results)
        if not ok or not rounds.blocks:
            return None
        first = self.measured_at.get(ok[0].batch_size, self.started_at)
        run = self.rounds_run
        began = run.started_at if run is not None and run.started_at is not None else first
        middle = began + statistics.median(b.started_s for b in rounds.blocks)
        return rounds_drift(self.results, rounds.blocks, middle - first)

    # -- the rounds' host (RoundsHost) ------------------------------------------------------------
    def request_block(self, request: MeasureBatch) -> BatchResult:
        """One block of a round in the running worker (a failure drops the worker)."""
        self.callbacks.on_phase(request.batch_size, "rounds: timed against the others")
        reply, status, why = self._request(request, BatchDone)
        if reply is None:
            return BatchResult(request.batch_size, status, error=why)
        if reply.result.status != Status.OK:  # the worker exits after a failure
            self._drop_worker(graceful=True)
        return reply.result

    def fresh_worker(self) -> bool:
        """A fresh worker for the rounds (a fresh launch of the ranks on one node); False
        where none can be started (the ranks of several nodes)."""
        dist = self.config.distributed
        if dist is not None and dist.nnodes > 1:
            return False
        self._drop_worker(graceful=True)
        try:
            self._worker()
        except NothingMeasuredError:
            return False
        return True

    # -- the checks of a proposed stop ------------------------------------------------------------
    def _plateau_unconfirmed(self, plan: Plan) -> bool:
        """Whether paired rounds take back the plan's plateau stop: the recent sizes timed
        against the best before them until the top of their gain's interval stays under
        the bar (the stop stands), or its bottom passes it, or the check's rounds run out
        with the bar inside the interval (both: the plan goes on, and a flag says why).
        No stop is taken on noise."""
        stop = plan.stop
        if stop is None or stop.kind != StopKind.PLATEAU or self.rounds_run is None \
                or not plan.remaining(self.results):
            return False
        ok = measured(self.results)
        recent = [r.batch_size for r in ok[-PLATEAU_PATIENCE:]]
        before = ok[:-PLATEAU_PATIENCE]
        if not before:
            return False
        best = max(before, key=lambda r: r.throughput_per_s or 0.0).batch_size
        sizes = [best, *recent]
        steps = {r.batch_size: r.latency_s.median for r in ok if r.latency_s is not None}

        def settled(blocks: list[RoundBlock]) -> bool:
            found = plateau_verdict(blocks, [best], recent, PLATEAU_GAIN)
            return found is not None and found.verdict != Verdict.UNDECIDED

        self.rounds_run.check(sizes, steps, settled, CHECK_MIN_ROUNDS, CHECK_MAX_ROUNDS,
                              self.deadline)
        evidence = plateau_verdict(self.rounds_run.blocks, [best], recent, PLATEAU_GAIN)
        if evidence is None or evidence.verdict == Verdict.CONFIRMED:
            return False
        self.flags.append(Flag.of(PlateauUnconfirmed(
            verdict=evidence.verdict.value, best_before=evidence.best_before,
            recent=list(evidence.recent), gain=evidence.gain,
            low=evidence.interval.low, high=evidence.interval.high,
            rounds=evidence.rounds, bar=1 + PLATEAU_GAIN), recent[-1]))
        plan.overrule(self.results)
        return True

    def _confirmed(self, stop: Stop, results: list[BatchResult], remaining: list[int],
                   policy: EarlyStopPolicy, ceilings: Ceilings,
                   probes_s: dict[str, float]) -> Stop | None:
        """The predicted stop asked again on paired figures: the sizes it rests on timed
        in rounds, the model's decision re-read with their paired throughputs; the stop
        where it still holds, None (and a flag) where it does not."""
        if self.rounds_run is None:
            return stop
        sizes = sorted(set(policy.deciding_sizes(results, ceilings)))
        if len(sizes) < 2:
            return stop
        steps = {r.batch_size: r.latency_s.median for r in measured(results)
                 if r.latency_s is not None}
        self.rounds_run.check(sizes, steps, lambda _: True, CHECK_MIN_ROUNDS, CHECK_MIN_ROUNDS,
                              self.deadline)
        blocks = [b for b in self.rounds_run.blocks if b.batch_size in sizes]
        units = self.model.units_per_row
        again = policy.decide(paired_view(results, blocks, units), remaining, ceilings,
                              probes_s)
        if again is None:
            self.flags.append(Flag.of(PredictedStopUnconfirmed(
                batch_sizes=list(sizes),
                rounds=self.rounds_run.rounds_in(self.worker_serial, sizes)),
                results[-1].batch_size))
        return again

    def _budget_stop(self, plan: Plan, batch_size: int) -> Stop | None:
        """The stop --budget makes before ``batch_size``: where its measurement, reckoned
        from the last size's wall time grown with the batch, and the rounds' least time
        (their least rounds of the candidates so far, and a worker's start; never under
        ``ROUNDS_MIN_S``) would end past the budget. None within it (or without one)."""
        budget_s = self.config.budget_s
        if self.deadline is None or budget_s is None or not self.results:
            return None  # the first size is measured whatever the budget: nothing else says
        last = self.results[-1]
        estimate = ((last.wall_s or 0.0) * batch_size / last.batch_size
                    if last.batch_size > 0 else 0.0)
        least = max(least_rounds_s(self.results, decision_candidates(self.results)),
                    ROUNDS_MIN_S)
        if estimate + least <= self.deadline - time.monotonic():
            return None
        return Stop.of(BudgetStop(
            budget_s=budget_s, spent_s=time.monotonic() - self.started_at,
            estimated_s=estimate,
            unmeasured=[b for b in plan.candidates if b >= batch_size]), batch_size)

    def time_without_amp(self) -> ControlTiming | None:
        """Under ``--amp``: the fastest batch size timed again, timing only, in a fresh
        worker with autocast off, the direct evidence of whether the lower precision pays
        on this machine (issue 32: ``--amp bf16`` ran the MLP sample 42% slower than fp32
        and nothing said so). None without --amp, on ranks, with nothing measured, or when
        the timing failed."""
        if not self.config.worker.amp or self.config.distributed is not None:
            return None
        ok = [r for r in self.results if r.status == Status.OK and r.latency_s is not None
              and r.throughput_per_s]
        if not ok:
            return None
        best = max(ok, key=lambda r: r.throughput_per_s or 0.0)
        self._drop_worker(graceful=True)
        self.worker_config = dataclasses.replace(self.config.worker, amp=None,
                                                 op_breakdown=False)
        try:
            self.callbacks.on_phase(best.batch_size, "without autocast, to compare")
            again = self._timed_only(best.batch_size)
        except ModelFileError:  # a fresh worker refused: what was measured stands
            return None
        finally:
            self._drop_worker(graceful=True)
            self.worker_config = self.config.worker
        if again.status != Status.OK or again.latency_s is None or best.latency_s is None:
            return None
        return control_timing(best.batch_size, best.latency_s, again.latency_s)

    def _overrule(self, plan: Plan) -> bool:
        """Whether the early-stop policy overrules the plan's plateau stop (the step-time
        model predicts a gain the measured curve, bent by a busy machine, does not show);
        the plan then goes on, and a PLATEAU_OVERRULED flag says why."""
        policy, ceilings, stop = self.config.early_stop, self.ceilings, plan.stop
        if policy is None or ceilings is None or stop is None or stop.kind != StopKind.PLATEAU:
            return False
        remaining = plan.remaining(self.results)
        bar = PlateauStop.of(stop).bar_per_s
        if not remaining or bar is None:
            return False
        probes_s = self.probe(policy.probes(self.results, remaining, ceilings))
        flag = policy.overrules_plateau(self.results, remaining, ceilings, bar, probes_s)
        # The predicted stop, asked next, must not end at once what the flag says went on.
        if flag is None or policy.decide(self.results, remaining, ceilings,
                                         probes_s) is not None:
            return False
        self.flags.append(flag)
        plan.overrule(self.results)
        return True

    def predicted_stop(self, plan: Plan) -> Stop | None:
        """The early-stop policy's decision before the next batch size: only where the plan
        allows it, the last result is OK, the ceilings are known and sizes remain; the
        policy's kernel probes are run for it first."""
        policy, ceilings, results = self.config.early_stop, self.ceilings, self.results
        if (policy is None or ceilings is None or not plan.may_stop_early or not results
                or results[-1].status != Status.OK):
            return None
        remaining = plan.remaining(results)
        if not remaining:
            return None
        probes_s = self.probe(policy.probes(results, remaining, ceilings))
        stop = policy.decide(results, remaining, ceilings, probes_s)
        if stop is None:
            return None
        return self._confirmed(stop, results, remaining, policy, ceilings, probes_s)

    # -- phase: the final probes -----------------------------------------------------------------
    def final_probes(self) -> dict[str, float]:
        """The kernel probes the finished sweep's predictions want; their times (all known
        times of the specs asked for)."""
        if self.config.final_probes is None or self.ceilings is None:
            return {}
        return self.probe(self.config.final_probes(self.results, self.ceilings))

    # -- phase: the second axis's grid -------------------------------------------------------------
    def time_grid(self) -> list[GridPoint]:
        """Time the measured batch sizes at every length of the second axis (timing and
        peak memory only): CONTEXTS for the serving what-if (inference), SEQ_LENS for the
        batch × sequence grid (inference or training). At each length the sizes go up, and
        a failure ends that length's row: a larger batch at the same length would fail too.
        Points are kept as they are timed (in ``self.grid``): an interrupt keeps them."""
        contexts = self.model.contexts
        axis = "context" if contexts else "seq_len"
        lengths = contexts or self.model.seq_lens
        if len(lengths) < 2 or self.config.distributed is not None or (
                axis == "context" and self.model.mode != Mode.INFERENCE):
            return self.grid
        for length in lengths:
            if axis == "seq_len" and length == lengths[0]:
                continue  # the sweep's own length: its measurements are the grid's row
            for b in grid_batch_sizes(self.results, lengths[0], length,
                                      self.config.limits.memory_budget_bytes, axis,
                                      self.model.parameter_bytes):
                self.callbacks.on_phase(b, f"{axis.replace('_', ' ')} {length}")
                point = self._grid_point(b, length, axis)
                self.grid.append(point)
                if point.status != Status.OK:
                    break
        return self.grid

    def _grid_point(self, batch_size: int, length: int, axis: str) -> GridPoint:
        reply, status, why = self._request(TimeGridPoint(batch_size, length), GridTimed)
        if reply is None:
            return (GridPoint(batch_size, length, status, error=why) if axis == "context"
                    else GridPoint(batch_size, None, status, error=why, seq_len=length))
        if reply.point.status != Status.OK:  # the worker exits after a failure
            self._drop_worker(graceful=True)
        return reply.point

    # -- phase: the allocator keeping its buffers ----------------------------------------------
    def retime_keeping_buffers(self) -> AllocatorSetBy | None:
        """Time the batch sizes whose page faults took a share of the step again, timing
        only, with the allocator keeping its buffers: the same model side by side with the
        allocator a long-running process would run with. The sweep's own worker takes the
        setting through ``mallopt`` (profiler/glibc_malloc.py); where it cannot, a fresh
        worker starts with KEPT_BUFFERS_ENV. The results go to ``self.kept_buffers`` as
        they come, and how the allocator was told to ``self.kept_buffers_set_by`` before
        them (an interrupt keeps both); returns that (None: nothing was re-timed)."""
        if self.config.retime_sizes is None or self.config.distributed is not None \
                or not self.model.device.startswith("cpu"):
            return None
        sizes = self.config.retime_sizes(self.results)
        if not sizes:
            return None
        reply, _, _ = self._request(KeepBuffers(), BuffersKept)
        in_place = reply is not None and reply.taken
        kept_by = self.handle  # the worker that took the setting
        if not in_place:
            self._drop_worker(graceful=True)
            self.worker_config = dataclasses.replace(
                self.config.worker, op_breakdown=False,
                env={**(self.config.worker.env or {}), **KEPT_BUFFERS_ENV})
        self.kept_buffers_set_by = (AllocatorSetBy.MALLOPT if in_place
                                    else AllocatorSetBy.ENVIRONMENT)
        try:
            for b in sizes:
                if in_place and (kept_by is None or self.handle is not kept_by
                                 or not kept_by.alive()):
                    break  # a replacement worker would time the default allocator
                self.callbacks.on_phase(b, "allocator keeping its buffers")
                # A failure drops the worker, and the setting with it: the check ends there.
                result = self._timed_only(b, ALLOCATOR_BLOCK_S)
                self.kept_buffers.append(result)
                if result.status != Status.OK:
                    break
        finally:
            if not in_place:
                self._drop_worker(graceful=True)
                self.worker_config = self.config.worker
        return self.kept_buffers_set_by

    def _timed_only(self, batch_size: int, block_s: float | None = None) -> BatchResult:
        """One batch size timed by the current worker (no op breakdown), reported to
        nobody: a failure is this result's status, never the run's. ``block_s``: a short
        fixed timing (a round's block, at least BLOCK_SAMPLES samples) instead of the
        sweep's adaptive pass."""
        request = (MeasureBatch(batch_size, first_step=False, op_breakdown=False)
                   if block_s is None else
                   MeasureBatch(batch_size, first_step=False, op_breakdown=False,
                                block_s=block_s, warmup_steps=1, block_samples=BLOCK_SAMPLES))
        reply, status, why = self._request(request, BatchDone)
        if reply is None:
            return BatchResult(batch_size, status, error=why)
        if reply.result.status != Status.OK:  # the worker exits after a failure
            self._drop_worker(graceful=True)
        return reply.result

    # -- kernel probes ---------------------------------------------------------------------------
    def probe(self, specs: list[ProbeSpec]) -> dict[str, float]:
        """Time the kernel probes not timed yet in the worker; all times known for
        ``specs``. A probe round that fails or times out costs the worker, nothing else."""
        known = self.config.probes_s
        wanted = [s for s in specs if s.key not in known and s.key not in self.tried]
        if self.config.distributed is not None and self.handle is None:
            wanted = []  # the ranks stopped: no relaunch of every rank for probes
        self.tried.update(s.key for s in wanted)  # a probe that failed is not retried
        if wanted:
            started: float | None = None
            try:
                handle = self._worker()
                started = time.monotonic()
                handle.send(RunProbes(by_batch(wanted), self._cold_cache(), self.bounded_probe_s,
                                      self.probe_round_s()))
                reply = handle.recv(started + PROBE_TIMEOUT_S)
                if isinstance(reply, ProbesTimed):
                    known.update(reply.times_s)
                    # Past the cost-bounded probes' budget or the round's time: a later
                    # round, with a larger budget (the sweep went on), may time them.
                    self.tried.difference_update(reply.skipped)
                    self.bounded_probe_s += reply.bounded_s
            except (WorkerDied, WorkerTimedOut, NothingMeasuredError):
                self._drop_worker(graceful=False)
            finally:
                if started is not None:
                    self.probe_rounds_s += time.monotonic() - started
        return {s.key: known[s.key] for s in specs if s.key in known}

    def probe_round_s(self) -> float:
        """The wall time the next round of probes may take: what is left of
        :data:`PROBE_ROUND_SHARE` of the sweep's measuring time, within
        [:data:`PROBE_ROUND_MIN_S`, :data:`PROBE_ROUND_MAX_S`]."""
        measured_s = sum(r.wall_s or 0.0 for r in self.results)
        left_s = PROBE_ROUND_SHARE * measured_s - self.probe_rounds_s
        return min(max(left_s, PROBE_ROUND_MIN_S), PROBE_ROUND_MAX_S)

    def _cold_cache(self) -> int | None:
        """The cache size to keep probes out of, when the model's weights outgrow it (else
        None: probed hot, as such a model runs)."""
        cache = self.ceilings.cache_bytes if self.ceilings else None
        params = self.model.parameter_bytes
        if cache and params is not None and params > cache:
            return cache
        return None

    # -- one batch size ----------------------------------------------------------------------------
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
            handle.send(MeasureBatch(batch_size, first_step=not self.results))
            while True:
                reply = handle.recv(deadline)
                if isinstance(reply, Phase):
                    self.callbacks.on_phase(batch_size, reply.phase)
                elif isinstance(reply, Timed):
                    timed = reply.result
                elif isinstance(reply, BatchDone):
                    return self._done(handle, reply.result)
                elif isinstance(reply, ContractError):
                    raise _contract_error(reply)
        except KeyboardInterrupt:
            if timed is not None:
                self.results.append(dataclasses.replace(timed, flags=[
                    *timed.flags, Flag.of(BreakdownInterrupted(), batch_size)]))
            else:
                self.results.append(BatchResult(batch_size, Status.INTERRUPTED,
                                                error="interrupted by the user"))
            raise
        except WorkerDied as exc:
            status, why = _death_of(exc)
            return self._failed(batch_size, timed, status, why)
        except WorkerTimedOut:
            who = "the ranks were" if self.config.distributed else "worker"
            why = f"no result within {self.config.batch_timeout_s:.0f} s; {who} stopped"
            return self._failed(batch_size, timed, Status.TIMEOUT, why)

    def _done(self, handle: WorkerHandle, result: BatchResult) -> BatchResult:
        """A batch size's result as the worker sent it (a new record where the launcher adds
        to a failed rank's); a failed one costs the worker."""
        if result.status == Status.RANK_FAILED and isinstance(handle, LaunchedRanks):
            # Rank 0 saw a peer vanish; the launcher knows which rank died.
            died = handle.launcher_cause()
            result = dataclasses.replace(
                result,
                error=f"{died} (rank 0 had seen: {result.error})" if died else result.error,
                flags=[*result.flags, Flag.of(RanksOutput(path=handle.log_path),
                                              result.batch_size)])
        if result.status != Status.OK:  # the worker exits after any failure
            # (a failed rank cannot take the stop its peers would wait on)
            handle.stop(graceful=result.status != Status.RANK_FAILED)
            self.handle = None
        return result

    def _failed(self, batch_size: int, timed: BatchResult | None, status: Status,
                why: str) -> BatchResult:
        self._drop_worker(graceful=False)
        if timed is not None and status == Status.TIMEOUT:
            return dataclasses.replace(timed, flags=[*timed.flags, Flag.of(
                BreakdownLost(reason=why), batch_size)])
        flags = [Flag.of(TimedBeforeDeath(), batch_size)] if timed is not None else []
        return BatchResult(batch_size, status, error=why, flags=flags)

    # -- the worker ----------------------------------------------------------------------------
    def _request(self, request: Request, reply_type: type[R]) -> tuple[R | None, Status, str]:
        """Send ``request`` to the worker (started if need be) and wait, within the batch
        timeout, for its reply of ``reply_type``: (the reply, OK, ""), or (None, the
        status, why) when the worker could not start, died or ran out of time."""
        deadline = time.monotonic() + self.config.batch_timeout_s
        try:
            handle = self._worker()
            handle.send(request)
            while True:
                reply = handle.recv(deadline)
                if isinstance(reply, reply_type):
                    return reply, Status.OK, ""
        except NothingMeasuredError as exc:  # a replacement worker failed to start
            return None, Status.KILLED, str(exc)
        except WorkerDied as died:
            self._drop_worker(graceful=False)
            status, why = _death_of(died)
            return None, status, why
        except WorkerTimedOut:
            self._drop_worker(graceful=False)
            return None, Status.TIMEOUT, f"no result within {self.config.batch_timeout_s:.0f} s"

    def _worker(self) -> WorkerHandle:
        """The running worker, or a fresh one (its Ready message read)."""
        if self.handle is None or not self.handle.alive():
            if self.handle is not None:
                self.handle.stop(graceful=False)
            self.handle = self._start_worker()
        return self.handle

    def _drop_worker(self, graceful: bool) -> None:
        if self.handle is not None:
            self.handle.stop(graceful=graceful)
            self.handle = None

    def _new_handle(self) -> WorkerHandle:
        if self.config.distributed is not None:
            return LaunchedRanks(self.config.worker, self.config.distributed,
                                 self.config.batch_timeout_s)
        return ProcessHandle(self.worker_config)

    def _start_worker(self) -> WorkerHandle:
        """A new worker with its model loaded (``self.model`` is what it reported).

        Raises:
            ModelFileError: the model file breaks the contract.
            NothingMeasuredError: the worker (or the ranks) could not load the model.
        """
        handle = self._new_handle()
        self.worker_serial += 1
        what = "the ranks" if self.config.distributed else "the worker"
        try:
            reply = handle.recv(time.monotonic() + self._start_timeout_s())
        except KeyboardInterrupt:
            # Not yet self.handle, so nothing else would stop it (the control's fresh
            # worker, loading a large model, was left running past the end of the run).
            handle.stop(graceful=False)
            raise
        except WorkerDied as exc:
            why = _death_of(exc)[1]
            handle.stop(graceful=False)
            if isinstance(handle, LaunchedRanks) and rendezvous_failed(handle.output()):
                raise NothingMeasuredError(self._start_timeout_message()) from None
            raise NothingMeasuredError(f"{what} died while loading the model: {why}.") from None
        except WorkerTimedOut:
            handle.stop(graceful=False)
            raise NothingMeasuredError(self._start_timeout_message()) from None
        if isinstance(reply, ContractError):
            handle.stop(graceful=False)
            raise _contract_error(reply)
        if isinstance(reply, LoadOom):
            handle.stop(graceful=False)
            raise NothingMeasuredError(load_oom_message(reply))
        if not isinstance(reply, Ready):
            handle.stop(graceful=False)
            raise NothingMeasuredError(f"{what} sent {type(reply).__name__} before it was "
                                       "ready.")
        self.model = reply.model
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
