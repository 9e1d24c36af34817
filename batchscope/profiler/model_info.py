"""What a model holds, measured the same way by the sweep's worker, its ranks and ``watch``.

``parameter_bytes`` has one meaning wherever a report states it (``ModelInfo.parameter_bytes``):
the bytes of the model's parameters AND buffers, the weights a step reads whatever the batch.

Example:
    >>> import torch
    >>> layer = torch.nn.BatchNorm1d(4)  # 8 parameters, 9 buffer elements (one int64)
    >>> parameter_bytes(layer), parameter_bytes(layer, torch.bfloat16)
    (72, 40)
"""

from __future__ import annotations

import torch


def parameter_bytes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes of ``model``'s parameters and buffers (each shared tensor once).

    Args:
        model: the model.
        dtype: count the floating-point tensors as they will be once cast to it (the
            worker asks before ``model.to(dtype)``, to say what did not fit); None: as
            they are.
    """
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * (dtype.itemsize if dtype is not None and t.is_floating_point()
                            else t.element_size()) for t in tensors)


def parameter_count(model: torch.nn.Module) -> int:
    """Elements of ``model``'s parameters (buffers are not parameters)."""
    return sum(p.numel() for p in model.parameters())
