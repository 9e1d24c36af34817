"""A deterministic discrete-event simulation of a decode server under one batching policy.

The server runs one decode step at a time; each step generates one token for every row of
the batch and takes ``step_s(rows, context)`` seconds, ``context`` being the most tokens
any row holds in its KV cache (attention over a padded batch reads that many per row), or
with ``paged`` the rows' mean (a paged-attention engine reads each row's own cache: with a
step time linear in the context, its rows' total).

- **static**: when the server is idle it takes up to ``cap`` waiting requests as one batch
  and steps until the longest is done. Rows whose requests finish early stay in the batch
  (their slots idle but still computed) and new arrivals wait for the whole batch.
- **continuous** (iteration-level, as vLLM or TGI): before every step, waiting requests are
  admitted into free slots, first come first served; a finished request leaves the batch
  after the step that generated its last token.

Both policies reserve each request's prompt plus output tokens of KV memory at admission
(no preemption) and admit no request that would overflow ``kv_capacity_tokens``. A request
that could not fit even into an empty server is rejected. With ``paged`` continuous
batching allocates as a paged engine does (vLLM's scheduler): a request is admitted when
its prompt's tokens fit (leaving :data:`ADMISSION_WATERMARK` of the room free), each step
takes one more token per row, and where the next step's tokens would not fit the most
recently admitted rows are preempted: their KV freed, they wait at the head of the queue
and are prefilled again (prompt and tokens so far, as vLLM's recompute) when readmitted.
Prefill is charged by ``prefill_s(prompt_tokens)`` when a request is admitted, before the
next step (zero when the model file gives no prefill step: the prompt's KV is then taken
as ready on admission).
A request's first token comes with its first decode step.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from batchscope.records.serving import Policy
from batchscope.serving.requests import Request

StepTime = Callable[[int, int], float]
# A paged server admits a request only while this share of its KV room stays free beyond
# it (vLLM's block manager, its ``watermark`` default): a row just preempted is not
# readmitted at the next step only to be preempted again.
ADMISSION_WATERMARK = 0.01


@dataclass
class Served:
    """What happened to one request. Times in seconds from the start of the stream."""

    request: Request
    admitted_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    rejected: bool = False
    made_before_preemption: int = 0  # tokens made when last preempted (paged), 0 otherwise

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.request.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (vLLM's TPOT); None for one token."""
        if self.finished_s is None or self.first_token_s is None \
                or self.request.output_tokens < 2:
            return None
        return (self.finished_s - self.first_token_s) / (self.request.output_tokens - 1)

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_s is None else self.finished_s - self.request.arrival_s


@dataclass
class Simulation:
    """Every request's outcome, and the steps the server ran."""

    policy: Policy
    cap: int
    served: list[Served]
    steps: int = 0
    row_steps: int = 0  # rows summed over steps, finished-but-held static rows included
    preemptions: int = 0  # rows preempted for KV room (paged continuous batching only)
    busy_s: float = 0.0
    step_rows: list[int] = field(default_factory=list)

    @property
    def mean_batch(self) -> float | None:
        return self.row_steps / self.steps if self.steps else None


class _Row:
    """One slot of the batch: its request, the tokens in its KV cache, tokens made so far."""

    __slots__ = ("cached_tokens", "generated", "served", "target")

    def __init__(self, served: Served, cached_tokens: int) -> None:
        self.served, self.cached_tokens = served, cached_tokens
        self.generated, self.target = 0, served.request.output_tokens

    @property
    def done(self) -> bool:
        return self.generated >= self.target


def _reserve(request: Request) -> int:
    return request.prompt_tokens + request.output_tokens


