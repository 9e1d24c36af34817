"""One registry of pure per-op formulas: FLOPs, and bytes where the generic rule is wrong.

Formulas read shapes and flags, never tensor values. Matmul, convolution and attention use
:mod:`torch.utils.flop_counter`'s ``flop_registry``; added here are CPU attention, norms,
softmax, losses, pooling, reductions, gathers/scatters, pointwise ops (by
``torch.Tag.pointwise``) and ops known to do no arithmetic (0 FLOPs). An op with no formula
is *uncounted* (``None``). Multiply and add count one FLOP each (m x k by k x n is 2mkn);
per-row work (one rsqrt per row of a norm) is ignored beside per-element work.

Bytes follow the generic rule in :mod:`batchscope.profiler.counting` (each distinct tensor
once per direction, by the elements its view spans: once if only read or only written, twice
if read and written, as ``x`` in ``x.add_(y)``) unless a formula's ``touched`` says an op
reads or writes only part of a tensor: the gathered rows of an embedding table, say.
:func:`reads_destination` says which in-place ops overwrite their destination unread.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter

from batchscope.op_families import Family, family

aten = torch.ops.aten

Args = tuple[Any, ...]
Kwargs = dict[str, Any]
FlopFn = Callable[[Args, Kwargs, Any], int]
"""(args, kwargs, out) -> FLOPs of one call; reads shapes only."""
TouchFn = Callable[[Args, Kwargs, Any], dict[int, int]]
"""(args, kwargs, out) -> {id(tensor): elements the op really touches in it}."""
BytesFn = Callable[[Args, Kwargs, Any], int]
"""(args, kwargs, out) -> bytes."""
Target = torch._ops.OpOverloadPacket | torch._ops.OpOverload

NORM_STATS_FLOPS_PER_ELEMENT = 4  # mean: one add; variance: subtract, square, add
NORM_APPLY_FLOPS_PER_ELEMENT = 2  # subtract the mean, multiply by the inverse std
RMS_STATS_FLOPS_PER_ELEMENT = 2  # mean of squares: square, add (no mean to subtract)
RMS_APPLY_FLOPS_PER_ELEMENT = 1  # multiply by the inverse rms
AFFINE_FLOPS_PER_ELEMENT = 1  # per affine tensor present: multiply by weight, or add bias
NORM_BACKWARD_INPUT_FLOPS_PER_ELEMENT = 10  # x_hat 2, dy*w 1, sums of g, g*x_hat 3, combine 4
RMS_BACKWARD_INPUT_FLOPS_PER_ELEMENT = 7  # x_hat 1, dy*w 1, sum of g*x_hat 2, combine 3
FROZEN_NORM_BACKWARD_INPUT_FLOPS_PER_ELEMENT = 2  # eval-mode batch norm: dy * (w * inv_std)
NORM_BACKWARD_WEIGHT_FLOPS_PER_ELEMENT = 2  # sum of dy * x_hat
NORM_BACKWARD_BIAS_FLOPS_PER_ELEMENT = 1  # sum of dy
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide (log-softmax: subtract the log)
SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT = 4  # dy * y, row sum, subtract, scale
REDUCTION_FLOPS_PER_ELEMENT = 1  # one add (or compare) per input element read
POOL_FLOPS_PER_WINDOW_ELEMENT = 1  # one add (or compare) per element a window reads
MSE_FLOPS_PER_ELEMENT = 3  # subtract, square, add


@dataclass(frozen=True)
class Formula:
    """How to count one op.

    Attributes:
        flops: FLOPs of one call, from the shapes of its arguments and outputs.
        touched: elements really touched in some of its tensors, overriding the generic
            "every element the view spans" count for those tensors only.
        moves_bytes: False for views, metadata and bare allocations: they move 0 bytes.
        family: the op's kernel family (:mod:`batchscope.op_families`: a matmul, a
            convolution), set from its packet's name when it is registered; None for any
            other op and for the generic rules.
        packed_weight_bytes: bytes of model weights the op reads from a non-tensor
            argument (a quantized linear's packed weight), counted as weights.
    """

    flops: FlopFn
    touched: TouchFn | None = None
    moves_bytes: bool = True
    family: Family | None = None
    packed_weight_bytes: BytesFn | None = None


REGISTRY: dict[Target, Formula] = {}
"""Explicit formulas, keyed by overload packet or, where overloads differ, by overload."""


def _formula(target: Target, flops: FlopFn, touched: TouchFn | None = None,
             moves_bytes: bool = True, packed_weight_bytes: BytesFn | None = None) -> Formula:
    """The formula of ``target``, tagged with its packet's family (op_families)."""
    packet = target._overloadpacket if isinstance(target, torch._ops.OpOverload) else target
    return Formula(flops, touched, moves_bytes, family(packet.__name__), packed_weight_bytes)


def register(*targets: Target, touched: TouchFn | None = None, moves_bytes: bool = True,
             packed_weight_bytes: BytesFn | None = None) -> Callable[[FlopFn], FlopFn]:
    """Register the decorated FLOP formula for the aten op objects given (an overload
    packet, or one overload where overloads differ): a misspelt op is an AttributeError at
    import, never a formula silently left out."""

    def deco(flops: FlopFn) -> FlopFn:
        for target in targets:
            if not isinstance(target, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
                raise TypeError(f"formulas are registered against op objects, not {target!r}")
            if target in REGISTRY:
                raise RuntimeError(f"duplicate formula for {target}")
            REGISTRY[target] = _formula(target, flops, touched, moves_bytes,
                                        packed_weight_bytes)
        return flops

    return deco


def numel(x: Any) -> int:
    """Elements of a tensor, or 0 for anything else."""
    return x.numel() if isinstance(x, torch.Tensor) else 0


def first_tensor(x: Any) -> torch.Tensor | None:
    """The first tensor in ``x`` (a tensor, or nested tuples/lists of them)."""
    if isinstance(x, torch.Tensor):
        return x
    for item in x if isinstance(x, (tuple, list)) else ():
        found = first_tensor(item)
        if found is not None:
            return found
    return None


def _zero(args: Args, kwargs: Kwargs, out: Any) -> int:
    return 0


def _out_elements(args: Args, kwargs: Kwargs, out: Any) -> int:
    return numel(first_tensor(out))


def _per_element(flops_per_element: int, arg: int = 0) -> FlopFn:
    """``flops_per_element`` times the elements of the tensor argument at ``arg``."""

    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        return flops_per_element * numel(args[arg])

    return flops


def _affine(*tensors: Any) -> int:
    return AFFINE_FLOPS_PER_ELEMENT * sum(isinstance(t, torch.Tensor) for t in tensors)


# ------------------------------------------------ matmul, conv, attention (torch's own)


def _torch_formula(packet: torch._ops.OpOverloadPacket) -> FlopFn:
    fn = flop_counter.flop_registry[packet]

    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        return int(fn(*args, **kwargs, out_val=out))

    return flops


for _packet in list(flop_counter.flop_registry):
    if isinstance(_packet, torch._ops.OpOverloadPacket):  # not higher-order ops or triton
        REGISTRY[_packet] = _formula(_packet, _torch_formula(_packet))

# CPU (and "overrideable") attention share the flash kernel's arithmetic and its leading
# arguments (query, key, value / grad_out, query, key, value), so torch's flash formulas
# apply as they are: q: [b, h, s_q, d] @ k^T: [b, h, d, s_k], then attn @ v: [b, h, s_k, d_v]
# (backward: the five products that recompute scores and propagate dq, dk, dv).
_FLASH = aten._scaled_dot_product_flash_attention
_FLASH_BACKWARD = aten._scaled_dot_product_flash_attention_backward
for _target, _source in (
    (aten._scaled_dot_product_flash_attention_for_cpu, _FLASH),
    (aten._scaled_dot_product_fused_attention_overrideable, _FLASH),
    (aten._scaled_dot_product_flash_attention_for_cpu_backward, _FLASH_BACKWARD),
    (aten._scaled_dot_product_fused_attention_overrideable_backward, _FLASH_BACKWARD),
):
    REGISTRY[_target] = _formula(_target, _torch_formula(_source))


# mv(mat: [m, n], vec: [n]) -> [m]: 2mn; addmv(bias, mat, vec) the same (bias ignored, as addmm)
register(aten.mv)(_per_element(2, arg=0))
register(aten.addmv)(_per_element(2, arg=1))
register(aten.dot, aten.vdot)(_per_element(2))  # a: [n] . b: [n] -> []: n multiplies, n adds


@register(aten._addmm_activation)
def addmm_activation_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # a: [m, k] @ b: [k, n] -> [m, n], then one activation per output element
    return int(flop_counter.flop_registry[aten.mm](args[1], args[2])) + numel(out)


# ---------------------------------------------------------------------------- norms


def _norm(per_element: int, affine_args: tuple[int, ...]) -> FlopFn:
    """x: [...] (args[0]) normalised: ``per_element`` each, plus the affine tensors present."""

    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        return (per_element + _affine(*(args[i] for i in affine_args))) * numel(args[0])

    return flops


_NORM = NORM_STATS_FLOPS_PER_ELEMENT + NORM_APPLY_FLOPS_PER_ELEMENT
_RMS_NORM = RMS_STATS_FLOPS_PER_ELEMENT + RMS_APPLY_FLOPS_PER_ELEMENT
# native_layer_norm(x, normalized_shape, weight, bias, eps)
register(aten.native_layer_norm)(_norm(_NORM, (2, 3)))
# native_group_norm(x, weight, bias, N, C, HxW, group, eps): per (n, group), affine per channel
register(aten.native_group_norm)(_norm(_NORM, (1, 2)))
# _fused_rms_norm(x, normalized_shape, weight, eps): mean of squares, scale, then weight
register(aten._fused_rms_norm)(_norm(_RMS_NORM, (2,)))


def _batch_norm(training: bool | None) -> FlopFn:
    """Batch norm over x: [n, c, *spatial]; ``training=None`` reads the op's first bool."""

    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        train = training
        if train is None:  # `training` is the first bool argument of every batch-norm schema
            train = next((a for a in args if isinstance(a, bool)), False)
        # training computes the batch statistics; inference applies the running ones
        stats = NORM_STATS_FLOPS_PER_ELEMENT if train else 0
        return (stats + NORM_APPLY_FLOPS_PER_ELEMENT + _affine(args[1], args[2])) * numel(args[0])

    return flops


register(
    aten.native_batch_norm, aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional, aten.cudnn_batch_norm, aten.miopen_batch_norm,
)(_batch_norm(None))
register(aten._native_batch_norm_legit_no_training, aten._batch_norm_no_update)(_batch_norm(False))
register(aten._batch_norm_with_update)(_batch_norm(True))


_NORM_BACKWARD = NORM_BACKWARD_INPUT_FLOPS_PER_ELEMENT


def _norm_backward(x_arg: int, mask_arg: int | None, input_per_element: int | None) -> FlopFn:
    """Norm backward: grad_input [x.shape], grad_weight and grad_bias reduced from [x.shape].

    ``input_per_element=None`` picks training or frozen batch norm by argument 7 (``train``).
    """

    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        mask = list(args[mask_arg]) if mask_arg is not None and len(args) > mask_arg else [True] * 3
        per_input = input_per_element
        if per_input is None:  # batch norm: argument 7 is `train` (batch statistics) or not
            per_input = _NORM_BACKWARD if args[7] else FROZEN_NORM_BACKWARD_INPUT_FLOPS_PER_ELEMENT
        per_element = (
            per_input * mask[0]
            + NORM_BACKWARD_WEIGHT_FLOPS_PER_ELEMENT * mask[1]
            + NORM_BACKWARD_BIAS_FLOPS_PER_ELEMENT * (len(mask) > 2 and mask[2])
        )
        return per_element * numel(args[x_arg])

    return flops


# (grad_out, x, ..., output_mask at mask_arg, ...); cudnn: (x, grad_out, ...), all three grads
register(aten.native_layer_norm_backward)(_norm_backward(1, 7, _NORM_BACKWARD))
register(aten.native_group_norm_backward)(_norm_backward(1, 9, _NORM_BACKWARD))
register(aten._fused_rms_norm_backward)(_norm_backward(1, 5, RMS_BACKWARD_INPUT_FLOPS_PER_ELEMENT))
register(aten.native_batch_norm_backward, aten.batch_norm_backward)(_norm_backward(1, 9, None))
register(aten.cudnn_batch_norm_backward, aten.miopen_batch_norm_backward)(
    _norm_backward(0, None, _NORM_BACKWARD)
)

# -------------------------------------------------------------------- softmax, losses

register(
    aten._softmax, aten._log_softmax, aten._safe_softmax,
)(_per_element(SOFTMAX_FLOPS_PER_ELEMENT))
register(aten._softmax_backward_data, aten._log_softmax_backward_data)(
    _per_element(SOFTMAX_BACKWARD_FLOPS_PER_ELEMENT)
)
# mse_loss(x, target, reduction); mse_loss_backward(grad, x, target, reduction)
register(aten.mse_loss)(_per_element(MSE_FLOPS_PER_ELEMENT, arg=0))
register(aten.mse_loss_backward)(_per_element(MSE_FLOPS_PER_ELEMENT, arg=1))


def _first_touched_like(arg: int) -> TouchFn:
    """args[0] is touched at as many elements as the tensor at ``arg`` has."""

    def touched(args: Args, kwargs: Kwargs, out: Any) -> dict[int, int]:
        return {id(args[0]): numel(args[arg])}

    return touched


# nll_loss_forward(log_probs: [n, classes], target: [n], ...): log_probs read at one class
# per target (n elements, not n * classes), one add per target picked
register(aten.nll_loss_forward, aten.nll_loss2d_forward, touched=_first_touched_like(1))(
    _per_element(1, arg=1)
)
# nll_loss_backward(grad, log_probs, target: [n], ...): one write per target picked
register(aten.nll_loss_backward, aten.nll_loss2d_backward)(_per_element(1, arg=2))

# ------------------------------------------------------------------ pooling, reductions


def _window(kernel_size: Any, n_spatial: int) -> int:
    sizes = [kernel_size] if isinstance(kernel_size, int) else list(kernel_size)
    return math.prod(sizes * n_spatial if len(sizes) == 1 else sizes)


def _pool(n_spatial: int, grad: bool) -> FlopFn:
    """(grad_out, x, kernel_size, ...) for the backward, (x, kernel_size, ...) forward."""

    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        # out (or grad_out): [n, c, *o], each element reading a window of prod(kernel_size)
        outputs = numel(args[0]) if grad else numel(first_tensor(out))
        return POOL_FLOPS_PER_WINDOW_ELEMENT * outputs * _window(args[2 if grad else 1], n_spatial)

    return flops


# max_pool1d/2d/3d and avg_pool1d are composite: they decompose into these.
register(
    aten.max_pool2d_with_indices, aten.mkldnn_max_pool2d, aten.avg_pool2d,
)(_pool(2, grad=False))
register(
    aten.max_pool3d_with_indices, aten.mkldnn_max_pool3d, aten.avg_pool3d,
)(_pool(3, grad=False))
register(aten.avg_pool2d_backward)(_pool(2, grad=True))
register(aten.avg_pool3d_backward)(_pool(3, grad=True))
# grad_out: [n, c, *o]: one add into grad_input per output gradient (max picks one input)
register(
    aten.max_pool2d_with_indices_backward, aten.max_pool3d_with_indices_backward,
    aten.adaptive_max_pool2d_backward, aten.adaptive_max_pool3d_backward,
)(_per_element(1, arg=0))
# grad_input: [n, c, *i]: each input position receives its share of its window once
register(
    aten._adaptive_avg_pool2d_backward, aten._adaptive_avg_pool3d_backward,
)(_per_element(1, arg=1))

REDUCTIONS = (
    aten.sum, aten.nansum, aten.mean, aten.amax, aten.amin, aten.aminmax, aten.max.default,
    aten.max.dim,
    aten.min.default, aten.min.dim, aten.var, aten.std, aten.var_mean, aten.std_mean, aten.prod,
    aten.norm,
    aten.linalg_vector_norm, aten.argmax, aten.argmin, aten.any, aten.all, aten.logsumexp,
    aten.cumsum, aten.cumprod,
    aten.count_nonzero, aten._adaptive_avg_pool2d, aten._adaptive_avg_pool3d,
    aten.adaptive_max_pool2d,
    aten.adaptive_max_pool3d,
)
"""x: [...] -> reduced: one op per input element read (max.other, min.other are pointwise)."""
register(*REDUCTIONS)(_per_element(REDUCTION_FLOPS_PER_ELEMENT, arg=0))

# ------------------------------------------------------------- gathers and scatters


def _slice_elements(table: torch.Tensor, dim: int = 0) -> int:
    """Elements of one index along ``dim``: a row of an embedding table."""
    return table.numel() // table.shape[dim] if table.dim() > 0 and table.shape[dim] else 1


def _embedding_touched(args: Args, kwargs: Kwargs, out: Any) -> dict[int, int]:
    # weight: [vocab, d] read at indices: [...] -> indices.numel() rows of d, not the table;
    # each row once however often it is picked: never more than the whole table
    return {id(args[0]): min(numel(args[1]) * _slice_elements(args[0]), numel(args[0]))}


def _index_select_touched(args: Args, kwargs: Kwargs, out: Any) -> dict[int, int]:
    # table: [..., rows, ...] read at index: [k] along dim -> k slices, at most the table
    return {id(args[0]): min(numel(args[2]) * _slice_elements(args[0], args[1]),
                             numel(args[0]))}


def _index_touched(args: Args, kwargs: Kwargs, out: Any) -> dict[int, int]:
    return {id(args[0]): numel(first_tensor(out))}  # x[indices]: read once per output element


register(aten.embedding, touched=_embedding_touched)(_zero)
register(aten.index_select, touched=_index_select_touched)(_zero)
register(aten.gather, touched=_first_touched_like(2))(_zero)  # (self, dim, index): once per index
register(aten.take, touched=_first_touched_like(1))(_zero)  # (self, index): once per index
register(aten.index.Tensor, aten._unsafe_index.Tensor, touched=_index_touched)(_zero)


@register(aten._embedding_bag, aten._embedding_bag_forward_only, touched=_embedding_touched)
def embedding_bag_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # weight: [vocab, d], indices: [k]: each gathered row of d added into its bag
    return numel(args[1]) * _slice_elements(args[0])


# grad_out: [..., d] accumulated row by row into grad_weight: [vocab, d]
register(aten.embedding_dense_backward)(_per_element(1, arg=0))


def indexed_elements(shape: list[int] | torch.Size, indices: list[Any]) -> int:
    """Elements of ``x[indices]`` for ``x`` of ``shape``, from shapes only.

    Boolean masks count every element they cover (an upper bound: counting the True
    values would read the data).
    """
    consumed, sliced, index_shapes = 0, 1, []
    for idx in indices:
        if idx is None:  # a full slice of this dim
            sliced *= shape[consumed]
            consumed += 1
        elif idx.dtype in (torch.bool, torch.uint8):
            index_shapes.append((idx.numel(),))
            consumed += idx.dim()
        else:
            index_shapes.append(tuple(idx.shape))
            consumed += 1
    picked = math.prod(torch.broadcast_shapes(*index_shapes)) if index_shapes else 1
    return picked * sliced * math.prod(shape[consumed:])


def _index_put_touched(args: Args, kwargs: Kwargs, out: Any) -> dict[int, int]:
    # x[indices] = values writes only the indexed elements of x
    return {id(args[0]): indexed_elements(args[0].shape, list(args[1]))}


@register(aten.index_put_, aten._index_put_impl_, touched=_index_put_touched)
def index_put_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    return indexed_elements(args[0].shape, list(args[1])) if accumulate else 0  # one add each


# (self, dim, index, source): writes source.numel() elements of self, one add each for index_add
register(aten.index_copy_, touched=_first_touched_like(3))(_zero)
register(aten.index_add_, touched=_first_touched_like(3))(_per_element(1, arg=3))
register(aten.index_add)(_per_element(1, arg=3))
# (self, dim, index, src): writes one element of self per index, one add each for scatter_add
register(aten.scatter_, touched=_first_touched_like(2))(_zero)
register(aten.scatter_add_, aten.scatter_reduce_, touched=_first_touched_like(2))(
    _per_element(1, arg=2)
)
register(aten.scatter_add, aten.scatter_reduce)(_per_element(1, arg=2))

# --------------------------------------------------------------------- no arithmetic

DATA_MOVEMENT = (
    aten.copy_, aten.copy, aten.clone, aten._to_copy, aten.cat, aten.stack, aten.index_copy,
    aten.slice_scatter,
    aten.select_scatter, aten.diagonal_scatter, aten.as_strided_scatter, aten.index_put,
    aten.scatter,
    aten.fill, aten.fill_, aten.zero_, aten.zeros, aten.zeros_like, aten.ones, aten.ones_like,
    aten.full, aten.full_like,
    aten.new_zeros, aten.new_ones, aten.new_full, aten.scalar_tensor, aten.arange, aten.linspace,
    aten.constant_pad_nd, aten.reflection_pad1d, aten.reflection_pad2d, aten.replication_pad1d,
    aten.replication_pad2d, aten.repeat, aten.roll, aten.flip, aten.tril, aten.triu, aten.tril_,
    aten.triu_,
    aten.lift_fresh_copy, aten._copy_from, aten._copy_from_and_resize, aten.narrow_copy,
    aten.im2col,
    aten.pixel_shuffle, aten.pixel_unshuffle, aten.channel_shuffle, aten._local_scalar_dense,
    aten.masked_select, aten._foreach_copy_, aten._foreach_zero_, aten.split_with_sizes_copy,
    aten.unbind_copy,
)
"""0 FLOPs; bytes by the generic rule (reads and writes are real traffic)."""
METADATA = (
    aten.detach, aten.detach_, aten.alias, aten.t, aten.t_, aten.lift_fresh, aten._unsafe_view,
    aten._reshape_alias,
    aten._fused_sdp_choice, aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty,
    aten.new_empty_strided, aten.resize_, aten.set_, aten.as_strided_, aten.squeeze_,
    aten.unsqueeze_,
    aten.transpose_, aten.record_stream, aten._assert_async, aten._assert_tensor_metadata,
    aten._assert_scalar, aten.sym_constrain_range, aten.sym_constrain_range_for_size,
    aten.unsafe_split, aten.unsafe_split_with_sizes,
)
"""0 FLOPs and 0 bytes: aliases (the unsafe splits are views their schema does not mark),
shape changes, bare allocations, kernel choices."""
register(*DATA_MOVEMENT)(_zero)
register(*METADATA, moves_bytes=False)(_zero)
register(aten.native_dropout)(_out_elements)  # one multiply by the mask per element

# ------------------------------------------------------------- written destinations

OVERWRITES_DESTINATION = (
    aten.fill_, aten.zero_, aten.copy_, aten._foreach_copy_, aten._foreach_zero_, aten.index_fill_,
    aten.index_copy_, aten.masked_fill_, aten.masked_scatter_, aten.scatter_.src,
    aten.scatter_.value,
    aten.normal_, aten.uniform_, aten.random_, aten.exponential_, aten.geometric_, aten.cauchy_,
    aten.log_normal_,
    aten.bernoulli_,
)
"""In-place ops that write their destination without reading it: every other in-place op
(``add_``, ``mul_``, ``lerp_``, ``addcdiv_``, ``relu_``, ``scatter_add_``...) reads it too."""
ACCUMULATING = (aten.index_put_, aten._index_put_impl_, aten.put_)
"""In-place ops that read their destination only when accumulating into it."""
ACCUMULATE_ARG = 3  # index_put_(self, indices, values, accumulate), put_(self, index, src, acc)
_OVERWRITES: frozenset[Target] = frozenset(OVERWRITES_DESTINATION)
_ACCUMULATES: frozenset[Target] = frozenset(ACCUMULATING)


def _arg(args: Args, i: int, default: Any = None) -> Any:
    return args[i] if len(args) > i else default


@dataclass(frozen=True)
class HiddenWrites:
    """Arguments an op updates in place though its schema does not mark them ``Tensor(a!)``.

    Attributes:
        args: positions of the arguments written (each also read).
        when: position of the bool that must be true for the write (``training``), or None.
    """

    args: tuple[int, ...]
    when: int | None = None


# Batch norms that update running_mean, running_var in training; _native_batch_norm_legit and
# _batch_norm_with_update mark the same arguments (a!) and need no entry.
_BATCH_NORM_STATS = HiddenWrites(args=(3, 4), when=5)  # (x, w, b, mean, var, training, ...)
HIDDEN_WRITES: dict[Target, HiddenWrites] = {
    **dict.fromkeys((aten.native_batch_norm, aten.cudnn_batch_norm, aten.miopen_batch_norm),
                    _BATCH_NORM_STATS),
    aten.batch_norm_update_stats: HiddenWrites(args=(1, 2)),  # (x, mean, var, momentum)
}


def hidden_writes(func: torch._ops.OpOverload, args: Args) -> list[Any]:
    """The arguments ``func`` writes in place without its schema saying so (see above)."""
    writes = HIDDEN_WRITES.get(func) or HIDDEN_WRITES.get(func._overloadpacket)
    if writes is None or (writes.when is not None and not _arg(args, writes.when)):
        return []
    return [args[i] for i in writes.args if i < len(args)]


def reads_destination(func: torch._ops.OpOverload, args: Args, kwargs: Kwargs) -> bool:
    """Whether an op reads the arguments it writes in place (not its ``out=`` arguments).

    ``x.add_(y)`` reads x and writes it back; ``x.zero_()`` and ``x.copy_(y)`` only write
    x; ``x.index_put_(indices, v, accumulate=True)`` reads the elements it adds into.
    """
    packet = func._overloadpacket
    if func in _OVERWRITES or packet in _OVERWRITES:
        return False
    if func in _ACCUMULATES or packet in _ACCUMULATES:
        return bool(_arg(args, ACCUMULATE_ARG, kwargs.get("accumulate", False)))
    return True


# --------------------------------------------------------------------- generic rules

VIEW = Formula(_zero, moves_bytes=False)
"""Views alias their input: no arithmetic, no traffic."""
POINTWISE = Formula(_out_elements)
"""One FLOP per output element."""


def _foreach_elements(args: Args, kwargs: Kwargs, out: Any) -> int:
    # tensor lists [t_0, t_1, ...]: one FLOP per element of each tensor of the first list
    first = args[0]
    return sum(numel(t) for t in first) if isinstance(first, (list, tuple)) else numel(first)


FOREACH = Formula(_foreach_elements)
"""A ``_foreach_`` op over a pointwise (or norm-reducing) base op: one FLOP per element."""


@functools.cache
def _packet_is_pointwise(name: str) -> bool:
    packet = getattr(aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return False
    return any(torch.Tag.pointwise in getattr(packet, ov).tags for ov in packet.overloads())


def explicit_formula(func: torch._ops.OpOverload) -> Formula | None:
    """The formula registered for this overload or its packet, if any."""
    return REGISTRY.get(func) or REGISTRY.get(func._overloadpacket)


def generic_formula(func: torch._ops.OpOverload) -> Formula | None:
    """The formula an op gets from what it is (view, pointwise, foreach), if any."""
    if func.is_view:
        return VIEW
    if torch.Tag.pointwise in func.tags:
        return POINTWISE
    if func.namespace != "aten":
        return None
    name = func._overloadpacket.__name__
    if name.startswith("_foreach_"):
        base = name[len("_foreach_"):].rstrip("_")
        return FOREACH if base == "norm" or _packet_is_pointwise(base) else None
    if name.endswith("_") and not name.startswith("_") and _packet_is_pointwise(name[:-1]):
        return POINTWISE  # in-place form (masked_fill_, gelu_, ...) of a pointwise op
    return None


def formula_for(func: torch._ops.OpOverload) -> Formula | None:
    """The formula that counts ``func``: explicit first, then generic; None if uncounted."""
    return explicit_formula(func) or generic_formula(func)
