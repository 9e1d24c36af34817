"""One rank of a data-parallel sweep, started by torch's own launcher.

The parent (:mod:`batchscope.profiler.launcher`) runs ``python -m torch.distributed.run
[its arguments] -m batchscope.profiler.ranks``: every rank runs this module. Each builds the
model from the file (as the single-process worker does), wraps it in
``DistributedDataParallel`` unless ``build_model`` already did, and measures the training
step at each per-rank batch size in lockstep with the others.

Rank 0 alone talks to the parent, over a local authenticated socket
(:mod:`multiprocessing.connection`), with the single-process worker's messages
(:mod:`batchscope.profiler.protocol`): it answers ``MeasureCeilings`` with
``CeilingsMeasured`` and ``RunProbes`` with ``ProbesTimed`` alone, and broadcasts each
request to the other ranks: ``MeasureBatch`` is measured by every rank (``Phase`` replies
from rank 0 as it goes) and answered with ``BatchDone``, rank 0's result holding every
rank's figures; ``StopWorker`` ends them all. At the start it sends ``Ready`` (the model's
``ModelInfo``, its ``distributed`` section naming every rank) or the first rank's
``ContractError``. A distributed sweep sends no ``TimeGridPoint`` or ``KeepBuffers``.

Every rank must therefore run the same steps in the same order, and nothing that decides
how many steps run may depend on one rank's clock: the timed steps are a count agreed from
the slowest rank's warm-up, the capture a fixed number of steps, and counting runs at every
size.

The gradient all-reduce is measured in the timed steps themselves, by a DDP communication
hook (:class:`CommunicationRecorder`) that runs DDP's default all-reduce and stamps, per
step, when each bucket's hook was called (its gradients ready) and when its all-reduce
completed: the exposed time is the last completion past the last bucket's call (the end of
backward's gradient compute), the part of the all-reduce backward did not hide.

Two process groups: the default one (``ENV_COLLECTIVE_TIMEOUT`` seconds, a third of the
per-batch timeout) carries DDP's all-reduces and the results, so a rank that dies or hangs
surfaces as an error on the others while the parent still waits; a second one with no
practical timeout carries the commands, so ranks may sit idle while rank 0 measures the
ceilings or runs kernel probes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import signal
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import timedelta
from multiprocessing.connection import Client, Connection
from typing import Any, NoReturn

import msgspec
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from batchscope.engine.policies import FixedCount, StoppedBy
from batchscope.engine.timer import Warmup, sample, warm_up
from batchscope.errors import ModelFileError
from batchscope.profiler import counting
from batchscope.profiler.capture import (
    CAPTURE_STEPS,
    ProfilerUnavailable,
    capture_steps,
)
from batchscope.profiler.device import DeviceBackend
from batchscope.profiler.join import fill_breakdown
from batchscope.profiler.measurement import record_timing
from batchscope.profiler.memory import available_bytes
from batchscope.profiler.outcome import classify_exception
from batchscope.profiler.protocol import (
    BatchDone,
    CeilingsMeasured,
    ContractError,
    MeasureBatch,
    MeasureCeilings,
    Phase,
    Ready,
    Reply,
    Request,
    RunProbes,
    StopWorker,
)
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.training import default_loss
from batchscope.profiler.worker import Send, Step, Worker
from batchscope.profiler.worker_config import (
    WORKER_CONFIG_ENV,
    WorkerConfig,
    worker_config_from_json,
)
from batchscope.records import BatchResult, Flag, ModelInfo, RankResult, Status
from batchscope.records.codec import decode
from batchscope.records.flag_payloads import NoBreakdown
from batchscope.records.report import (
    BusBandwidth,
    BusBandwidthSize,
    DistributedInfo,
    RankHost,
    WrappedBy,
)
from batchscope.tracebacks import describe_exception, user_frames

ENV_ADDRESS = "BATCHSCOPE_SUPERVISOR"  # host:port of the parent's listener
ENV_AUTHKEY = "BATCHSCOPE_AUTHKEY"  # hex
ENV_CONFIG = WORKER_CONFIG_ENV  # WorkerConfig as JSON
ENV_COLLECTIVE_TIMEOUT = "BATCHSCOPE_COLLECTIVE_TIMEOUT_S"
# Timed steps per batch size: enough for about this long at the slowest rank's warm-up pace,
# within these bounds (a fixed count: every rank must run the same steps).
TIMED_S = 0.5
MIN_TIMED_STEPS = 5
MAX_TIMED_STEPS = 50
WARMUP_STEPS = 2
# All-reduce repeats per size of the bandwidth probe (the best one counts).
BANDWIDTH_REPEATS = 5
# Before the agreed count of timed steps (a FixedCount beside it, which replaces its stop
# rule): exactly one more warm-up step, whatever the clock, and every step timed alone.
ONE_WARMUP_STEP = TimingConfig(warmup_min_steps=1, warmup_min_s=0.0, block_min_s=0.0)
# The command group waits this long for rank 0's next command (ceilings, probes, a slow
# batch size on rank 0 alone); the parent's own timeouts end a run that truly hangs.
COMMAND_TIMEOUT = timedelta(days=1)


def timed_steps_for(step_s: float) -> int:
    """Timed steps for a step of ``step_s`` seconds (the slowest rank's warm-up step).

    Example:
        >>> timed_steps_for(0.001), timed_steps_for(0.05), timed_steps_for(2.0)
        (50, 10, 5)
    """
    if step_s <= 0:
        return MAX_TIMED_STEPS
    return max(MIN_TIMED_STEPS, min(MAX_TIMED_STEPS, math.ceil(TIMED_S / step_s)))


def step_communication(called: Sequence[float], completed: Sequence[float | None]
                       ) -> tuple[float, float] | None:
    """(exposed, in flight) of one step's all-reduce from its buckets' stamps: ``called``,
    when DDP called the hook for each bucket (its gradients were ready), ``completed``,
    when that bucket's all-reduce finished. Exposed: the last completion past the last
    call (the end of backward's gradient compute), 0 when every all-reduce finished
    before it; in flight: the time any bucket's all-reduce ran (the union of the
    intervals, so buckets queued behind each other count once). None: no bucket, or one
    never completed.

    Example:
        >>> step_communication([0.0, 1.0, 2.0], [1.5, 2.5, 3.0])
        (1.0, 3.0)
        >>> step_communication([0.0, 2.0], [0.5, 2.0])
        (0.0, 0.5)
    """
    if not called or len(called) != len(completed) or any(c is None for c in completed):
        return None
    spans = sorted((c, d) for c, d in zip(called, completed) if d is not None)
    exposed = max(max(d for _, d in spans) - max(called), 0.0)
    in_flight, end = 0.0, -math.inf
    for start, stop in spans:
        if stop > end:
            in_flight += stop - max(start, end)
            end = stop
    return exposed, in_flight


class CommunicationRecorder:
    """A DDP communication hook that runs DDP's default all-reduce and stamps each
    bucket's call and completion (the host clock; on CUDA the completion callback waits
    for the all-reduce's stream first), and a wrapper that turns each step's stamps into
    one sample: (exposed, in flight, step), see :func:`step_communication`.

    Registered once, right after DDP is built; a model file's DDP that registered a hook
    of its own keeps it, and the sweep then has no communication figures."""

    def __init__(self, ddp: DistributedDataParallel, sync: Callable[[], None],
                 cuda: bool) -> None:
        self.sync, self.cuda = sync, cuda
        self.called: list[float] = []
        self.completed: list[float | None] = []
        self.samples: list[tuple[float, float, float]] = []
        # DDP checks a hook's annotations against its own classes, which postponed
        # annotations (strings here) never equal: a lambda has none.
        ddp.register_comm_hook(None, lambda state, bucket: self._hook(state, bucket))

    def _hook(self, state: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        called = time.perf_counter()
        fut = allreduce_hook(state, bucket)
        # This step's lists, even if a later step rebinds them before the callback runs.
        calls, completions = self.called, self.completed
        index = len(calls)
        calls.append(called)
        completions.append(None)
        cuda = self.cuda

        def stamp(done: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            if cuda:  # the callback runs on the all-reduce's stream: wait for it
                torch.cuda.current_stream().synchronize()
            completions[index] = time.perf_counter()
            return done.value()

        return fut.then(stamp)

    def recorded(self, step: Step) -> Step:
        """``step`` with one sample appended to :attr:`samples` per call (none for a step
        that all-reduced nothing, as under ``no_sync()``)."""

        def run() -> Any:
            self.called, self.completed = [], []
            started = time.perf_counter()
            out = step()
            self.sync()
            ended = time.perf_counter()
            figures = step_communication(self.called, self.completed)
            if figures is not None:
                self.samples.append((*figures, ended - started))
            return out

        return run


def allreduce_bytes(model: torch.nn.Module) -> int:
    """Gradient bytes DDP all-reduces per step: every parameter that requires a gradient."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def allreduce_bus_bandwidth(device: DeviceBackend, world_size: int,
                            sizes_bytes: tuple[int, ...] = (1 << 20, 16 << 20)) -> BusBandwidth:
    """All-reduce bus bandwidth as nccl-tests define it: algbw = bytes / time, busbw = algbw
    x 2(n-1)/n (the share of the data every link carries in a ring). Run on every rank at
    once; the best of :data:`BANDWIDTH_REPEATS` repeats at each size (each after a barrier,
    the device drained, on its host clock), the largest size's figure kept."""
    results = []

    def barrier() -> None:
        dist.barrier()
        device.sync()

    for size in sizes_bytes:
        tensor = torch.ones(size // 4, dtype=torch.float32, device=device.device)
        dist.all_reduce(tensor)  # warm-up: sets up the connections
        sampled, _ = sample(functools.partial(dist.all_reduce, tensor), device.host_clock,
                            FixedCount(BANDWIDTH_REPEATS), prepare=barrier)
        # The slowest rank's time is the collective's.
        slowest = torch.tensor([min(sampled.samples_s)], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        algbw = size / slowest.item()
        results.append(BusBandwidthSize(bytes=size, time_s=slowest.item(),
                                        algbw_bytes_per_s=algbw,
                                        busbw_bytes_per_s=algbw * 2 * (world_size - 1)
                                        / world_size))
    return BusBandwidth(busbw_bytes_per_s=results[-1].busbw_bytes_per_s, sizes=results)


def _bus_bandwidth(device: DeviceBackend, hosts: list[str], rank: int, recalibrate: bool,
                   group: Any) -> BusBandwidth:
    """The group's all-reduce bandwidth: node 0's cache, or measured by every rank (and
    cached by rank 0) the first time, or with ``recalibrate``."""
    from batchscope.hardware.interconnect import (
        bus_bandwidth_key,
        load_bus_bandwidth,
        save_bus_bandwidth,
    )

    key = bus_bandwidth_key(dist.get_backend(), device.device.type, hosts, torch.__version__)
    box = [load_bus_bandwidth(key) if rank == 0 and not recalibrate else None]
    dist.broadcast_object_list(box, src=0, group=group)
    if box[0] is not None:
        try:  # every rank decodes the same figures, so all of them measure or none
            return dataclasses.replace(decode(box[0], BusBandwidth), source="cache")
        except msgspec.ValidationError:
            pass  # a cache file of another shape: measured again
    measured = allreduce_bus_bandwidth(device, len(hosts))
    if rank == 0:
        save_bus_bandwidth(key, {"busbw_bytes_per_s": measured.busbw_bytes_per_s,
                                 "sizes": [dataclasses.asdict(s) for s in measured.sizes]})
    return measured


class RankWorker(Worker):
    """The single-process worker's model and inputs, wrapped for data parallelism."""

    def __init__(self, config: WorkerConfig, send: Send, rank: int, world_size: int) -> None:
        super().__init__(config, send)
        self.rank, self.world_size = rank, world_size
        if self.optimizer is None:
            raise ModelFileError(
                f"{self.spec.path}: a distributed sweep measures the training step "
                "(--mode train, or MODE = \"train\" in the file); inference has no "
                "gradient all-reduce to measure.")
        self.wrapped_by_file = isinstance(self.model, DistributedDataParallel)
        self.unused_parameters = 0
        if isinstance(self.model, DistributedDataParallel):
            self.ddp = self.model
        else:
            ids = [self.device.index] if self.device.type == "cuda" else None
            # DDP fails at the second step when a parameter gets no gradient (a head the
            # loss does not reach, an input-dependent branch) unless told to look for them,
            # which costs a graph walk per step: only where one step at batch 1 finds any.
            self.unused_parameters = self._parameters_without_gradient()
            self.ddp = DistributedDataParallel(
                self.model, device_ids=ids, find_unused_parameters=self.unused_parameters > 0)
            self.model = self.ddp
        self.allreduce_bytes = allreduce_bytes(self.model)
        self.communication = self._communication_recorder()

    def _communication_recorder(self) -> CommunicationRecorder | None:
        """The hook that measures the all-reduce; None where the file's DDP registered a
        hook of its own (DDP takes one): the sweep then has no communication figures."""
        try:
            return CommunicationRecorder(self.ddp, self.sync, self.device.type == "cuda")
        except RuntimeError:
            return None

    def _parameters_without_gradient(self) -> int:
        """Trainable parameters one forward and backward at batch 1 leave without a
        gradient (no optimizer step: the weights are untouched); 0 when that step fails
        (the sweep then says why at its first batch size)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        try:
            inputs = self.make_inputs(1)
            forward = self.spec.step_fn(self.model, inputs)
            loss = (self.spec.loss or default_loss)(forward(), inputs)
            loss.backward()
        except Exception:  # noqa: BLE001 - the sweep's own first step reports it
            return 0
        finally:
            unused = sum(1 for p in params if p.grad is None)
            for p in params:
                p.grad = None
        return unused

    def info(self) -> ModelInfo:
        """The model's info with the ranks' own (``nodes``, ``ranks`` and the bus bandwidth
        are the group's: :func:`main` adds them)."""
        return dataclasses.replace(super().info(), distributed=DistributedInfo(
            world_size=self.world_size,
            backend=dist.get_backend(),
            wrapped_by=WrappedBy.MODEL_FILE if self.wrapped_by_file else WrappedBy.BATCHSCOPE,
            allreduce_bytes_per_step=self.allreduce_bytes,
            find_unused_parameters=self.unused_parameters > 0,
            parameters_without_gradient=self.unused_parameters,
        ))

    def measure_rank(self, batch_size: int, op_breakdown: bool | None = None) -> BatchResult:
        """This rank's figures at ``batch_size``, in lockstep with the other ranks. Every
        failure becomes a status, the first batch size's too (a file that breaks the
        contract there ends the run as rank_failed, exit 5, with the rank's error); the
        breakdown (``op_breakdown``, else as configured) is joined on rank 0 only."""
        started = time.perf_counter()
        result = BatchResult(batch_size=batch_size, status=Status.OK, worker_pid=os.getpid())
        phase = "make_inputs"
        try:
            inputs = self.make_inputs(batch_size)
            step = self._step(self.model, inputs)  # the training step (under --amp's autocast)
            phase = "timing"
            self.send(Phase(batch_size, phase))
            clock = self.backend.host_clock
            warmup_s = warm_up(step, clock, Warmup(WARMUP_STEPS))
            slowest = torch.tensor([warmup_s[-1]], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            # The count every rank agreed on, not one rank's clock; recorded as "min_time",
            # as when it was a fixed time of 0 s.
            count = FixedCount(timed_steps_for(slowest.item()), reason=StoppedBy.MIN_TIME)
            comm = self.communication
            if comm is not None:
                comm.samples = []
            timed = self.backend.measure(comm.recorded(step) if comm is not None else step,
                                         ONE_WARMUP_STEP, policy=count)
            result = record_timing(result, timed, self.spec.units_per_row)
            rank = RankResult(rank=self.rank, status=Status.OK, latency_s=timed.latency.median,
                              peak_memory_bytes=result.peak_memory_bytes,
                              host=socket.gethostname())
            result = dataclasses.replace(result, ranks=[rank])
            if comm is not None and comm.samples:
                # The timed steps' samples (the first step was the warm-up).
                samples = comm.samples[-timed.latency.n:]
                exposed = [s[0] for s in samples]
                result = dataclasses.replace(
                    result,
                    communication_exposed_samples_s=exposed,
                    communication_in_flight_samples_s=[s[1] for s in samples],
                    communication_step_samples_s=[s[2] for s in samples],
                    communication_exposed_s=statistics.median(exposed))
            if self.config.op_breakdown if op_breakdown is None else op_breakdown:
                phase = "profiling"
                self.send(Phase(batch_size, phase))
                result = self._breakdown(result, step, inputs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            status, label = classify_exception(exc)
            if isinstance(exc, ModelFileError):
                status, label = Status.MODEL_ERROR, ""
            error = f"{label}{describe_exception(exc)} (in {phase})"
            frames = user_frames(exc)
            if frames and status == Status.MODEL_ERROR:
                error += "\n" + frames
            result = dataclasses.replace(
                result, status=status, error=error,
                ranks=[RankResult(rank=self.rank, status=status, error=error,
                                  host=socket.gethostname())])
        return dataclasses.replace(result, world_size=self.world_size,
                                   allreduce_bytes_per_step=self.allreduce_bytes,
                                   available_memory_bytes=available_bytes(self.device),
                                   wall_s=time.perf_counter() - started)

    def _breakdown(self, result: BatchResult, step: Step, inputs: Any) -> BatchResult:
        """Capture and count on every rank (their steps all-reduce together); join on 0.
        Returns the new record (``result`` itself on the other ranks)."""
        try:
            capture = capture_steps(step, self.sync, self.device, n_steps=CAPTURE_STEPS)
        except ProfilerUnavailable as exc:
            return dataclasses.replace(result, flags=[*result.flags, Flag.of(
                NoBreakdown(reason=str(exc)), result.batch_size)])
        counted = counting.count_model_step(step, self.model, self.optimizer, inputs,
                                            root=self.ddp.module)
        if self.rank == 0:
            return fill_breakdown(result, counted, capture.steps)
        return result


def merge_ranks(results: list[BatchResult | None], world_size: int,
                timeout_s: float) -> BatchResult:
    """Rank 0's result (``results[0]``) with every rank's figures in ``ranks``;
    ``rank_failed`` naming the first rank that failed (or never reported: ``None`` in
    ``results``) when any did."""
    own = results[0] if results else None
    if own is None:
        raise ValueError("rank 0's own result is missing")
    ranks: list[RankResult] = []
    for rank in range(world_size):
        got = results[rank] if rank < len(results) else None
        if got is None:
            ranks.append(RankResult(
                rank=rank, status=Status.RANK_FAILED,
                error=f"no result within {timeout_s:.0f} s (the rank hung or died)"))
        else:
            ranks.extend(got.ranks)
    failed = [r for r in ranks if r.status != Status.OK]
    if not failed:
        return dataclasses.replace(own, ranks=ranks)
    # A rank whose peers failed times out in its all-reduce: name the one that did not.
    mine = [r for r in failed if not _collective_error(r.error)]
    culprit = mine[0] if mine else failed[0]
    others = [str(r.rank) for r in failed if r is not culprit]
    if mine:
        error = (f"rank {culprit.rank} failed: {culprit.error}"
                 + (f" (ranks {', '.join(others)} then failed waiting on it)" if others else ""))
    else:
        error = f"a peer of rank {culprit.rank} stopped answering: {culprit.error}"
    return dataclasses.replace(own, ranks=ranks, status=Status.RANK_FAILED, error=error)


def _collective_error(error: str) -> bool:
    """An error a rank raises because a peer stopped answering (gloo/NCCL timeouts, closed
    connections), not one of its own."""
    text = error.lower()
    return any(s in text for s in ("gloo", "nccl", "timed out", "timeout", "connection closed",
                                   "connection reset", "broken pipe", "distbackenderror"))


def _send_to_parent(conn: Connection | None) -> Send:
    def send(reply: Reply) -> None:
        if conn is not None:
            conn.send(reply)
    return send


def _device_for_rank(config: WorkerConfig) -> None:
    """On CUDA each rank takes the GPU of its local rank."""
    if config.device in ("auto", "cuda") and torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        config.device = f"cuda:{local}"


def main() -> None:
    """One rank: load the model with the others, then follow rank 0's requests."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides what Ctrl-C does
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    config = worker_config_from_json(os.environ[ENV_CONFIG])
    timeout_s = float(os.environ.get(ENV_COLLECTIVE_TIMEOUT, "200"))
    _device_for_rank(config)
    backend = "nccl" if str(config.device).startswith("cuda") else "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    commands = dist.new_group(backend="gloo", timeout=COMMAND_TIMEOUT)
    # Node 0's options rule every rank (another node's diagnose may have been given other
    # flags, and ranks that run different passes would wait on each other forever).
    box = [(os.environ[ENV_CONFIG], timeout_s)]
    dist.broadcast_object_list(box, src=0, group=commands)
    own_device = config.device
    config = worker_config_from_json(box[0][0])
    config.device, timeout_s = own_device, box[0][1]
    conn = None
    if rank == 0:
        host, port = os.environ[ENV_ADDRESS].rsplit(":", 1)
        conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[ENV_AUTHKEY]))
    send = _send_to_parent(conn)
    worker: RankWorker | None = None
    problem: ContractError | None = None
    try:
        worker = RankWorker(config, send, rank, world_size)
    except ModelFileError as exc:
        problem = ContractError(str(exc), exc.detail)
    except BaseException as exc:  # noqa: BLE001 - every load failure is told to the parent
        problem = ContractError(f"loading {config.model_path} on rank {rank} failed: "
                                f"{describe_exception(exc)}", traceback.format_exc())
    problems: list[ContractError | None] = [None] * world_size
    dist.all_gather_object(problems, problem, group=commands)
    first = next((p for p in problems if p), None)
    if first is not None or worker is None:
        send(first or ContractError(f"loading {config.model_path} on rank {rank} failed"))
        _leave(conn)
    hosts: list[Any] = [None] * world_size
    dist.all_gather_object(hosts, (socket.gethostname(), os.getpid()), group=commands)
    info = worker.info()
    if info.distributed is not None:
        info = dataclasses.replace(info, distributed=dataclasses.replace(
            info.distributed,
            nodes=len({host for host, _ in hosts}),
            ranks=[RankHost(rank=r, host=host, pid=pid) for r, (host, pid) in enumerate(hosts)],
            bus_bandwidth=_bus_bandwidth(worker.backend, [host for host, _ in hosts], rank,
                                         config.recalibrate, commands)))
    send(Ready(info))
    _follow(worker, conn, send, rank, world_size, timeout_s, commands)
    _leave(conn)


def _follow(worker: RankWorker, conn: Connection | None, send: Send, rank: int,
            world_size: int, timeout_s: float, commands: Any) -> None:
    """Rank 0's requests, broadcast to every rank, until StopWorker."""
    while True:
        box: list[Request | None] = [conn.recv() if conn is not None else None]
        dist.broadcast_object_list(box, src=0, group=commands)
        request = box[0]
        if request is None or isinstance(request, StopWorker):
            return
        if isinstance(request, MeasureCeilings) and rank == 0:
            from batchscope.hardware import load_or_measure

            send(CeilingsMeasured(load_or_measure(worker.device,
                                                  recalibrate=request.recalibrate)))
        elif isinstance(request, RunProbes) and rank == 0:
            from batchscope.profiler.probe import run_probes

            # rank 0 alone, within what the earlier rounds left of the probes' budget
            send(run_probes(request.specs, worker.dtype, worker.device, worker.sync,
                            request.cache_bytes, request.bounded_spent_s, request.round_s))
        elif isinstance(request, MeasureBatch):
            # A decision round's block (block_s) or any timing-only request: no breakdown.
            # The ranks time their own fixed count of steps, agreed on by every rank.
            mine = worker.measure_rank(request.batch_size, request.op_breakdown)
            gathered = _gather_results(mine, rank, world_size, timeout_s, commands)
            if rank == 0:
                send(BatchDone(merge_ranks(gathered, world_size, timeout_s)))


def _gather_results(mine: BatchResult, rank: int, world_size: int, timeout_s: float,
                    group: Any) -> list[BatchResult | None]:
    """Every rank's result on rank 0 (None for a rank that did not arrive in time).

    A monitored barrier first (gloo's, on the command group): rank 0 waits ``timeout_s``
    for the others and learns which did not come; the others wait three times that, since
    rank 0 may itself still be waiting out a collective timeout on a failed peer."""
    gathered: list[BatchResult | None] = [None] * world_size
    wait = timeout_s if rank == 0 else 3 * timeout_s
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=wait),
                               wait_all_ranks=True)
        dist.gather_object(mine, gathered if rank == 0 else None, dst=0, group=group)
    except RuntimeError as exc:
        if rank != 0:
            return gathered
        missing = set(_ranks_missing(str(exc)))
        gathered = [None] * world_size  # whoever did arrive, only rank 0's result is known
        gathered[0] = mine
        for r in range(1, world_size):
            if r not in missing:
                gathered[r] = BatchResult(mine.batch_size, Status.OK, ranks=[RankResult(
                    rank=r, status=Status.OK,
                    error="its result was not gathered (another rank hung)")])
        return gathered
    gathered[0] = mine
    return gathered


_MISSING = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


def _ranks_missing(message: str) -> list[int]:
    """The ranks a failed monitored barrier names."""
    match = _MISSING.search(message)
    return [int(x) for x in match.group(1).replace(",", " ").split()] if match else []


def _leave(conn: Connection | None) -> NoReturn:
    """Exit at once: a hung peer must not keep this rank in a collective teardown."""
    if conn is not None:
        conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
