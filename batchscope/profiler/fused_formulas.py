"""Formulas of the fused kernels torch has no decomposition of: optimizer steps, RNN and
resampling backwards, quantized and low-bit matmuls, random fills.

Registered into the one registry (:data:`batchscope.profiler.formulas.REGISTRY`) against op
objects when the counter (:mod:`batchscope.profiler.counting`, their one reader) is imported:
this module imports the registry, never the other way round. Each FLOP count per element
is the one batchscope counts for the unfused ops the same step runs elsewhere (a
single-tensor AdamW step: ``mul_``, ``lerp_``, ``mul_``, ``addcmul_``, ``sqrt``, ``div``,
``add_``, ``addcdiv_``: 8 per parameter element), so a fused step and an unfused one count
alike. Bytes follow the generic rule from the op's schema (an optimizer's parameters,
gradients and moments are read and written), except where a weight hides in a packed,
non-tensor argument (:attr:`Formula.packed_weight_bytes`).
"""

from __future__ import annotations

from typing import Any

import torch

from batchscope.profiler.formulas import (
    Args,
    Kwargs,
    first_tensor,
    numel,
    register,
)

aten = torch.ops.aten
quantized = torch.ops.quantized

# Optimizer steps, per parameter element (the unfused single-tensor steps' counts):
ADAM_FLOPS_PER_ELEMENT = 7  # lerp_ m; mul_, addcmul_ v; sqrt, div, add_ denom; addcdiv_ p
DECAY_FLOPS_PER_ELEMENT = 1  # Adam: grad + wd * p; AdamW: p * (1 - lr * wd)
AMSGRAD_FLOPS_PER_ELEMENT = 1  # max of v and its running max
SGD_FLOPS_PER_ELEMENT = 1  # p - lr * g
MOMENTUM_FLOPS_PER_ELEMENT = 2  # buf * momentum + g
NESTEROV_FLOPS_PER_ELEMENT = 1  # g + momentum * buf
ADAGRAD_FLOPS_PER_ELEMENT = 4  # addcmul_ sum; sqrt, add_ std; addcdiv_ p
RANDOM_FLOPS_PER_ELEMENT = 1  # one draw (and a compare, for bernoulli) per element
QUANTIZE_FLOPS_PER_ELEMENT = 3  # dynamic quantization of an activation: range, scale, round
# Taps an interpolation reads per output element (nearest 1; linear 2 per spatial dim).
INTERPOLATION_TAPS = {"nearest": 1, "linear": 2, "bilinear": 4, "bicubic": 16, "trilinear": 8}
# grid_sampler's interpolation_mode: 0 bilinear, 1 nearest, 2 bicubic (4, 1, 16 taps).
GRID_SAMPLER_TAPS = {0: 4, 1: 1, 2: 16}
TAP_BACKWARD_FLOPS = 2  # per tap: multiply the gradient by the tap's weight, add it in
# the grid's gradient per tap: the tap's value times its weight's derivative in x and in y,
# each accumulated
GRID_BACKWARD_FLOPS_PER_TAP = 4
GEMMS_PER_BACKWARD = 2  # the input's gradient and the weight's, each as large as the forward
CELL_BACKWARD_FLOPS_PER_GATE_ELEMENT = 4  # a gate's derivative, chained into the state's


def _kwarg(kwargs: Kwargs, name: str, default: Any = 0) -> Any:
    value = kwargs.get(name, default)
    return default if value is None else value


def _parameters(args: Args) -> int:
    return sum(numel(t) for t in args[0])


def _adam(args: Args, kwargs: Kwargs, out: Any) -> int:
    # (params[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], steps[], *, lr, ...)
    per_element = (ADAM_FLOPS_PER_ELEMENT
                   + DECAY_FLOPS_PER_ELEMENT * bool(_kwarg(kwargs, "weight_decay"))
                   + AMSGRAD_FLOPS_PER_ELEMENT * bool(_kwarg(kwargs, "amsgrad", False)))
    return per_element * _parameters(args)


register(aten._fused_adam_, aten._fused_adamw_)(_adam)


@register(aten._fused_sgd_)
def sgd_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # (params[], grads[], momentum_buffer_list[], *, weight_decay, momentum, lr, ...)
    momentum = bool(_kwarg(kwargs, "momentum"))
    per_element = (SGD_FLOPS_PER_ELEMENT
                   + DECAY_FLOPS_PER_ELEMENT * bool(_kwarg(kwargs, "weight_decay"))
                   + MOMENTUM_FLOPS_PER_ELEMENT * momentum
                   + NESTEROV_FLOPS_PER_ELEMENT * (momentum and _kwarg(kwargs, "nesterov", False)))
    return per_element * _parameters(args)


@register(aten._fused_adagrad_)
def adagrad_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # (params[], grads[], state_sums[], state_steps[], *, lr, lr_decay, weight_decay, ...)
    per_element = (ADAGRAD_FLOPS_PER_ELEMENT
                   + DECAY_FLOPS_PER_ELEMENT * bool(_kwarg(kwargs, "weight_decay")))
    return per_element * _parameters(args)


# ---------------------------------------------------------------- random fills, dropout


def _random(args: Args, kwargs: Kwargs, out: Any) -> int:
    return RANDOM_FLOPS_PER_ELEMENT * numel(first_tensor(out))


register(
    aten.bernoulli_, aten.bernoulli, aten.normal_, aten.uniform_, aten.random_,
    aten.exponential_, aten.geometric_, aten.cauchy_, aten.log_normal_, aten.rand,
    aten.randn, aten.randint, aten.rand_like, aten.randn_like, aten.randint_like,
    aten.randperm,
)(_random)

# ---------------------------------------------------------------- quantized, low-bit GEMMs


