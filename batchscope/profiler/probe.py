"""Kernel probes: one matmul or convolution of the model's own shape, timed alone at a
batch size the sweep did not measure.

BLAS libraries pick their kernel by the shape: MKL runs a 1-row product as gemv and 2-8
rows on another path, cuBLAS switches tiles, and how close a large product comes to the
machine's peak depends on its K and N. A convolution changes too: oneDNN picks another
path by the batch, and on the CPU its output (over glibc's 32 MiB mmap ceiling from a
modest batch) is mapped afresh and faulted in at every call, about twice its pages (a
temporary in oneDNN's layout), so a ResNet-18's convolutions slow per image as the batch
grows. No measurement at small batch sizes shows what a larger one will run, so the
step-time model (:mod:`batchscope.classifiers.step_model`) asks for the model's own
matmuls and convolutions, scaled to the sizes it predicts (:mod:`batchscope.probe_plan`
names them), timed here in the worker: milliseconds to a second each, where measuring the
whole model at that size takes minutes.

A spec is a :class:`~batchscope.records.probe.ProbeSpec` (a record: the plan builds it
without torch): ``name`` one of :data:`~batchscope.op_families.PROBED_OPS`, ``shapes`` the
tensor arguments' shapes in aten order and, for a convolution, ``args``: the op's other
arguments (``CountedOp.call_args``: stride, padding, dilation, transposed, output_padding,
groups; a bias when ``shapes`` has a third shape). The per-row ops of
:data:`~batchscope.op_families.REPLAYED_OPS` (batch norm, pooling, the backward
convolution, ...) have ``args`` too, their non-tensor arguments in schema order, and are
called again through the overload those fit, on fresh tensors of their shapes. Every probe
runs in its spec's ``dtype`` where it has one (the dtype the op ran in: under ``--amp`` the
matmuls of an fp32 model run in bfloat16), else the model's.
Which ops are probed, and how, is :data:`batchscope.op_families.PROBES`. The second matrix of a
2-D ``addmm``/``mm`` is built as an ``nn.Linear`` weight seen transposed (``w.t()``), the
layout ``F.linear`` passes. A convolution is called as the model calls it,
``aten.convolution``, which allocates its output afresh at every call as it does in the
step (never into an ``out=`` buffer): the page faults are part of its time. When the
model's weights outgrow the last-level cache (``cache_bytes`` given), the arguments rotate
through enough copies to exceed twice it, so the weights come from memory as they do in
its steps; a model that fits in cache is probed with its arguments hot, as it runs.

Each probe is timed by the engine (:func:`batchscope.engine.timer.sample`) under a
:class:`~batchscope.engine.policies.RepeatBudget`: a warm-up call, then at least
``MIN_REPEATS`` calls (one after a long warm-up) until ``PROBE_TIME_S`` of calls or
``MAX_REPEATS`` of them (:mod:`batchscope.records.probe`, where the plan reads them too).
No torch at module level: the parent builds specs.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from batchscope.engine.clock import HostClock
from batchscope.engine.policies import RepeatBudget, Spent
from batchscope.engine.timer import sample
from batchscope.op_families import PROBED_OPS, REPLAYED_OPS, ProbeKind, probed
from batchscope.profiler.protocol import ProbesTimed
from batchscope.records.probe import (
    LONG_CALL_S,
    MAX_REPEATS,
    MIN_REPEATS,
    PROBE_TIME_S,
    ProbeSpec,
)

if TYPE_CHECKING:  # the parent builds specs without torch; only the worker times them
    import torch

# Matmuls: fresh tensors of the recorded shapes are all a call needs. The ops of
# op_families.REPLAYED_OPS are called again from their recorded non-tensor arguments
# (``CountedOp.call_args``, in schema order) and tensors of their recorded shapes,
# whichever of the op's overloads the two fit (:class:`_Replay`). Their tensor arguments
# must be floating point, or named ``indices`` (filled with zeros, a valid index for any
# max-pool window).
MATMUL_PROBES = probed(ProbeKind.SHAPES)
# A convolution's non-tensor arguments (its spec's "args"): stride, padding, dilation,
# transposed, output_padding, groups.
CONV_ARGS = 6
# Copies of the arguments cycled through, at most, to keep them out of the cache.
MAX_COPIES = 16


class _Arguments:
    """Argument tensors for the probes of one round, made once per shape and reused: a
    linear layer's weight has the same shape at every batch size, and filling hundreds of
    MB with random numbers costs more than timing the product (0.4 s per 200 MB here).
    Copy ``i`` of a tensor is a clone of copy 0: the same values at another address, which
    is all keeping it out of the cache needs. A convolution's input is the exception: made
    for its probe alone and freed after it, since a round's inputs at every size would
    hold gigabytes (a ResNet-18's 11 input shapes take ~3 MB an image together)."""

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.dtype, self.device = dtype, device
        self.made: dict[tuple[tuple[int, ...], bool, int, torch.dtype], torch.Tensor] = {}

    def tensor(self, shape: list[int], copy: int, linear_weight: bool = False,
               dtype: torch.dtype | None = None) -> torch.Tensor:
        import torch

        dtype = dtype or self.dtype
        key = (tuple(shape), linear_weight, copy, dtype)
        if key not in self.made:
            if copy:
                self.made[key] = self.tensor(shape, 0, linear_weight, dtype).clone()
            elif linear_weight:  # nn.Linear's [out, in] weight, as F.linear passes it: w.t()
                self.made[key] = torch.randn([shape[1], shape[0]], dtype=dtype,
                                             device=self.device).t()
            else:
                self.made[key] = torch.randn(shape, dtype=dtype, device=self.device)
        return self.made[key]

    def for_spec(self, name: str, shapes: list[list[int]], copy: int,
                 args: list[Any] | None = None,
                 dtype: torch.dtype | None = None) -> list[torch.Tensor]:
        """The tensors of one call, in ``dtype`` (the one the op ran in: under ``--amp`` a
        matmul of an fp32 model runs in bfloat16), else the model's."""
        if name in ("addmm", "mm"):
            *bias, a, b = shapes
            if len(a) != 2 or len(b) != 2:
                raise ValueError(f"{name} with shapes {shapes} is not a 2-D product")
            return [*(self.tensor(s, copy, dtype=dtype) for s in bias),
                    self.tensor(a, copy, dtype=dtype),
                    self.tensor(b, copy, linear_weight=True, dtype=dtype)]
        if name == "convolution":
            import torch

            if len(shapes) not in (2, 3) or len(shapes[0]) != len(shapes[1]):
                raise ValueError(f"convolution with shapes {shapes} is not input, weight "
                                 f"and an optional bias")
            x, *params = shapes
            return [torch.randn(x, dtype=dtype or self.dtype, device=self.device),
                    *(self.tensor(s, copy, dtype=dtype) for s in params)]
        if name in REPLAYED_OPS:
            # Made for its probe alone, as a convolution's input: most of them grow with
            # the rows.
            return _Replay.of(name, shapes, args).tensors(shapes, dtype or self.dtype,
                                                          self.device)
        return [self.tensor(s, copy, dtype=dtype) for s in shapes]


def tensor_slots(schema: Any) -> int | None:
    """How many tensor arguments an aten schema takes (optional ones too); None where one
    is a list of tensors, whose length no recorded call keeps."""
    types = [str(arg.type) for arg in schema.arguments if "Tensor" in str(arg.type)]
    return None if any(t.endswith("[]") for t in types) else len(types)


class _Replay:
    """How to call one of :data:`REPLAYED_OPS` again: the overload whose schema takes as
    many tensors as were recorded (every optional one present) and as many other
    arguments as ``call_args`` holds, with the tensors and the other arguments put back in
    schema order (keyword-only ones as keywords)."""

    def __init__(self, overload: Any, tensor_names: list[str],
                 slots: list[tuple[str, bool, bool]]) -> None:
        self.overload = overload
        self.tensor_names = tensor_names
        self.slots = slots  # (name, a tensor, keyword-only) per schema argument

    @staticmethod
    def of(name: str, shapes: list[list[int]], args: list[Any] | None) -> _Replay:
        """The replay of ``name`` for these shapes and args (None: any count of args).

        Raises:
            ValueError: no overload of the op takes them.
        """
        return _replay(name, len(shapes), None if args is None else len(args))

    def tensors(self, shapes: list[list[int]], dtype: torch.dtype,
                device: torch.device) -> list[torch.Tensor]:
        """Fresh tensors of ``shapes``: indices zero, the rest uniform in [0.5, 1.5) (a
        variance or its inverse square root must be positive; any value runs as fast)."""
        import torch

        return [torch.zeros(shape, dtype=torch.long, device=device) if name == "indices"
                else torch.empty(shape, dtype=dtype, device=device).uniform_(0.5, 1.5)
                for name, shape in zip(self.tensor_names, shapes, strict=True)]

    def call(self, tensors: list[torch.Tensor], args: list[Any]) -> Any:
        given_tensors, given_args = iter(tensors), iter(args)
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for name, is_tensor, kwarg_only in self.slots:
            value = next(given_tensors) if is_tensor else next(given_args)
            if kwarg_only:
                keywords[name] = value
            else:
                positional.append(value)
        return self.overload(*positional, **keywords)


@functools.cache
def _replay(name: str, tensor_count: int, other_count: int | None) -> _Replay:
    """:meth:`_Replay.of`, by counts: read once per op and counts, not per probe."""
    import torch

    packet = getattr(torch.ops.aten, name)
    for overload_name in packet.overloads():
        overload = getattr(packet, overload_name)
        schema = overload._schema
        if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
            continue  # an out= or in-place overload
        if tensor_slots(schema) != tensor_count:
            continue  # another count, or a list of tensors (its length is not recorded)
        slots = [(a.name, "Tensor" in str(a.type), a.kwarg_only) for a in schema.arguments]
        tensors = [n for n, is_tensor, _ in slots if is_tensor]
        if other_count is None or len(slots) - len(tensors) == other_count:
            return _Replay(overload, tensors, slots)
    raise ValueError(f"no overload of {name} takes {tensor_count} tensors and "
                     f"{'its' if other_count is None else other_count} other arguments")


def _caller(spec: ProbeSpec) -> Callable[[list[torch.Tensor]], Any]:
    """What one timed call runs: the aten op on one set of argument tensors.

    Raises:
        ValueError: an op outside :data:`PROBED_OPS`, or a convolution without its args.
    """
    import torch

    name, args = spec.name, spec.args
    if name not in PROBED_OPS:
        raise ValueError(f"{name} is not probed")
    if name in REPLAYED_OPS:
        if not isinstance(args, list):
            raise ValueError(f"{name} needs its recorded non-tensor arguments, not {args!r}")
        replay, recorded = _Replay.of(name, spec.shapes, args), args
        return lambda tensors: replay.call(tensors, recorded)
    op = getattr(torch.ops.aten, name)
    if name != "convolution":
        return lambda tensors: op(*tensors)
    if not isinstance(args, list) or len(args) != CONV_ARGS:
        raise ValueError(f"convolution needs its {CONV_ARGS} non-tensor arguments, not {args!r}")
    stride, padding, dilation, transposed, output_padding, groups = args
    # The output is the op's own, a new tensor at every call, as in the step.
    return lambda t: op(t[0], t[1], t[2] if len(t) > 2 else None, stride, padding,
                        dilation, transposed, output_padding, groups)


def _float_dtype(name: Any) -> torch.dtype | None:
    """The floating-point torch dtype named ``name`` ("bfloat16"), else None."""
    import torch

    dtype = getattr(torch, name, None) if isinstance(name, str) and name else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


def time_probe(spec: ProbeSpec, dtype: torch.dtype, device: torch.device,
               sync: Callable[[], None], cache_bytes: int | None = None,
               arguments: _Arguments | None = None, warm_up: bool = True) -> float:
    """Median seconds of one call of ``spec``'s op (``arguments`` shares tensors between
    the probes of a round), on the host's clock with the device drained (``sync``). Without
    ``warm_up`` (a call known to be long: the library's setup is a sliver of it) one call is
    timed, cold.

    Raises:
        ValueError: an op outside :data:`PROBED_OPS` or shapes or args it cannot take.
        RuntimeError, MemoryError: the op refused its arguments, or they did not fit.
    """
    import torch

    name = spec.name
    op = _caller(spec)
    arguments = arguments or _Arguments(dtype, device)
    op_dtype = _float_dtype(spec.dtype)
    first = arguments.for_spec(name, spec.shapes, 0, spec.args, op_dtype)
    size = sum(t.numel() * t.element_size() for t in first)
    copies = (min(MAX_COPIES, max(1, -(-2 * cache_bytes // max(size, 1))))
              if cache_bytes and name not in REPLAYED_OPS else 1)  # no weights to keep cold
    sets = [first] + [arguments.for_spec(name, spec.shapes, i, spec.args, op_dtype)
                      for i in range(1, copies)]
    clock = HostClock(sync)
    with torch.inference_mode():
        repeats = 1
        if warm_up:
            # The library's first call sets up its kernel. After a warm-up this long that
            # setup is a small part of a call: one timed call does.
            warmup_s, _ = clock.time(lambda: op(sets[-1]))
            repeats = 1 if warmup_s >= LONG_CALL_S else MIN_REPEATS
        rotation = itertools.cycle(sets)  # the copies in turn, from the first
        sampled, _ = sample(lambda: op(next(rotation)), clock,
                            RepeatBudget(repeats, MAX_REPEATS, PROBE_TIME_S, spent=Spent.SAMPLED),
                            prepare=sync)
    return statistics.median(sampled.samples_s)


def run_probes(specs: list[ProbeSpec], dtype: torch.dtype, device: torch.device,
               sync: Callable[[], None], cache_bytes: int | None = None,
               bounded_spent_s: float = 0.0, round_s: float | None = None) -> ProbesTimed:
    """The specs' times by key, why the others failed, the ones skipped, and the seconds
    the cost-bounded ones took this round, for the specs in their order.

    A spec with a ``budget_s`` (a cost-bounded probe) is skipped once such probes have
    taken that long: ``bounded_spent_s`` in earlier rounds plus this round's, measured
    (``bounded_s``: this round's), whatever their estimate said. With ``round_s`` any spec
    is skipped, not begun, where it would end past that many seconds of the round: its
    calls estimated from its op's last probe (a first probe of an op, from nothing).

    Specs of one op (``op_id``, at ``batch``), smallest first: where the last one timed,
    scaled by the rows, says a call takes :data:`LONG_CALL_S` or more, its warm-up call is
    skipped (decode's LM head: 1.4 s a call at batch 1024, its warm-up as long).
    """
    times: dict[str, float] = {}
    errors: dict[str, str] = {}
    skipped: list[str] = []
    bounded_s = 0.0
    arguments = _Arguments(dtype, device)
    last: dict[str, tuple[int, float]] = {}  # op id -> (batch, seconds a call)
    round_started = time.perf_counter()
    for spec in specs:
        if spec.budget_s is not None and bounded_spent_s + bounded_s >= spec.budget_s:
            skipped.append(spec.key)
            continue
        op_id, batch = spec.op_id, spec.batch
        before = last.get(op_id) if op_id is not None else None
        call_s = (before[1] * batch / before[0]  # scaled by the rows
                  if before is not None and batch is not None and batch > before[0] else 0.0)
        long_call = call_s >= LONG_CALL_S
        # one timed call after a long one's skipped warm-up, else a warm-up and at least two
        if round_s is not None and (time.perf_counter() - round_started
                                    + call_s * (1 if long_call else 1 + MIN_REPEATS) > round_s):
            skipped.append(spec.key)
            continue
        started = time.perf_counter()
        try:
            times[spec.key] = time_probe(spec, dtype, device, sync, cache_bytes, arguments,
                                         warm_up=not long_call)
            if op_id is not None and batch is not None:
                last[op_id] = (batch, times[spec.key])
        except (RuntimeError, ValueError, MemoryError) as exc:
            errors[spec.key] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        if spec.budget_s is not None:
            bounded_s += time.perf_counter() - started
    return ProbesTimed(times, errors, skipped, bounded_s)
