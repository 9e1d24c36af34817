"""The counting pass: one :class:`CountedOp` per aten op call of one real step.

A ``TorchDispatchMode`` sees every aten op below autograd, runs it, and records its FLOPs
(from :mod:`batchscope.profiler.formulas`) and the bytes of the distinct tensors it read and
wrote, split by where their storage comes from: the model's weights, the state
``make_inputs`` built (a KV cache, the input batch) or activations. The op's schema says
which tensors it writes: a tensor it reads and writes (``x`` in ``x.add_(y)``, the moments
of an AdamW step) counts twice, once as a read and once as a write.

Composite ops (``aten.linear``, ``aten.matmul``, ``aten.scaled_dot_product_attention``,
...) reach the mode whole under ``torch.inference_mode()``; the mode runs their C++
composite kernel with itself active, so it records the ops they are made of (``t`` and
``addmm``; ``_scaled_dot_product_flash_attention_for_cpu``), the same leaf ops that
``torch.profiler`` records and that autograd would have produced with grad enabled.

An op with no formula is counted by its parts (:mod:`batchscope.profiler.decompositions`):
its decomposition runs on meta twins of its arguments under a mode of its own, so nothing
runs twice and the op stays one record (the profiler's one event); its weights and state
stay weights and state. Every front end counts a model's step through
:func:`count_model_step` (or :func:`counting_model`), which says what its weights and state
are; on meta tensors (``--target-gpu``) attention and RNNs run as the CPU would run them
(:mod:`batchscope.profiler.meta_attention`, :mod:`batchscope.profiler.meta_rnn`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.hooks import RemovableHandle

from batchscope.op_families import ARGS_PROBED, REPLAYED_OPS, op_name
from batchscope.profiler import fused_formulas  # noqa: F401  (registers the fused kernels' formulas)
from batchscope.profiler.decompositions import Expansion, expansion_for
from batchscope.profiler.formulas import (
    Formula,
    formula_for,
    hidden_writes,
    reads_destination,
)
from batchscope.profiler.meta_attention import CpuAttentionChoice, fused_attention
from batchscope.profiler.meta_rnn import CpuRnnPath
from batchscope.profiler.probe import tensor_slots
from batchscope.profiler.training import persistent_tensors
from batchscope.records import ByteSplit, CountedOp

__all__ = ["count_call", "count_model_step", "count_step", "counting", "counting_model"]

log = logging.getLogger(__name__)

_ViewKey = tuple[int, int, tuple[int, ...], tuple[int, ...]]
"""(storage data pointer, offset, shape, strides): one view of one storage."""
_NO_STORAGE = -1  # the "storage" of sparse, nested, ... tensors, keyed by id instead

_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd
# Device type -> dispatch key of its own kernels (an op may be composite on one backend only).
_KEY_NAMES = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "meta": "Meta"}
_BACKEND_KEYS = {
    device: getattr(torch._C.DispatchKey, name)
    for device, name in _KEY_NAMES.items()
    if hasattr(torch._C.DispatchKey, name)
}
# Queries a tensor subclass may route through the mode; they are not ops of the model.
_PASS_THROUGH = {
    torch.ops.aten.is_contiguous.default,
    torch.ops.aten.is_contiguous.memory_format,
    torch.ops.aten.is_strides_like_format.default,
    torch.ops.aten.is_non_overlapping_and_dense.default,
    torch.ops.aten.size.default,
    torch.ops.aten.sym_size.default,
    torch.ops.aten.stride.default,
    torch.ops.aten.sym_stride.default,
    torch.ops.aten.storage_offset.default,
    torch.ops.aten.sym_storage_offset.default,
    torch.ops.aten.numel.default,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.dim.default,
    torch.ops.prim.layout.default,
}


# Ops whose non-tensor arguments are recorded (CountedOp.call_args): the kernel-probed ops
# (profiler/probe.py) that need more than their tensors' shapes to be called again.
# nn.Conv1d/2d/3d and the transposed ones all reach the counting mode as ``convolution``.
_CALL_ARGS_RECORDED = ARGS_PROBED


def _plain(value: Any) -> Any:
    """``value`` as JSON-safe ints, bools, finite floats, strings and lists of them (a
    SymInt as its int).

    Raises:
        TypeError: anything else (a dtype, a device, a symbolic size with no value).
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, torch.SymInt)):
        return int(value)
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    raise TypeError(f"{type(value).__name__} is not recorded")


