"""The parent side of a data-parallel sweep: the ranks, started by torch's own launcher.

``diagnose FILE --nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT]``
runs ``python -m torch.distributed.run`` with those arguments (a static rendezvous at
HOST:PORT, as ``torchrun --master-addr/--master-port`` sets up), so the command a user runs
on one node is the one a SLURM or Kubernetes job runs on many; no launcher of ours. Every
rank runs :mod:`batchscope.profiler.ranks`. Global rank 0, on node 0, connects back to this
process over a local socket (an authenticated :class:`multiprocessing.connection.Listener`)
and speaks the single-process worker's messages (:mod:`batchscope.profiler.protocol`), so
:class:`~batchscope.profiler.supervisor.Sweep` drives a group of ranks as it drives one
worker. On any other node this process only
runs the launcher and waits: node 0 writes the report.

When a rank dies, torch's launcher stops the others and prints which rank failed first
("Root Cause (first observed failure)"); that is read from its output to name the rank.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from batchscope.profiler.protocol import (
    Ready,
    Reply,
    Request,
    StopWorker,
    WorkerDied,
    WorkerTimedOut,
)
from batchscope.profiler.worker_config import (
    WORKER_CONFIG_ENV,
    WorkerConfig,
    worker_config_to_json,
)
from batchscope.records import ModelInfo

log = logging.getLogger(__name__)

# How long the ranks' collectives wait for a peer: a third of the per-batch timeout, so a
# rank that died or hangs is named by the others (after at most two such waits) before the
# parent's own timeout stops them all.
COLLECTIVE_SHARE_OF_BATCH_TIMEOUT = 1 / 3
POLL_S = 0.05
TERMINATE_GRACE_S = 5.0
# After the ranks report a failure, how long torch's launcher is given to exit and name a
# rank that died (it polls its ranks every 0.1 s by default).
LAUNCHER_CAUSE_WAIT_S = 3.0


@dataclass
class DistributedConfig:
    """torchrun's arguments, as ``diagnose`` takes them."""

    nproc_per_node: int
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""  # HOST:PORT of node 0; "" on one node: a free local port

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def validate(self) -> str:
        """One sentence on what is wrong with these arguments, or ""."""
        if self.nproc_per_node < 1:
            return "--nproc-per-node must be at least 1."
        if self.nnodes < 1:
            return "--nnodes must be at least 1."
        if not 0 <= self.node_rank < self.nnodes:
            return f"--node-rank must be between 0 and {self.nnodes - 1} (--nnodes {self.nnodes})."
        if self.nnodes > 1 and not self.rdzv_endpoint:
            return ("--nnodes above 1 needs --rdzv-endpoint HOST:PORT, node 0's address, the "
                    "same on every node.")
        if self.rdzv_endpoint and not _endpoint(self.rdzv_endpoint):
            return f"--rdzv-endpoint {self.rdzv_endpoint!r} is not HOST:PORT."
        return ""


def _endpoint(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def launcher_command(dist: DistributedConfig, rendezvous_timeout_s: float = 600) -> list[str]:
    """``python -m torch.distributed.run ... -m batchscope.profiler.ranks``: a static
    rendezvous at node 0's address that gives up after ``rendezvous_timeout_s``."""
    host, port = _endpoint(dist.rdzv_endpoint) or ("127.0.0.1", _free_port())
    return [sys.executable, "-m", "torch.distributed.run",
            "--nproc-per-node", str(dist.nproc_per_node), "--nnodes", str(dist.nnodes),
            "--node-rank", str(dist.node_rank), "--master-addr", host,
            "--master-port", str(port), "--max-restarts", "0",
            "--rdzv-conf", f"timeout={max(int(rendezvous_timeout_s), 1)}",
            "-m", "batchscope.profiler.ranks"]


def rendezvous_failed(launcher_output: str) -> bool:
    """torch's launcher gave up waiting for the other nodes (or could not reach node 0)."""
    text = launcher_output.lower()
    return "rendezvous" in text or "diststoreerror" in text


_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.DOTALL)


def root_cause(launcher_output: str) -> tuple[int, int] | None:
    """(rank, exit code) of the first rank torch's launcher saw fail, from its summary."""
    match = _ROOT_CAUSE.search(launcher_output)
    return (int(match.group(1)), int(match.group(2))) if match else None


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class RanksDied(WorkerDied):
    """The launcher exited (or rank 0's connection closed) before a reply."""


class RanksTimedOut(WorkerTimedOut):
    """No reply from rank 0 before the deadline."""


