"""transformers' own serving, run for real on the report's model: static batching with
``generate()`` and continuous batching with the manager behind ``generate_batch()``.

Both take a stream of :class:`~batchscope.serving.requests.Request` and honour its arrival
times on the wall clock:

- **static** (:func:`serve_static`): when idle, the server takes up to ``cap`` arrived
  requests, left-pads their prompts into one batch and calls ``generate()`` for the longest
  output among them; every request of the batch is done when the call returns (the rows
  that needed fewer tokens are held, as the simulator's static policy holds them).
- **continuous** (:func:`serve_continuous`): ``model.init_continuous_batching()`` with
  ``max_requests_per_batch=cap`` and the stream's workload hints (as ``generate_batch()``
  gives them), each request added when it arrives with its own ``max_new_tokens``. Its
  paged KV cache is sized for the stream (``num_blocks``: every row of two full batches at
  the stream's longest request), not by transformers' default (90% of the free memory: on
  a CPU most of the machine's RAM, ~10 GB on a 24 GB VM, which took 4-13 s to set up at
  each manager's start, the one cost that made continuous batching look 2-7x slower than
  static there). The clock starts once the manager has built its cache: the start-up is
  measured apart (:attr:`EngineRun.startup_s`) and a running server's steps are what the
  simulation is checked on.

Prompts are random token ids (seeded by the request's index), and no token ends a request
early (the end-of-sequence id is one the vocabulary cannot produce), so each request makes
exactly its output tokens. A hook on the model times every forward call and keeps what it
held (rows, tokens computed, KV positions read): a run says how much of its time was the
model's and how much the engine's, and its decode calls are the engine's own step time
(:func:`batchscope.serving.engine_cost.fit_engine_step`).

torch and transformers are imported only when a function runs.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchscope.engine.clock import HostClock
from batchscope.engine.policies import FixedCount
from batchscope.engine.timer import Warmup, sample, warm_up
from batchscope.errors import UsageError
from batchscope.records.engine import PrefillPoint
from batchscope.records.policy import Policy
from batchscope.serving.engines.runs import EngineRun, ForwardTiming, ServedTiming
from batchscope.serving.requests import Request

# Prompt token ids are drawn from this range (below any real vocabulary's size, above the
# special tokens most tokenizers put first).
FIRST_ID, LAST_ID = 100, 1000
# How long the continuous driver waits for a result before it looks for arrivals again.
POLL_S = 0.02
# The continuous manager's thread is given this long to stop once every request is done,
# and this long to build its cache at the start.
STOP_TIMEOUT_S = 30.0
STARTUP_TIMEOUT_S = 300.0
# The paged cache holds this many full batches of the stream's longest request.
CACHE_BATCHES = 2


def engine_version() -> str:
    import transformers

    return str(transformers.__version__)


def load_engine_model(target: str) -> Any:
    """The report's own model as a transformers causal LM, in eval mode.

    ``target`` is the report's model file, which must define ``build_engine_model()``
    returning a transformers model with ``generate()`` (the file ``diagnose hf:MODEL --task
    causal-lm-decode`` writes defines it: the same config and seeded weights the sweep
    built).

    Raises:
        UsageError: transformers is missing, or the report names no model the engine can run.
    """
    model = model_from_file(Path(target))
    if not callable(getattr(model, "generate", None)) \
            or not callable(getattr(model, "init_continuous_batching", None)):
        raise UsageError(f"{target}: build_engine_model() gave no transformers generation "
                         "model (one with generate() and init_continuous_batching()), so "
                         "transformers cannot serve it.")
    return model.eval()


class NoEngineModel(UsageError):
    """The report's model file defines no ``build_engine_model()``."""


def model_from_file(path: Path) -> Any:
    """The model ``build_engine_model()`` of the file at ``path`` returns (built under the
    caller's default device: meta for a prediction).

    Raises:
        NoEngineModel: the file defines no such function.
        UsageError: the file cannot be imported, transformers is missing, or the function
            fails.
    """
    from batchscope.contract import import_model_file
    from batchscope.errors import ModelFileError

    try:
        module = import_model_file(path)
    except ModelFileError as exc:
        raise UsageError(str(exc)) from None
    build = vars(module).get("build_engine_model")
    if not callable(build):
        raise NoEngineModel(f"{path} defines no build_engine_model(), so there is no model to "
                            "serve or prefill: return a transformers causal LM from it, or "
                            "sweep hf:MODEL --task causal-lm-decode.")
    try:
        import transformers  # noqa: F401 - the engine itself
    except ImportError:
        raise UsageError("--engine transformers needs transformers: pip install "
                         "'batchscope[hf]'.") from None
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - the user's code: one sentence
        raise UsageError(f"{path}: build_engine_model() raised {type(exc).__name__}: "
                         f"{str(exc)[:200]}.") from None