_REQUIRED = object()  # a schema argument without a default


@functools.cache
def _non_tensor_arguments(func: torch._ops.OpOverload) -> tuple[tuple[int, str, Any], ...]:
    """(position, name, default or :data:`_REQUIRED`) of each non-tensor argument."""
    return tuple((i, arg.name, arg.default_value if arg.has_default_value() else _REQUIRED)
                 for i, arg in enumerate(func._schema.arguments)
                 if "Tensor" not in str(arg.type))


@functools.cache
def _tensor_slots(func: torch._ops.OpOverload) -> int | None:
    return tensor_slots(func._schema)


def _replayable(func: torch._ops.OpOverload, inputs: list[torch.Tensor]) -> bool:
    """Whether a probe can call ``func`` again from its tensors' shapes: one tensor in every
    tensor slot (not a Python number in one, as ``x * 0.5`` passes, nor an optional one
    left None, as a batch norm without affine weights does)."""
    return _tensor_slots(func) == len(inputs)


def _call_args(func: torch._ops.OpOverload, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> list[Any] | None:
    """The non-tensor arguments of a call in schema order, defaults filled in; None where
    one is not plain ints and bools."""
    values = []
    for i, name, default in _non_tensor_arguments(func):
        value = args[i] if i < len(args) else kwargs.get(name, default)
        if value is _REQUIRED:
            return None
        try:
            values.append(_plain(value))
        except (TypeError, RuntimeError):  # RuntimeError: a SymInt with no value
            return None
    return values


@dataclass(frozen=True)
class _Signature:
    """What an overload's schema says about its tensors, read once (reading it costs ~16 us)."""

    arguments: tuple[tuple[str, bool, bool], ...]
    """(name, written, an ``out=`` argument) of each argument, in order."""
    fresh_returns: tuple[bool, ...]
    """Whether each return is a new tensor, not an alias of an argument."""


@functools.cache
def _signature(func: torch._ops.OpOverload) -> _Signature:
    schema = func._schema
    return _Signature(
        arguments=tuple(
            (arg.name, arg.alias_info is not None and arg.alias_info.is_write, arg.is_out)
            for arg in schema.arguments
        ),
        fresh_returns=tuple(ret.alias_info is None for ret in schema.returns),
    )


@dataclass(frozen=True)
class _Plan:
    """How the mode treats one overload on one device type, decided once."""

    decompose: bool
    formula: Formula | None
    signature: _Signature
    expansion: Expansion | None = None
    """Counts an op with no formula by its parts (:mod:`.decompositions`), on meta twins."""


def _has_backend_kernel(func: torch._ops.OpOverload, device_type: str) -> bool:
    key = _BACKEND_KEYS.get(device_type)
    return key is not None and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


def _plan(func: torch._ops.OpOverload, device_type: str) -> _Plan:
    """Decompose what eager dispatch decomposes, otherwise count with a formula.

    An op is decomposed when it has a C++ CompositeImplicitAutograd kernel and no kernel of
    its own for the device (``linear``, ``matmul``, ``scaled_dot_product_attention``,
    ``max_pool2d``), never by a Python decomposition alone: ``native_batch_norm`` has one
    (into ``_native_batch_norm_legit_no_training``) but runs whole and is profiled whole.
    """
    try:
        composite = torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _COMPOSITE)
    except RuntimeError:  # a TorchScript-only overload
        composite = False
    if composite and not _has_backend_kernel(func, device_type):
        return _Plan(True, None, _signature(func))
    return _counted_plan(func)


