"""Attention on meta tensors, counted as a CPU (or a GPU) runs it: by its fused kernel.

``F.scaled_dot_product_attention`` picks its kernel by device: on a CPU
``_scaled_dot_product_flash_attention_for_cpu`` (and its backward), on a GPU the flash or
memory-efficient kernel, each of the same FLOPs; on the meta device, which has no kernel
choice, its math path, which materialises the scores (2-7% more bytes in a GPT-2-sized
decode step, more with longer sequences; more FLOPs by softmax and scaling). A model
counted on meta tensors (``--target-gpu``, the meta twins of a decomposition) would so
count another step than the sweep counts on the CPU.

:class:`CpuAttentionChoice` asks the CPU's own choice (``aten._fused_sdp_choice`` on CPU
stand-ins of one row of memory: it reads shapes, dtypes and the last stride only) and,
where it is the fused kernel, calls that kernel on the meta tensors, above autograd, so
that a training step's backward is the fused kernel's backward too, as on the CPU. A call
from inside a Python function that hands itself to torch-function modes
(``F.multi_head_attention_forward``) runs with the mode set aside; the counting mode then
sees the call below autograd and asks :func:`fused_attention` the same.

Example:
    >>> q = torch.empty(2, 4, 16, 8, device="meta")
    >>> with CpuAttentionChoice():
    ...     out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    >>> out.shape
    torch.Size([2, 4, 16, 8])
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

log = logging.getLogger(__name__)

aten = torch.ops.aten
FLASH_ATTENTION = 1  # sdp::SDPBackend::flash_attention, as _fused_sdp_choice returns it
# scaled_dot_product_attention's arguments after query, key, value, in order
_SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS: dict[str, Any] = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False,
                                  "scale": None, "enable_gqa": False}


def cpu_stand_in(value: Any) -> Any:
    """A CPU tensor of a meta tensor's shape and dtype on one row of memory (every dim but
    the last of stride 0); anything else as it is."""
    if not isinstance(value, torch.Tensor) or not value.is_meta:
        return value
    shape = list(value.shape)
    if not shape:
        return torch.empty((), dtype=value.dtype)
    row = torch.empty(shape[-1], dtype=value.dtype)
    return row.as_strided(shape, [0] * (len(shape) - 1) + [1])


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    named = dict(_SDPA_DEFAULTS)
    named.update(zip(_SDPA_ARGS, args[3:], strict=False))
    named.update(kwargs)
    return named


def _fused_on_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  named: dict[str, Any]) -> bool:
    """Whether the CPU build runs these shapes and arguments through its fused kernel."""
    try:
        choice = aten._fused_sdp_choice.default(
            cpu_stand_in(q), cpu_stand_in(k), cpu_stand_in(v), cpu_stand_in(named["attn_mask"]),
            named["dropout_p"], named["is_causal"], scale=named["scale"],
            enable_gqa=named["enable_gqa"])
    except (RuntimeError, ValueError, TypeError) as exc:  # a shape the CPU check refuses
        log.debug("attention kernel choice on CPU stand-ins: %s", exc)
        return False
    return bool(choice == FLASH_ATTENTION)


def _additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """A boolean mask as the CPU kernel takes it: 0 where kept, -inf where masked."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=mask.device)
    minus_inf = torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device)
    return torch.where(mask, zero, minus_inf)


def fused_attention(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``scaled_dot_product_attention(*args, **kwargs)`` on meta tensors through the kernel
    the CPU would choose for them; None where it would take its math path (or the
    arguments are not meta tensors)."""
    if len(args) < 3 or not all(isinstance(t, torch.Tensor) and t.is_meta for t in args[:3]):
        return None
    q, k, v = args[:3]
    named = _arguments(args, kwargs)
    if not _fused_on_cpu(q, k, v, named):
        return None
    mask = _additive_mask(named["attn_mask"], q.dtype)
    out: torch.Tensor = aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, named["dropout_p"], named["is_causal"], attn_mask=mask,
        scale=named["scale"])[0]
    return out


class CpuAttentionChoice(TorchFunctionMode):
    """Runs ``F.scaled_dot_product_attention`` on meta tensors through the kernel the CPU
    would choose for them (see the module's docstring); any other call as it is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            out = fused_attention(args, kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)
