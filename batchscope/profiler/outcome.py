"""Turn an exception raised by a step into the status of its batch size."""

from __future__ import annotations

import torch

from batchscope.records import Status

# Messages that mean "the memory ran out" although the exception is a plain RuntimeError.
_OOM_MARKERS = (
    ("out of memory", ""),
    ("can't allocate memory", "host OOM: "),  # Linux DefaultCPUAllocator
    ("not enough memory", "host OOM: "),  # Windows DefaultCPUAllocator
    ("CUBLAS_STATUS_ALLOC_FAILED", "OOM-like (cuBLAS could not allocate its workspace): "),
    ("CUDNN_STATUS_NOT_SUPPORTED", "OOM-like (cuDNN found no algorithm that fits, usually "
                                   "for lack of memory): "),
)
# CUDA failures that are not about memory and must never be read as memory-bound.
_DEVICE_MARKERS = (
    "illegal memory access",
    "invalid configuration argument",
    "too many resources requested for launch",
    "device-side assert",
    "unspecified launch failure",
    "CUDA error",
)


def classify_exception(exc: BaseException) -> tuple[Status, str]:
    """Status of a failed step and a label to put before the exception text."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return Status.OOM, "" if isinstance(exc, torch.OutOfMemoryError) else "host OOM: "
    text = str(exc)
    for marker, label in _OOM_MARKERS:
        if marker in text:
            return Status.OOM, label
    for marker in _DEVICE_MARKERS:
        if marker in text:
            return Status.DEVICE_ERROR, "device error: "
    return Status.MODEL_ERROR, ""


# Failures of the first step that mean the model and its inputs disagree on device or dtype:
# a contract problem of the model file, reported before any sweep with a hint.
_MISMATCH_MARKERS = (
    "Expected all tensors to be on the same device",
    "expected scalar type",
    "have the same dtype",
    "should be the same",  # "Input type (...) and weight type (...) should be the same"
    "found at least two devices",
)
MISMATCH_HINT = (
    "the model and its inputs disagree on device or dtype; batchscope moves the model and "
    "the floating-point tensors of make_inputs to --device/--dtype, so build any other "
    "tensor inside forward with the device and dtype of an existing one "
    "(e.g. torch.zeros(..., device=x.device, dtype=x.dtype))"
)


def is_mismatch(exc: BaseException) -> bool:
    """True when ``exc`` says tensors disagree on device or dtype."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(m in text for m in _MISMATCH_MARKERS)
