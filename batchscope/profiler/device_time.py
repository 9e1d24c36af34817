"""What a breakdown's times mean on a GPU, where ops are timed by their kernels.

On the CPU an op's profiled time is its CPU time and the gaps between ops are framework
time (Python, dispatch). On a GPU an op's time is the time of the kernels it launched, so:

- the step is the latency the timing pass measured with no profiler attached (the profiled
  CPU span is inflated by the profiler's own cost, which is not the model's);
- the time in that step with no kernel running is the device *idle*, waiting on the host
  (launches, Python, synchronisation): overhead of the launch-bound kind, never "framework";
- an fp32 matmul or convolution runs on TF32 tensor cores when torch allows it, and then its
  roof is the TF32 peak, not the fp32 one.
"""

from __future__ import annotations

import dataclasses

import torch

from batchscope.hardware.types import FP32, TF32
from batchscope.op_families import Family, ops_of
from batchscope.records import BatchResult, TimeBasis

# aten ops (as the profiler names them, without "aten::") whose fp32 kernels use TF32 when
# torch.backends.cuda.matmul allows it: the matmuls (cuBLAS) ...
TF32_MATMUL_OPS = ops_of(Family.MATMUL)
# ... and when torch.backends.cudnn allows it: the convolutions, forward and backward
# (cuDNN; allowed by default). op_families says which ops are which.
TF32_CONV_OPS = ops_of(Family.CONV)


def tf32_modes() -> tuple[bool, bool]:
    """(matmul, convolution): whether torch lets fp32 kernels of each use TF32 right now."""
    matmul = torch.get_float32_matmul_precision() != "highest" or bool(
        getattr(torch.backends.cuda.matmul, "allow_tf32", False))
    conv = bool(getattr(torch.backends.cudnn, "allow_tf32", True))
    return matmul, conv


def apply_device_time(result: BatchResult, latency_s: float | None, *,
                      tf32_matmul: bool | None = None,
                      tf32_conv: bool | None = None) -> BatchResult:
    """A new record: ``result`` with a GPU breakdown's times turned into device terms (see
    the module docstring); the TF32 modes are torch's current ones (:func:`tf32_modes`)
    unless given."""
    if tf32_matmul is None or tf32_conv is None:
        matmul, conv = tf32_modes()
        tf32_matmul = matmul if tf32_matmul is None else tf32_matmul
        tf32_conv = conv if tf32_conv is None else tf32_conv
    busy_s = result.op_time_s or 0.0
    step_s = max(latency_s or result.profiled_step_s or 0.0, busy_s)
    for op in result.ops:
        if op.dtype != FP32:
            continue
        if (tf32_matmul and op.name in TF32_MATMUL_OPS) or (tf32_conv and op.name in TF32_CONV_OPS):
            op.roof_dtype = TF32
    if step_s > 0:
        return dataclasses.replace(result, time_basis=TimeBasis.DEVICE, profiled_step_s=step_s,
                                   device_idle_s=step_s - busy_s)
    return dataclasses.replace(result, time_basis=TimeBasis.DEVICE)