def _prompt(index: int, tokens: int) -> list[int]:
    import random

    rng = random.Random(index)
    return [rng.randrange(FIRST_ID, LAST_ID) for _ in range(max(tokens, 1))]


def _generation_config(model: Any, max_new_tokens: int) -> Any:
    from transformers import GenerationConfig

    vocab = int(model.config.get_text_config().vocab_size)
    # An end-of-sequence id past the vocabulary: never generated, so no request ends early.
    return GenerationConfig(  # type: ignore[no-untyped-call]  # transformers' is unannotated
        max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=vocab, pad_token_id=0)


@dataclass
class _ForwardClock:
    calls: int = 0
    inside_s: float = 0.0
    forwards: list[ForwardTiming] = field(default_factory=list)
    _started: float = 0.0
    _shape: tuple[int, int, int] = (0, 0, 0)


def _call_shape(kwargs: dict[str, Any]) -> tuple[int, int, int]:
    """(rows, query tokens, KV positions read) of one forward call as the engine makes it:
    ``generate()``'s (``input_ids`` of rows x new tokens over a padded cache) or the
    continuous manager's (one packed row; ``cu_seq_lens_q``/``cu_seq_lens_k`` bound each
    sequence). (0, 0, 0) for a call of neither form."""
    ids = kwargs.get("input_ids")
    if ids is None or getattr(ids, "dim", lambda: 0)() != 2:
        return 0, 0, 0
    cu_q = kwargs.get("cu_seq_lens_q")
    if cu_q is not None:  # continuous: packed sequences, each reading its own cache
        cu_k = kwargs.get("cu_seq_lens_k")
        ends = next(iter(cu_k.values()), None) if isinstance(cu_k, dict) else cu_k
        kv = int(ends[-1]) if ends is not None and len(ends) else 0
        return len(cu_q) - 1, int(ids.shape[1]), kv
    rows, query = int(ids.shape[0]), int(ids.shape[1])
    mask = kwargs.get("attention_mask")
    if mask is not None and getattr(mask, "dim", lambda: 0)() == 2:
        width = int(mask.shape[1])
    else:
        cache: Any = kwargs.get("past_key_values", kwargs.get("cache"))
        length = getattr(cache, "get_seq_length", None)
        width = (int(length()) if callable(length) else 0) + query
    return rows, rows * query, rows * width


@contextmanager
def _forward_clock(model: Any) -> Iterator[_ForwardClock]:
    """Count the model's forward calls and the wall time inside them, and keep each call's
    time and shape."""
    clock = _ForwardClock()
    lock = threading.Lock()

    def before(_: Any, __: Any, kwargs: dict[str, Any]) -> None:
        with lock:
            clock._shape = _call_shape(kwargs)
            clock._started = time.perf_counter()

    def after(*_: Any) -> None:
        with lock:
            took = time.perf_counter() - clock._started
            clock.calls += 1
            clock.inside_s += took
            rows, query, kv = clock._shape
            if rows:
                clock.forwards.append(ForwardTiming(took, rows, query, kv))

    handles = [model.register_forward_pre_hook(before, with_kwargs=True),
               model.register_forward_hook(after)]
    try:
        yield clock
    finally:
        for handle in handles:
            handle.remove()


def serve_static(model: Any, requests: list[Request], cap: int) -> EngineRun:
    """Serve ``requests`` with ``generate()`` in batches of up to ``cap`` arrived requests."""
    import torch

    pending = sorted(enumerate(requests), key=lambda item: item[1].arrival_s)
    served: list[ServedTiming] = []
    with _forward_clock(model) as clock, torch.inference_mode():
        start = time.perf_counter()
        i = 0
        while i < len(pending):
            now = time.perf_counter() - start
            if pending[i][1].arrival_s > now:
                time.sleep(pending[i][1].arrival_s - now)
                continue
            batch = [item for item in pending[i:i + cap] if item[1].arrival_s <= now]
            i += len(batch)
            prompts = [_prompt(index, r.prompt_tokens) for index, r in batch]
            width = max(len(p) for p in prompts)
            ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
            longest = max(r.output_tokens for _, r in batch)
            model.generate(input_ids=ids, attention_mask=mask,
                           generation_config=_generation_config(model, longest))
            done = time.perf_counter() - start
            served += [ServedTiming(r, done, r.output_tokens) for _, r in batch]
    return EngineRun(Policy.STATIC, cap, served, clock.calls, clock.inside_s,
                     forwards=clock.forwards)