def _counted_plan(func: torch._ops.OpOverload) -> _Plan:
    """Count ``func`` whole: by its formula, else by its parts (a decomposition)."""
    formula = formula_for(func)
    return _Plan(False, formula, _signature(func),
                 expansion_for(func) if formula is None else None)


def _decompose(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run the C++ composite kernel (what eager dispatch runs), not a Python decomposition.

    ``func.decompose`` prefers Python decompositions registered by ``torch._decomp`` (for
    ``matmul`` these end in ``view`` where eager ends in ``_unsafe_view``), so the C++
    kernel is called directly when this torch exposes it.
    """
    run_kernel = getattr(func, "_op_dk", None)
    if run_kernel is not None:
        return run_kernel(_COMPOSITE, *args, **kwargs)
    return func.decompose(*args, **kwargs)


_SDPA = torch.ops.aten.scaled_dot_product_attention.default


def _attention_as_cpu(func: torch._ops.OpOverload, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    """``scaled_dot_product_attention`` on meta tensors by the kernel a CPU runs for it
    (meta_attention.py); None for any other op, or where the CPU runs its math path too."""
    return fused_attention(args, kwargs) if func is _SDPA else None


def _first_float_dtype(*groups: list[torch.Tensor]) -> str:
    """Name of the first floating-point dtype ("float32") among the tensors, or ""."""
    for group in groups:
        for t in group:
            if t.is_floating_point():
                return str(t.dtype).removeprefix("torch.")
    return ""


def _distinct_elements(t: torch.Tensor) -> int:
    """Elements a view addresses: sizes of its non-broadcast (stride != 0) dims."""
    if t.numel() == 0:
        return 0
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride != 0:
            n *= size
    return n


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in an argument or return value (a tensor, a list of them, or neither)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):  # Tensor[], Tensor?[]: schemas nest no deeper
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


def _reads_and_writes(
    func: torch._ops.OpOverload,
    signature: _Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    out: Any,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The tensors an op reads and those it writes, from its schema.

    An argument marked written (``Tensor(a!)``: an in-place ``self``, an ``out=``) is
    written, and read too unless it is an ``out=`` or the op overwrites it (``fill_``,
    ``zero_``, ``copy_``: :func:`~batchscope.profiler.formulas.reads_destination`); other
    arguments are read, and also written where the schema hides it (batch norm's running
    statistics). A return is written unless it aliases an argument (``Tensor(a!)``, the
    written argument itself; ``Tensor(a)``, an alias that moves nothing).
    """
    reads_written = reads_destination(func, args, kwargs)
    reads: list[torch.Tensor] = []
    writes: list[torch.Tensor] = []
    for i, (name, written, is_out) in enumerate(signature.arguments):
        tensors = _tensors(args[i] if i < len(args) else kwargs.get(name))
        if written:
            writes += tensors
        if not written or (reads_written and not is_out):
            reads += tensors
    writes += _tensors(hidden_writes(func, args))  # batch norm's running stats
    returned = out if len(signature.fresh_returns) > 1 else (out,)
    for fresh, value in zip(signature.fresh_returns, returned, strict=False):
        if fresh:
            writes += _tensors(value)
    return reads, writes


def _view_key(t: torch.Tensor) -> _ViewKey:
    """What makes two tensors the same bytes: the same view of the same storage."""
    try:
        return (_storage_id(t), int(t.storage_offset()), tuple(t.shape), t.stride())
    except (RuntimeError, NotImplementedError):  # sparse, nested, ... tensors
        return (_NO_STORAGE, id(t), (), ())


def _passes(
    reads: list[torch.Tensor], writes: list[torch.Tensor]
) -> dict[_ViewKey, tuple[torch.Tensor, int]]:
    """Each distinct view: its first tensor and 1 (read or written) or 2 (read and written)."""
    passes: dict[_ViewKey, tuple[torch.Tensor, int]] = {}
    for group in (reads, writes):
        distinct: dict[_ViewKey, torch.Tensor] = {}
        for t in group:
            distinct.setdefault(_view_key(t), t)
        for key, t in distinct.items():
            first, n = passes.get(key, (t, 0))
            passes[key] = (first, n + 1)
    return passes


class _ModuleTracker:
    """Names the innermost module of ``root`` that is running, forward or backward.

    Forward: global pre/post hooks push and pop module paths. Backward (as in
    ``torch.utils.module_tracker.ModuleTracker``): a module is entered when the gradients of
    its outputs are ready and left when those of its inputs are; all are cleared when the
    backward pass ends. The innermost is the deepest path active, the latest on a tie.
    """

    def __init__(self, root: torch.nn.Module) -> None:
        self._names = {id(m): name for name, m in root.named_modules()}
        self._active: list[tuple[int, str]] = []  # (depth, path)
        self._handles: list[RemovableHandle] = []
        self._callback_queued = False

    def current(self) -> str:
        if not self._active:
            return ""
        return max(reversed(self._active), key=lambda entry: entry[0])[1]

    def _enter(self, name: str) -> None:
        self._active.append((name.count(".") + 1 if name else 0, name))

    def _leave(self, name: str) -> None:
        for i in range(len(self._active) - 1, -1, -1):
            if self._active[i][1] == name:
                del self._active[i]
                return

    def _backward_enter(self, name: str) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            if not self._callback_queued:
                self._callback_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
            self._enter(name)

        return hook

    def _backward_done(self) -> None:
        self._active.clear()
        self._callback_queued = False

    def _grad_hook(self, tensors: Any, fn: Callable[..., None]) -> None:
        flat, _ = tree_flatten(tensors)
        needing = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
        if needing:
            self._handles.append(register_multi_grad_hook(needing, fn))

    def _pre(self, module: torch.nn.Module, args: Any) -> None:
        name = self._names.get(id(module))
        if name is not None:
            self._enter(name)
            self._grad_hook(args, lambda *_: self._leave(name))

    def _post(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        name = self._names.get(id(module))
        if name is not None:
            self._leave(name)
            self._grad_hook(output, self._backward_enter(name))

    def __enter__(self) -> _ModuleTracker:
        self._handles.append(register_module_forward_pre_hook(self._pre))
        self._handles.append(register_module_forward_hook(self._post, always_call=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._active.clear()


# A decomposition's parts may need decomposing in turn; past this depth an op is uncounted
# (a decomposition that led back to its own op would otherwise never end).
MAX_EXPANSION_DEPTH = 4


class _MetaTwins:
    """Meta tensors standing for real ones: the same dtype, shape, strides and offset, on
    one meta storage per real storage (views of one storage stay views of one), with the
    storages of weights and state known as such."""

    def __init__(self, weights: set[int], state: set[int]) -> None:
        self._real_weights, self._real_state = weights, state
        self.weights, self.state = set(weights), set(state)
        self._storages: dict[int, torch.UntypedStorage] = {}
        self._memo: dict[int, torch.Tensor] = {}

    def of(self, value: Any) -> Any:
        """``value`` (nested lists, tuples and dicts) with each tensor replaced by its twin."""
        if isinstance(value, torch.Tensor):
            return self._twin(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.of(v) for v in value)
        if isinstance(value, dict):
            return {k: self.of(v) for k, v in value.items()}
        return value

    def _twin(self, t: torch.Tensor) -> torch.Tensor:
        if t.is_meta:  # counted on meta already (--target-gpu, a recorded trace)
            return t
        twin = self._memo.get(id(t))
        if twin is None:
            real = _storage_id(t)
            storage = self._storages.get(real)
            if storage is None:
                size = t.untyped_storage().nbytes()
                storage = torch.empty(size, dtype=torch.uint8, device="meta").untyped_storage()
                self._storages[real] = storage
                if real in self._real_weights:
                    self.weights.add(storage._cdata)
                elif real in self._real_state:
                    self.state.add(storage._cdata)
            twin = torch.empty(0, dtype=t.dtype, device="meta").set_(
                storage, t.storage_offset(), t.shape, t.stride())
            self._memo[id(t)] = twin
        return twin


class _CountingMode(TorchDispatchMode):
    """Records a :class:`CountedOp` for every aten op that runs under it."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._dynamo.disable, which imports
        # torch._dynamo on the first op: ~1 s of a sweep on a 2-core CPU. The wrapper only
        # keeps torch.compile from tracing the mode, and Dynamo already skips every frame
        # while a non-infra dispatch mode is active, so leave it off.
        return False

    def __init__(
        self, weight_storages: set[int], state_storages: set[int],
        modules: _ModuleTracker | None, depth: int = 0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # TorchDispatchMode's is unannotated
        self.ops: list[CountedOp] = []
        self._weights = weight_storages
        self._state = state_storages
        self._modules = modules
        self._depth = depth  # decompositions this mode counts inside (0: the step's own)
        self._plans: dict[tuple[torch._ops.OpOverload, str], _Plan] = {}

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func in _PASS_THROUGH or not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        if func.namespace == "profiler":  # record_function markers, not ops
            return func(*args, **kwargs)
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        device_type = inputs[0].device.type if inputs else "cpu"
        plan = self._plans.get((func, device_type))
        if plan is None:
            plan = self._plans[(func, device_type)] = _plan(func, device_type)
        if plan.decompose:
            with self:
                out = _attention_as_cpu(func, args, kwargs)
                if out is None:
                    out = _decompose(func, args, kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        self.ops.append(self._record(func, plan, args, kwargs, inputs, out))
        return out

    def _record(
        self,
        func: torch._ops.OpOverload,
        plan: _Plan,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        inputs: list[torch.Tensor],
        out: Any,
    ) -> CountedOp:
        formula = plan.formula
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        flops: int | None = None
        touched: dict[int, int] = {}
        parts: ByteSplit | None = None
        packed = 0
        if formula is not None:
            try:
                flops = formula.flops(args, kwargs, out)
                if formula.touched is not None:
                    touched = formula.touched(args, kwargs, out)
                if formula.packed_weight_bytes is not None:
                    packed = formula.packed_weight_bytes(args, kwargs, out)
            except Exception as exc:  # noqa: BLE001 - a formula must never break the user's step
                log.debug("formula for %s failed: %s", func, exc)
                flops, touched = None, {}
        elif plan.expansion is not None:
            flops, parts = self._by_parts(func, plan.expansion, args, kwargs)
        # A collective's tensors go to other ranks, not through this device's memory roof:
        # what DDP all-reduces is batches[].allreduce_bytes_per_step, not step bytes.
        moves = (formula is None or formula.moves_bytes) and func.namespace != "c10d"
        split = ByteSplit()
        if parts is not None:
            split = parts
        elif moves:
            reads, writes = _reads_and_writes(func, plan.signature, args, kwargs, out)
            split = self._bytes(reads, writes, touched)
            split.weights += packed  # a quantized linear's packed weight
        name = op_name(func.namespace, func._overloadpacket.__name__)  # c10d::scatter_
        return CountedOp(
            name=name,
            input_shapes=[list(t.shape) for t in inputs],
            dtype=_first_float_dtype(inputs, outputs),
            flops=flops,
            bytes=split,
            module=self._modules.current() if self._modules is not None else "",
            call_args=(_call_args(func, args, kwargs) if name in _CALL_ARGS_RECORDED and (
                name not in REPLAYED_OPS or _replayable(func, inputs)) else None),
        )

    def _by_parts(self, func: torch._ops.OpOverload, expansion: Expansion,
                  args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[int | None, ByteSplit | None]:
        """FLOPs of ``func`` and, for a fused path (``bytes_of_parts``), its bytes: what its
        decomposition counts, run on meta twins of its arguments under a mode of its own
        (nothing runs twice). (None, None) where the decomposition cannot run there, and
        None FLOPs where a part has no count of its own."""
        if self._depth >= MAX_EXPANSION_DEPTH:
            return None, None
        twins = _MetaTwins(self._weights, self._state)
        try:
            twin_args, twin_kwargs = twins.of(args), twins.of(kwargs)
            mode = _CountingMode(twins.weights, twins.state, None, self._depth + 1)
            with torch.no_grad(), CpuAttentionChoice(), mode:
                expansion.run(*twin_args, **twin_kwargs)
        except Exception as exc:  # noqa: BLE001 - a hole is reported, never the user's error
            log.debug("decomposition of %s failed on meta tensors: %s", func, exc)
            return None, None
        flops = [op.flops for op in mode.ops]
        total = None if any(f is None for f in flops) else sum(f for f in flops if f is not None)
        if not expansion.bytes_of_parts:
            return total, None
        split = ByteSplit()
        for op in mode.ops:
            split = split + op.bytes
        return total, split

    def _bytes(
        self, reads: list[torch.Tensor], writes: list[torch.Tensor], touched: dict[int, int]
    ) -> ByteSplit:
        """Bytes of the distinct tensors read and written, split by where their storage lives.

        A tensor only read or only written counts once; one read and written counts twice,
        both times in its own kind (the weights an optimizer updates are weights twice).
        """
        split = ByteSplit()
        for (storage, *_), (t, passes) in _passes(reads, writes).items():
            spanned = _distinct_elements(t) if storage != _NO_STORAGE else t.numel()
            n_bytes = passes * touched.get(id(t), spanned) * t.element_size()
            if storage in self._weights:
                split.weights += n_bytes
            elif storage in self._state:
                split.state += n_bytes
            else:
                split.activations += n_bytes
        return split


def count_call(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
               out: Any) -> CountedOp:
    """Count one call from its arguments and result without running it: the same formulas
    and byte rules as :func:`count_step`, for an op of a recorded trace rebuilt on meta
    tensors. No storage is known, so its bytes are ``unsplit``.
    """
    inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
    plan = _counted_plan(func)
    counted = _CountingMode(set(), set(), None)._record(func, plan, args, kwargs, inputs, out)
    split = counted.bytes
    counted.bytes = ByteSplit(unsplit=split.total)
    return counted


def _storage_id(t: torch.Tensor) -> int:
    """What tells one storage from another: its data pointer; on the meta device (a model
    counted from shapes alone, a recorded op rebuilt) the storage object's own address,
    shared by its views as a data pointer is."""
    storage = t.untyped_storage()
    return storage._cdata if t.is_meta else storage.data_ptr()


def _storages(tensors: Iterable[Any]) -> set[int]:
    """Ids (:func:`_storage_id`) of the non-empty storages of the tensors in a nested
    structure."""
    nested = isinstance(tensors, (torch.Tensor, dict, list, tuple))
    flat, _ = tree_flatten(tensors if nested else list(tensors))
    ptrs: set[int] = set()
    for t in flat:
        if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() > 0 \
                and (t.is_meta or t.untyped_storage().data_ptr()):
            ptrs.add(_storage_id(t))
    return ptrs


def count_step(
    step: Callable[[], Any],
    *,
    weights: Iterable[torch.Tensor],
    state: Iterable[torch.Tensor],
    root: torch.nn.Module | None = None,
) -> list[CountedOp]:
    """Run `step()` once under the counting mode and return one CountedOp per aten op call,
    in execution order.

    Works inside ``torch.inference_mode()`` and with grad enabled (a training step that
    runs forward, backward and the optimizer). Ops without a formula get ``flops=None``.

    Args:
        step: one step of the user's model, called once with no arguments.
        weights: the model's parameters and buffers; bytes in their storages count as
            ``weights``.
        state: the tensors ``make_inputs`` built (nested lists, tuples and dicts are
            flattened); bytes in their storages count as ``state``, including bytes an op
            writes into them (a KV-cache update).
        root: the model; names ``CountedOp.module`` by the path of the innermost of its
            submodules an op ran under ("blocks.3.attn.qkv"; "" at top level or without it).

    Returns:
        The counted ops, in execution order.

    Example:
        >>> model = torch.nn.Linear(64, 32)
        >>> x = torch.randn(8, 64)
        >>> with torch.inference_mode():
        ...     ops = count_step(lambda: model(x), weights=model.parameters(), state=[x])
        >>> [op.name for op in ops], ops[-1].flops  # 2 * 8 * 64 * 32
        (['t', 'addmm'], 32768)
    """
    with counting(weights=weights, state=state, root=root) as session:
        step()
    return session.ops


class CountingSession:
    """What :func:`counting` records; ``add_state`` marks more tensors as state mid-way."""

    def __init__(self, mode: _CountingMode) -> None:
        self._mode = mode

    @property
    def ops(self) -> list[CountedOp]:
        return self._mode.ops

    def add_state(self, tensors: Iterable[Any]) -> None:
        """Count these tensors' storages as state from now on (inputs seen mid-step)."""
        self._mode._state |= _storages(tensors) - self._mode._weights


@contextlib.contextmanager
def counting(*, weights: Iterable[torch.Tensor], state: Iterable[Any],
             root: torch.nn.Module | None = None) -> Iterator[CountingSession]:
    """Count every aten op run inside the ``with`` block (see :func:`count_step`).

    For callers that cannot hand over one step as a callable, such as
    :class:`batchscope.watch`, which counts the user's own loop between two ``step()`` calls.
    """
    weights, state = list(weights), list(tree_flatten(state)[0]) \
        if isinstance(state, (torch.Tensor, dict, list, tuple)) else list(state)
    weight_storages = _storages(weights)
    state_storages = _storages(state) - weight_storages
    tracker = _ModuleTracker(root) if root is not None else None
    mode = _CountingMode(weight_storages, state_storages, tracker)
    # A model on the meta device runs its attention and its RNNs as the CPU would
    # (meta_attention.py, meta_rnn.py): --target-gpu counts what the sweep counts.
    on_meta = any(isinstance(t, torch.Tensor) and t.is_meta for t in [*weights, *state])
    with contextlib.ExitStack() as stack:
        if tracker is not None:
            stack.enter_context(tracker)
        if on_meta:
            stack.enter_context(CpuAttentionChoice())
            stack.enter_context(CpuRnnPath())
        stack.enter_context(mode)
        yield CountingSession(mode)


@contextlib.contextmanager
def counting_model(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                   inputs: Any, root: torch.nn.Module | None = None
                   ) -> Iterator[CountingSession]:
    """Count a model's step as every front end counts it (the sweep, its ranks, ``watch``
    and the trainer callbacks, ``--target-gpu``): the model's parameters, buffers,
    gradients and optimizer state are its weights, ``inputs`` its state, ``root`` (the
    model unless given: a compiled model's eager module) names the modules.
    """
    with counting(weights=list(persistent_tensors(model, optimizer)), state=inputs,
                  root=root if root is not None else model) as session:
        yield session


def count_model_step(step: Callable[[], Any], model: torch.nn.Module,
                     optimizer: torch.optim.Optimizer | None, inputs: Any,
                     root: torch.nn.Module | None = None) -> list[CountedOp]:
    """Run ``step()`` once under :func:`counting_model` and return its counted ops."""
    with counting_model(model, optimizer, inputs, root) as session:
        step()
    return session.ops
