"""Count an op of a recorded trace from what the profiler recorded about its inputs.

With ``record_shapes=True`` each ``cpu_op`` carries ``Input Dims``, ``Input type`` and (newer
torch) ``Input Strides`` and ``Concrete Inputs`` (the values of non-tensor arguments), one
entry per argument of the op's schema, defaults included. The call is rebuilt on meta
tensors (no memory, no compute), run on the meta device for its outputs, and counted by
:func:`batchscope.profiler.counting.count_call`: the same formula registry and byte rules
as the live counting pass.

What cannot be rebuilt stays uncounted, never 0 FLOPs: ops of other namespaces whose
library is not installed here (``vllm::``, ``_C::``), an argument with no recorded value
and no default, shapes that no overload of the op accepts.
"""

from __future__ import annotations

import ast
import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch

from batchscope.profiler.counting import count_call
from batchscope.records import CountedOp

log = logging.getLogger(__name__)

# ``Input type`` of a tensor argument -> its dtype (c10's names, as the profiler prints them).
DTYPES: dict[str, torch.dtype] = {
    "float": torch.float32,
    "double": torch.float64,
    "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16,
    "long int": torch.int64,
    "long": torch.int64,
    "int": torch.int32,
    "short int": torch.int16,
    "short": torch.int16,
    "signed char": torch.int8,
    "unsigned char": torch.uint8,
    "bool": torch.bool,
    "c10::complex<float>": torch.complex64,
    "c10::complex<double>": torch.complex128,
}
for _name, _attr in (("c10::Float8_e4m3fn", "float8_e4m3fn"),
                     ("c10::Float8_e5m2", "float8_e5m2"),
                     ("c10::Float8_e4m3fnuz", "float8_e4m3fnuz"),
                     ("c10::Float8_e5m2fnuz", "float8_e5m2fnuz")):
    if hasattr(torch, _attr):
        DTYPES[_name] = getattr(torch, _attr)
TENSOR_LIST = "TensorList"


class NotRebuilt(Exception):
    """The recorded call cannot be rebuilt; the message says why."""


@dataclass(frozen=True)
class Recorded:
    """What the profiler recorded about one call (hashable, to count each distinct call once)."""

    name: str  # "aten::addmm"
    dims: tuple[Any, ...]
    types: tuple[str, ...]
    strides: tuple[Any, ...] | None
    concrete: tuple[str, ...] | None
    # The dtype of a tensor list's tensors when no tensor argument says it (the profiler
    # records a list's shapes, not its dtype): the trace's most common float dtype.
    dtype_hint: str = ""

    @classmethod
    def from_event(cls, event: dict[str, Any], dtype_hint: str = "") -> Recorded | None:
        args = event.get("args") or {}
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
            return None
        strides, concrete = args.get("Input Strides"), args.get("Concrete Inputs")
        return cls(
            name=str(event.get("name", "")),
            dims=_frozen(dims),
            types=tuple(str(t) for t in types),
            strides=(_frozen(strides)
                     if isinstance(strides, list) and len(strides) == len(dims) else None),
            concrete=(tuple(str(c) for c in concrete)
                      if isinstance(concrete, list) and len(concrete) == len(dims) else None),
            dtype_hint=dtype_hint,
        )


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _sizes(value: Any) -> list[int] | None:
    if isinstance(value, tuple) and all(isinstance(d, int) and d >= 0 for d in value):
        return list(value)
    return None


def _meta_tensor(dims: Any, strides: Any, dtype: torch.dtype) -> torch.Tensor:
    sizes = _sizes(dims)
    if sizes is None:
        raise NotRebuilt("a tensor argument has no recorded shape")
    stride = _sizes(strides) if strides is not None else None
    if stride is not None and len(stride) == len(sizes):
        return torch.empty_strided(sizes, stride, dtype=dtype, device="meta")
    return torch.empty(sizes, dtype=dtype, device="meta")


def _schema_type(argument: Any) -> str:
    return str(argument.type)


def _is_tensor_type(type_name: str) -> bool:
    return type_name in ("Tensor", "Optional[Tensor]")