class LaunchedRanks:
    """torch's launcher running every local rank, and the connection to global rank 0: a
    :class:`~batchscope.profiler.protocol.WorkerHandle`, as the single-process worker's is.
    """

    def __init__(self, worker: WorkerConfig, dist: DistributedConfig,
                 batch_timeout_s: float) -> None:
        self.dist = dist
        self.authkey = secrets.token_bytes(16)
        self.listener = Listener(("127.0.0.1", 0), authkey=self.authkey) \
            if dist.node_rank == 0 else None
        self.conn: Connection | None = None
        # The ranks' output file stays open for this object's life: stop() closes it.
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="batchscope-ranks-", suffix=".log", delete=False)
        env = dict(os.environ)
        env.update({
            WORKER_CONFIG_ENV: worker_config_to_json(worker),
            "BATCHSCOPE_AUTHKEY": self.authkey.hex(),
            "BATCHSCOPE_COLLECTIVE_TIMEOUT_S": str(
                max(batch_timeout_s * COLLECTIVE_SHARE_OF_BATCH_TIMEOUT, 1.0)),
        })
        if self.listener is not None:
            host, port = self.listener.address
            env["BATCHSCOPE_SUPERVISOR"] = f"{host}:{port}"
        # Its own session: a Ctrl-C in the terminal reaches this process only, which then
        # stops the launcher (and the launcher its ranks) and keeps what was measured.
        self.proc = subprocess.Popen(launcher_command(dist, batch_timeout_s), env=env,
                                     stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._accepted: list[Connection] = []
        self.rank_pids: list[int] = []
        if self.listener is not None:
            threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        if self.listener is None:
            return
        with contextlib.suppress(OSError):
            self._accepted.append(self.listener.accept())

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def log_path(self) -> str:
        return self.log.name

    def output(self) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")
        except OSError:
            return ""

    def _exited_within(self, wait_s: float) -> bool:
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _root_cause_sentence(self) -> str:
        cause = root_cause(self.output())
        if cause is None:
            return ""
        rank, code = cause
        return f"rank {rank} {describe_exit(code)}; torch's launcher stopped every rank"

    def why_dead(self) -> str:
        """One sentence on how the ranks ended, naming the rank torch's launcher saw fail."""
        self._exited_within(TERMINATE_GRACE_S)
        sentence = self._root_cause_sentence()
        if sentence:
            return sentence
        code = self.proc.returncode
        return (f"the launcher {describe_exit(code)}" if code is not None
                else "rank 0 closed its connection") + f" (its output: {self.log.name})"

    def launcher_cause(self, wait_s: float = LAUNCHER_CAUSE_WAIT_S) -> str:
        """After the ranks reported a failure: when a rank died, torch's launcher stops the
        others and exits within moments, naming the rank that died first; that sentence,
        or "" when the launcher is still running after ``wait_s`` (a rank hung or raised)."""
        return self._root_cause_sentence() if self._exited_within(wait_s) else ""

    def send(self, request: Request) -> None:
        if self.conn is None:
            raise RanksDied("rank 0 is not connected")
        try:
            self.conn.send(request)
        except (BrokenPipeError, OSError):
            raise RanksDied(self.why_dead()) from None

    def recv(self, deadline: float) -> Reply:
        while self.conn is None:
            if self._accepted:
                self.conn = self._accepted[0]
            elif not self.alive():
                raise RanksDied(self.why_dead())
            elif time.monotonic() > deadline:
                raise RanksTimedOut()
            else:
                time.sleep(POLL_S)
        while True:
            if self.conn.poll(POLL_S):
                try:
                    reply: Reply = self.conn.recv()
                except (EOFError, OSError):
                    raise RanksDied(self.why_dead()) from None
                if isinstance(reply, Ready):
                    self._note_ranks(reply.model)
                return reply
            if not self.alive() and not self.conn.poll(0):
                raise RanksDied(self.why_dead())
            if time.monotonic() > deadline:
                raise RanksTimedOut()

    def _note_ranks(self, model: ModelInfo) -> None:
        import socket

        here = socket.gethostname()
        ranks = model.distributed.ranks if model.distributed is not None else []
        self.rank_pids = [r.pid for r in ranks if r.host == here]

    def _kill_leftover_ranks(self) -> None:
        """A rank the launcher left behind (it was killed before it could stop them)."""
        for pid in self.rank_pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"batchscope.profiler.ranks" in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                log.warning("rank process %d outlived torch's launcher; killed", pid)

    def wait(self) -> int:
        """Node ≠ 0: wait for the launcher (its ranks follow rank 0); its exit code."""
        return self.proc.wait()

    def stop(self, graceful: bool = True) -> None:
        if graceful and self.conn is not None and self.alive():
            with contextlib.suppress(BrokenPipeError, OSError):
                self.conn.send(StopWorker())
            self._exited_within(TERMINATE_GRACE_S)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                break
            try:
                # The launcher's own group; it stops its ranks (each in a session of its own)
                # on SIGTERM, and any it leaves are killed below.
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            self._exited_within(TERMINATE_GRACE_S)
        self._kill_leftover_ranks()
        if self.conn is not None:
            self.conn.close()
        if self.listener is not None:
            self.listener.close()
        self.log.close()
        if graceful:  # a normal end: nothing in the ranks' output to point anyone to
            with contextlib.suppress(OSError):
                os.unlink(self.log.name)
