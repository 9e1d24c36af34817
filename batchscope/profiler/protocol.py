"""The messages between the sweep and its worker (or a distributed sweep's rank 0), as types.

The parent (:mod:`batchscope.profiler.supervisor`) sends a :data:`Request`; the worker
(:mod:`batchscope.profiler.worker`, or :mod:`batchscope.profiler.ranks` on rank 0, which
broadcasts it to the other ranks) answers with :data:`Reply` objects. They travel as the
objects themselves: :mod:`multiprocessing`'s pipe, the launcher's authenticated connection
and ``torch.distributed``'s object broadcast all pickle them. Nothing here imports torch, so
the parent can unpickle every reply without it.

Requests (parent -> worker) and what each is answered with:

- :class:`MeasureCeilings` -> :class:`CeilingsMeasured`
- :class:`MeasureBatch` -> :class:`Phase` (each pass), :class:`Timed` (the timing pass, before
  the breakdown), then :class:`BatchDone`; or :class:`ContractError` at the run's first step
- :class:`TimeGridPoint` -> :class:`GridTimed`
- :class:`RunProbes` -> :class:`ProbesTimed`
- :class:`KeepBuffers` -> :class:`BuffersKept`
- :class:`StopWorker` -> nothing: the worker exits

A new worker first sends :class:`Ready`, or :class:`ContractError` or :class:`LoadOom` and
exits. After a failed batch size or grid point it exits too: a fresh worker takes the next.

Example:
    >>> handle.send(MeasureBatch(8, first_step=False))  # doctest: +SKIP
    >>> reply = handle.recv(deadline)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, GridPoint, ModelInfo
from batchscope.records.probe import ProbeSpec


# -- parent -> worker ----------------------------------------------------------------------
@dataclass(frozen=True)
class MeasureCeilings:
    """Measure this machine's ceilings (or read them from the cache)."""

    recalibrate: bool = False


@dataclass(frozen=True)
class MeasureBatch:
    """Measure one batch size.

    Attributes:
        batch_size: the batch size (per rank, in a distributed sweep).
        first_step: the run's first batch size (the parent knows; a replacement worker does
            not): only there does a failure the contract explains end the run (exit 4).
        op_breakdown: False to time it only; None: as the worker's config says.
        block_s: a block of the decision rounds (rounds.py): timing only, for this many
            seconds of timed steps (at least one), after ``warmup_steps`` untimed ones
            (at least one where the inputs were built for it or the worker never ran the
            size); the inputs are kept for the next block where they fit. None: the
            sweep's own timing pass.
        warmup_steps: a block's warm-up steps (see ``block_s``).
        block_samples: the fewest timed samples in a block (a fast step is timed in
            sub-blocks of about a millisecond, each one sample), whatever ``block_s`` says.
    """

    batch_size: int
    first_step: bool = False
    op_breakdown: bool | None = None
    block_s: float | None = None
    warmup_steps: int = 1
    block_samples: int = 1


@dataclass(frozen=True)
class TimeGridPoint:
    """Time one (batch size, length) of the second axis (CONTEXTS or SEQ_LENS)."""

    batch_size: int
    length: int


@dataclass(frozen=True)
class RunProbes:
    """Time kernel probes (:class:`~batchscope.records.probe.ProbeSpec`, as the classifiers
    build them); ``bounded_spent_s`` is what the cost-bounded ones took before, ``round_s``
    the wall time this round may take (None: no limit)."""

    specs: list[ProbeSpec]
    cache_bytes: int | None = None
    bounded_spent_s: float = 0.0
    round_s: float | None = None


@dataclass(frozen=True)
class KeepBuffers:
    """Tell glibc's malloc to keep the buffers it frees (profiler/glibc_malloc.py)."""


@dataclass(frozen=True)
class StopWorker:
    """Exit: the sweep is done with this worker."""


Request = MeasureCeilings | MeasureBatch | TimeGridPoint | RunProbes | KeepBuffers | StopWorker


# -- worker -> parent ----------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    """The model is loaded: what it is, as the worker sees it."""

    model: ModelInfo


@dataclass(frozen=True)
class ContractError:
    """The model file breaks the contract (exit 4); ``detail``: the user's own frames."""

    message: str
    detail: str = ""


@dataclass(frozen=True)
class LoadOom:
    """The model does not even load onto its device."""

    message: str
    device: str
    parameter_bytes: int | None = None
    available_memory_bytes: int | None = None


@dataclass(frozen=True)
class CeilingsMeasured:
    ceilings: Ceilings


@dataclass(frozen=True)
class Phase:
    """The worker started a pass of a batch size ("timing", "profiling")."""

    batch_size: int
    phase: str


@dataclass(frozen=True)
class Timed:
    """The timing pass's result, sent before the op breakdown: it survives a crash there."""

    result: BatchResult


@dataclass(frozen=True)
class BatchDone:
    """The batch size's whole result (its status says how it ended)."""

    result: BatchResult


@dataclass(frozen=True)
class GridTimed:
    point: GridPoint


@dataclass(frozen=True)
class ProbesTimed:
    """Kernel probe times by key; the ones that failed, with why; the ones skipped (a
    cost-bounded one past its budget, any past the round's time); and the seconds the
    cost-bounded ones took this round."""

    times_s: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    bounded_s: float = 0.0


@dataclass(frozen=True)
class BuffersKept:
    """Whether glibc took the setting (else a fresh worker gets it from its environment)."""

    taken: bool


Reply = (Ready | ContractError | LoadOom | CeilingsMeasured | Phase | Timed | BatchDone
         | GridTimed | ProbesTimed | BuffersKept)


# -- the handle ------------------------------------------------------------------------------
class WorkerDied(Exception):
    """The worker (or a rank) ended before its reply; ``why`` in words."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class WorkerTimedOut(Exception):
    """No reply before the deadline."""


class WorkerHandle(Protocol):
    """One worker process, or torch's launcher and its ranks, as the sweep drives them
    (supervisor's local handle; :class:`~batchscope.profiler.launcher.LaunchedRanks`)."""

    def send(self, request: Request) -> None:
        """Send ``request``.

        Raises:
            WorkerDied: the worker is gone.
        """

    def recv(self, deadline: float) -> Reply:
        """The next reply, by ``deadline`` (``time.monotonic()``).

        Raises:
            WorkerDied: the worker ended first.
            WorkerTimedOut: the deadline passed.
        """

    def alive(self) -> bool:
        """Whether the worker still runs."""

    def stop(self, graceful: bool = True) -> None:
        """End the worker: asked to (``graceful``), then by signals."""