def _is_tensor_list_type(type_name: str) -> bool:
    return type_name in ("List[Tensor]", "List[Optional[Tensor]]")


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _value(argument: Any, recorded_type: str, concrete: str | None) -> Any:
    """A non-tensor argument: its recorded value, else its schema default."""
    if concrete not in (None, ""):
        value = _literal(concrete)
        if _schema_type(argument) == "bool" and isinstance(value, int):
            value = bool(value)
        return value
    if recorded_type == "" and _schema_type(argument).startswith("Optional"):
        return None
    if argument.has_default_value():
        return argument.default_value
    raise NotRebuilt(f"the value of its argument {argument.name!r} was not recorded")


def _first_dtype(rec: Recorded) -> torch.dtype | None:
    """The first floating-point dtype among the recorded tensors, else the trace's hint."""
    found = next((DTYPES[t] for t in rec.types if t in DTYPES and DTYPES[t].is_floating_point),
                 None)
    hint = getattr(torch, rec.dtype_hint, None) if rec.dtype_hint else None
    return found or (hint if isinstance(hint, torch.dtype) else None)


def _arguments(schema: Any, rec: Recorded) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments for one overload's schema, or NotRebuilt."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for i, argument in enumerate(schema.arguments):
        recorded_type = rec.types[i]
        type_name = _schema_type(argument)
        strides = rec.strides[i] if rec.strides is not None else None
        concrete = rec.concrete[i] if rec.concrete is not None else None
        if _is_tensor_type(type_name):
            if recorded_type == "" and type_name.startswith("Optional"):
                value: Any = None
            elif recorded_type in DTYPES:
                value = _meta_tensor(rec.dims[i], strides, DTYPES[recorded_type])
            else:
                raise NotRebuilt(
                    f"argument {argument.name!r} is a tensor, recorded as {recorded_type!r}")
        elif _is_tensor_list_type(type_name):
            dtype = _first_dtype(rec)
            shapes = rec.dims[i] if isinstance(rec.dims[i], tuple) else ()
            if recorded_type != TENSOR_LIST or dtype is None or not shapes:
                raise NotRebuilt(
                    f"the tensors of list argument {argument.name!r} were not recorded")
            list_strides = strides if isinstance(strides, tuple) else (None,) * len(shapes)
            value = [_meta_tensor(d, s, dtype) for d, s in zip(shapes, list_strides, strict=False)]
        elif recorded_type in DTYPES and _sizes(rec.dims[i]):
            raise NotRebuilt(f"argument {argument.name!r} is not a tensor, recorded as one")
        else:
            value = _value(argument, recorded_type, concrete)
        if argument.kwarg_only:
            kwargs[argument.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def _overloads(name: str) -> list[torch._ops.OpOverload]:
    namespace, _, op_name = name.partition("::")
    if not op_name:
        return []
    try:
        packet = getattr(getattr(torch.ops, namespace), op_name)
    except (AttributeError, RuntimeError):
        return []
    names = sorted(packet.overloads(), key=lambda o: (o != "default", o != "Tensor", o))
    return [getattr(packet, o) for o in names]


@functools.lru_cache(maxsize=4096)
def count_recorded(rec: Recorded) -> CountedOp | None:
    """The FLOPs and bytes of one recorded call, or None when it cannot be rebuilt."""
    try:
        return _count(rec)
    except NotRebuilt as exc:
        log.debug("%s not counted: %s", rec.name, exc)
        return None


def _count(rec: Recorded) -> CountedOp:
    overloads = [o for o in _overloads(rec.name) if len(o._schema.arguments) == len(rec.types)]
    if not overloads:
        raise NotRebuilt("no overload of this op (in the torch installed here) has its arguments")
    last: Exception | None = None
    for func in overloads:
        try:
            args, kwargs = _arguments(func._schema, rec)
        except NotRebuilt as exc:
            last = exc
            continue
        try:
            out = func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure: try the next overload
            last = exc
            continue
        counted = count_call(func, args, kwargs, out)
        if counted.flops is not None:
            return counted
        last = NotRebuilt("the op has no FLOP formula")
    raise NotRebuilt(str(last))