def serve_continuous(model: Any, requests: list[Request], cap: int) -> EngineRun:
    """Serve ``requests`` with transformers' continuous batching, ``cap`` requests at most
    per step, each added when it arrives."""
    import torch

    try:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig
        from transformers.generation.continuous_batching.utils import WorkloadHints
    except ImportError:
        raise UsageError(f"transformers {engine_version()} has no continuous batching with "
                         "workload hints (batchscope runs it with 5.24): pip install -U "
                         "transformers.") from None

    hints = WorkloadHints(max_prompt_length=max(r.prompt_tokens for r in requests),
                          max_generated_length=max(r.output_tokens for r in requests),
                          num_requests=len(requests))
    longest = max(r.output_tokens for r in requests)
    pending = sorted(enumerate(requests), key=lambda item: item[1].arrival_s)
    by_id = {f"r{index}": r for index, r in pending}
    served: list[ServedTiming] = []
    page = ContinuousBatchingConfig().page_size
    per_request = -(-max(r.prompt_tokens + r.output_tokens for r in requests) // page)
    config = ContinuousBatchingConfig(max_requests_per_batch=cap,
                                      num_blocks=CACHE_BATCHES * cap * per_request + 1)
    with _forward_clock(model) as clock, torch.inference_mode():
        set_up = time.perf_counter()
        manager = model.init_continuous_batching(
            generation_config=_generation_config(model, longest),
            continuous_batching_config=config, workload_hints=hints)
        manager.start()
        while getattr(manager, "batch_processor", None) is None and manager.is_running() \
                and time.perf_counter() - set_up < STARTUP_TIMEOUT_S:
            time.sleep(1e-3)
        startup_s = time.perf_counter() - set_up
        try:
            start = time.perf_counter()
            i = 0
            while len(served) < len(requests):
                now = time.perf_counter() - start
                while i < len(pending) and pending[i][1].arrival_s <= now:
                    index, r = pending[i]
                    manager.add_request(_prompt(index, r.prompt_tokens),
                                        request_id=f"r{index}", max_new_tokens=r.output_tokens)
                    i += 1
                wait = POLL_S if i == len(pending) else \
                    min(POLL_S, max(pending[i][1].arrival_s - now, 0.0))
                result = manager.get_result(timeout=max(wait, 1e-3))
                if result is not None and result.is_finished():
                    done = time.perf_counter() - start
                    served.append(ServedTiming(by_id[result.request_id], done,
                                               len(result.generated_tokens)))
                elif result is None and not manager.is_running():
                    raise UsageError("transformers' continuous batching stopped before every "
                                     "request was served.")
        finally:
            manager.stop(block=True, timeout=STOP_TIMEOUT_S)
    return EngineRun(Policy.CONTINUOUS, cap, served, clock.calls, clock.inside_s, startup_s,
                     clock.forwards)


def serve(model: Any, policy: Policy, requests: list[Request], cap: int) -> EngineRun:
    """Serve ``requests`` under ``policy``; transformers' warnings (one per call about its
    generation flags) held back meanwhile."""
    from transformers import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # unannotated upstream
    try:
        if policy == Policy.STATIC:
            return serve_static(model, requests, cap)
        return serve_continuous(model, requests, cap)
    finally:
        logging.set_verbosity(level)


def time_prefill(model: Any, prompt_tokens: list[int], repeats: int = 3) -> list[PrefillPoint]:
    """One prompt's prefill (the forward that fills its KV cache) at each length: the
    median of ``repeats`` timings after one warm-up call, through the engine's timer (the
    upper median where ``repeats`` is even)."""
    import torch

    clock = HostClock()
    points = []
    with torch.inference_mode():
        for tokens in sorted(set(prompt_tokens)):
            ids = torch.tensor([_prompt(tokens, tokens)])
            prefill = functools.partial(model, input_ids=ids, use_cache=True)
            warm_up(prefill, clock, Warmup(min_steps=1))
            sampled, _ = sample(prefill, clock, FixedCount(repeats))
            points.append(PrefillPoint(tokens, statistics.median_high(sampled.samples_s)))
    return points