class _Server:
    def __init__(self, requests: list[Request], policy: Policy, cap: int, step_s: StepTime,
                 kv_capacity_tokens: int | None, prefill_s: Callable[[int], float] | None,
                 paged: bool = False):
        if cap < 1:
            raise ValueError("the batch cap must be at least 1")
        self.sim = Simulation(policy, cap, [Served(r) for r in
                                            sorted(requests, key=lambda r: r.arrival_s)])
        self.waiting: deque[Served] = deque(self.sim.served)
        self.step_s, self.prefill_s = step_s, prefill_s
        self.kv_capacity = kv_capacity_tokens
        self.kv_used = 0
        self.rows: list[_Row] = []
        self.t = 0.0
        self.paged = paged
        # Paged continuous batching: KV taken as it is used, not reserved at admission.
        self.on_demand = paged and policy == Policy.CONTINUOUS

    def _held(self, served: Served) -> int:
        """KV tokens a request takes when admitted: all it will hold, or (on demand) its
        prompt and the tokens it made before it was preempted."""
        if self.on_demand:
            return served.request.prompt_tokens + served.made_before_preemption
        return _reserve(served.request)

    def _fits(self, served: Served) -> bool:
        """Whether ``served`` can be admitted now. On demand, its tokens and the next step's
        one token for every row and for it must fit, leaving the watermark free unless the
        server is empty (a request that fits the whole room alone is always admitted
        there, so none waits forever)."""
        if self.kv_capacity is None:
            return True
        if not self.on_demand:
            return self.kv_used + self._held(served) <= self.kv_capacity
        room = self.kv_capacity
        if self.rows:
            room -= int(ADMISSION_WATERMARK * self.kv_capacity)
        return self.kv_used + self._held(served) + len(self.rows) + 1 <= room

    def admit(self) -> None:
        """Admit arrived requests, first come first served, while a slot and KV are free."""
        prefill = 0.0
        while self.waiting and self.waiting[0].request.arrival_s <= self.t \
                and len(self.rows) < self.sim.cap:
            head = self.waiting[0]
            if self.kv_capacity is not None and _reserve(head.request) > self.kv_capacity:
                head.rejected = True  # would not fit even alone: never admitted
                self.waiting.popleft()
                continue
            if not self._fits(head):
                break  # head-of-line: wait for KV to free
            self.waiting.popleft()
            if head.admitted_s is None:
                head.admitted_s = self.t
            held, made = self._held(head), head.made_before_preemption
            head.made_before_preemption = 0
            self.kv_used += held
            row = _Row(head, head.request.prompt_tokens + made)
            row.generated = made
            self.rows.append(row)
            if self.prefill_s is not None:
                prefill += self.prefill_s(head.request.prompt_tokens + made)
        self.t += prefill
        self.sim.busy_s += prefill

    def make_room(self) -> None:
        """On demand: preempt the most recently admitted rows until the next step's one
        token per row fits (the oldest row always runs: it fitted when admitted alone)."""
        if not self.on_demand or self.kv_capacity is None:
            return
        while len(self.rows) > 1 and self.kv_used + len(self.rows) > self.kv_capacity:
            row = self.rows.pop()
            self.kv_used -= row.cached_tokens
            row.served.made_before_preemption = row.generated
            self.waiting.appendleft(row.served)
            self.sim.preemptions += 1

    def step(self) -> list[_Row]:
        """One decode step of every row; the rows whose request it finished."""
        self.make_room()
        rows = len(self.rows)
        cached = [r.cached_tokens for r in self.rows]
        context = round(sum(cached) / rows) if self.paged else max(cached)
        dt = self.step_s(rows, context)
        if not 0 < dt < math.inf:
            raise ValueError(f"a step of {rows} rows would take {dt!r} s: no time to simulate")
        self.t += dt
        self.sim.busy_s += dt
        self.sim.steps += 1
        self.sim.row_steps += rows
        self.sim.step_rows.append(rows)
        finished = []
        for row in self.rows:
            if row.generated >= row.target:
                continue  # a static batch's finished row: held, not advanced
            row.generated += 1
            row.cached_tokens += 1
            if self.on_demand:
                self.kv_used += 1
            if row.generated == 1:
                row.served.first_token_s = self.t
            if row.generated == row.target:
                row.served.finished_s = self.t
                finished.append(row)
        return finished

    def release(self, row: _Row) -> None:
        self.kv_used -= row.cached_tokens if self.on_demand else _reserve(row.served.request)

    def idle_until_next_arrival(self) -> bool:
        """Jump to the next arrival when nothing runs; False once nothing is left at all."""
        if not self.waiting:
            return False
        self.t = max(self.t, self.waiting[0].request.arrival_s)
        return True


def simulate(requests: list[Request], policy: Policy, cap: int, step_s: StepTime,
             kv_capacity_tokens: int | None = None,
             prefill_s: Callable[[int], float] | None = None,
             paged: bool = False) -> Simulation:
    """Serve ``requests`` under ``policy`` with at most ``cap`` rows per step (``paged``:
    each step over its rows' mean context, not their longest).

    Example:
        >>> one = [Request(arrival_s=0.0, prompt_tokens=4, output_tokens=3)]
        >>> sim = simulate(one, Policy.CONTINUOUS, 8, lambda rows, context: 0.01)
        >>> round(sim.served[0].finished_s, 3), sim.steps
        (0.03, 3)
    """
    server = _Server(requests, Policy(policy), cap, step_s, kv_capacity_tokens, prefill_s,
                     paged)
    continuous = server.sim.policy == Policy.CONTINUOUS
    unfinished = 0  # rows of a static batch still generating (read for static only)
    while True:
        if not server.rows:
            server.admit()
            if not server.rows:
                head = server.waiting[0] if server.waiting else None
                if head is not None and head.request.arrival_s <= server.t:
                    # arrived, and an empty server could not take it: it never will
                    server.waiting.popleft().rejected = True
                    continue
                if not server.idle_until_next_arrival():
                    break
                continue
            unfinished = len(server.rows)
        elif continuous:
            before = len(server.rows)
            server.admit()
            unfinished += len(server.rows) - before
        finished = server.step()
        unfinished -= len(finished)
        if continuous and finished:
            for row in finished:
                server.release(row)
            server.rows = [r for r in server.rows if not r.done]
        elif not continuous and unfinished == 0:
            for row in server.rows:
                server.release(row)
            server.rows = []
    return server.sim