def _rows_by_out(args: Args, kwargs: Kwargs, out: Any) -> int:
    # x: [..., k] @ w -> out: [..., n]: 2 * rows * k * n = 2 * x.numel() * n
    result = first_tensor(out)
    if result is None:
        raise ValueError("no output to read n from")
    return 2 * numel(args[0]) * int(result.shape[-1])


# _weight_int8pack_mm(x: [m, k], w: int8 [n, k], scales: [n]); _weight_int4pack_mm(x, w
# packed, group, scales_and_zeros); _int_mm(a: int8 [m, k], b: int8 [k, n]) -> [m, n]
register(aten._weight_int8pack_mm, aten._weight_int4pack_mm,
         aten._weight_int4pack_mm_for_cpu, aten._int_mm)(_rows_by_out)


def _packed_linear_bytes(args: Args, kwargs: Kwargs, out: Any, element_bytes: int) -> int:
    weight, bias = args[1].unpack()
    bias_bytes = numel(bias) * bias.element_size() if isinstance(bias, torch.Tensor) else 0
    return int(weight.numel()) * element_bytes + bias_bytes


def _dynamic_linear(args: Args, kwargs: Kwargs, out: Any) -> int:
    # X: [..., k] quantized on the fly, then X @ W^T: W [n, k] -> [..., n]
    return _rows_by_out(args, kwargs, out) + QUANTIZE_FLOPS_PER_ELEMENT * numel(args[0])


def _fp16_linear(args: Args, kwargs: Kwargs, out: Any) -> int:
    return _rows_by_out(args, kwargs, out)


FP16_BYTES = 2
# quantized::linear_dynamic(X, W_prepack, reduce_range): the weight is int8 in a packed,
# non-tensor argument, read once a call; linear_dynamic_fp16 keeps it in fp16.
register(quantized.linear_dynamic, quantized.linear_relu_dynamic,
         packed_weight_bytes=lambda a, k, o: _packed_linear_bytes(a, k, o, 1))(_dynamic_linear)
register(quantized.linear_dynamic_fp16, quantized.linear_relu_dynamic_fp16,
         packed_weight_bytes=lambda a, k, o: _packed_linear_bytes(a, k, o, FP16_BYTES))(
    _fp16_linear)

# ---------------------------------------------------------------- backward kernels


def _interpolation_backward(taps: int) -> Any:
    def flops(args: Args, kwargs: Kwargs, out: Any) -> int:
        # grad_out: [n, c, *out_size]: each element spread over the taps it was read from
        return TAP_BACKWARD_FLOPS * taps * numel(args[0])

    return flops


register(aten.upsample_nearest1d_backward, aten.upsample_nearest2d_backward,
         aten.upsample_nearest3d_backward, aten._upsample_nearest_exact1d_backward,
         aten._upsample_nearest_exact2d_backward, aten._upsample_nearest_exact3d_backward,
         )(_interpolation_backward(INTERPOLATION_TAPS["nearest"]))
register(aten.upsample_linear1d_backward)(_interpolation_backward(INTERPOLATION_TAPS["linear"]))
register(aten.upsample_bilinear2d_backward, aten._upsample_bilinear2d_aa_backward)(
    _interpolation_backward(INTERPOLATION_TAPS["bilinear"]))
register(aten.upsample_bicubic2d_backward, aten._upsample_bicubic2d_aa_backward)(
    _interpolation_backward(INTERPOLATION_TAPS["bicubic"]))
register(aten.upsample_trilinear3d_backward)(
    _interpolation_backward(INTERPOLATION_TAPS["trilinear"]))


@register(aten.grid_sampler_2d_backward, aten.grid_sampler_3d_backward)
def grid_sampler_backward_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # (grad_out: [n, c, *out], input, grid, interpolation_mode, padding, align, output_mask)
    taps = GRID_SAMPLER_TAPS.get(args[3], GRID_SAMPLER_TAPS[0])
    mask = list(args[6]) if len(args) > 6 else [True, True]
    per_element = (TAP_BACKWARD_FLOPS * mask[0] + GRID_BACKWARD_FLOPS_PER_TAP * mask[1]) * taps
    return per_element * numel(args[0])


@register(aten._embedding_bag_backward, aten._embedding_bag_dense_backward)
def embedding_bag_backward_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # grad: [bags, d], indices: [k]: each gathered row's gradient added into its table row
    grad, indices = args[0], args[1]
    return numel(indices) * (grad.shape[-1] if grad.dim() else 1)


def _rnn_workspace(args: Args, kwargs: Kwargs, out: Any) -> dict[int, int]:
    # workspace (the last argument): oneDNN's copy of the forward's gates, whose bytes the
    # forward's parts (counted step by step) already wrote; a meta run has none to read
    workspace = args[-1] if args else kwargs.get("workspace")
    return {id(workspace): 0} if isinstance(workspace, torch.Tensor) else {}


@register(aten.mkldnn_rnn_layer_backward, touched=_rnn_workspace)
def rnn_layer_backward_flops(args: Args, kwargs: Kwargs, out: Any) -> int:
    # (input: [t, b, i], w_ih: [g*h, i], w_hh: [g*h, h], ..., mode at 14): the forward's two
    # GEMMs x @ w_ih^T, h @ w_hh^T (2 * t*b * g*h * (i + h)) twice over (the gradients of
    # the inputs and of the weights), and each gate's derivative per element
    x, w_ih, w_hh = args[0], args[1], args[2]
    steps_rows = numel(x) // int(x.shape[-1])
    gate_elements = steps_rows * int(w_ih.shape[0])
    gemm = 2 * gate_elements * int(w_ih.shape[1] + w_hh.shape[1])
    return GEMMS_PER_BACKWARD * gemm + CELL_BACKWARD_FLOPS_PER_GATE_ELEMENT * gate_elements

