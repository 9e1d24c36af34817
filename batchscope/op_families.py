"""Which ops are matmuls, convolutions, TF32-eligible, kernel-probed or collectives: one table.

Ops are named as the profiler and the counting pass name them: an aten op by its overload
packet without ``aten::`` ("addmm", "scatter_"), an op of any other namespace with it
("c10d::allreduce_", "c10d::scatter_"), so that an aten op and a collective of the same
name stay two ops. Every place that treats an op by its kind reads it here: the step-time
model (its compute efficiency per family), the roofline (the dense ops whose exact FLOPs
can raise a measured peak; the collectives, placed on no roof of this machine), GPU device
time (the fp32 ops TF32 may run), the kernel probes (what can be timed alone, and how) and
the formula registry (each formula's family). No torch here: the parent process of a sweep
reads it too.

Example:
    >>> family("addmm"), family("convolution_backward"), family("gelu")
    (<Family.MATMUL: 'matmul'>, <Family.CONV: 'conv'>, None)
    >>> probe_kind("mm"), probe_kind("convolution"), probe_kind("linear")
    (<ProbeKind.SHAPES: 'shapes'>, <ProbeKind.CONV_ARGS: 'conv_args'>, None)
    >>> op_name("aten", "scatter_"), op_name("c10d", "scatter_")
    ('scatter_', 'c10d::scatter_')
    >>> is_collective("c10d::scatter_"), is_collective("scatter_")
    (True, False)
"""

from __future__ import annotations

import re
from enum import Enum


class Family(str, Enum):
    """The kernel family an op runs in."""

    MATMUL = "matmul"  # a GEMM (BLAS, cuBLAS): the ceilings' F.linear path
    CONV = "conv"  # a convolution (oneDNN, cuDNN), forward or backward


class ProbeKind(str, Enum):
    """How a kernel probe (profiler/probe.py) calls an op alone at its own shapes."""

    SHAPES = "shapes"  # a matmul: fresh tensors of the recorded shapes are enough
    CONV_ARGS = "conv_args"  # aten.convolution with its recorded stride, padding, ... args
    REPLAYED = "replayed"  # any overload the recorded tensors and non-tensor args fit


FAMILIES: dict[str, Family] = {
    **dict.fromkeys(("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear",
                     "_addmm_activation", "_scaled_mm"), Family.MATMUL),
    **dict.fromkeys(("convolution", "_convolution", "conv1d", "conv2d", "conv3d",
                     "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
                     "mkldnn_convolution", "cudnn_convolution", "cudnn_convolution_transpose",
                     "convolution_backward"), Family.CONV),
}

PROBES: dict[str, ProbeKind] = {
    **dict.fromkeys(("addmm", "mm", "bmm", "baddbmm"), ProbeKind.SHAPES),
    "convolution": ProbeKind.CONV_ARGS,
    # The per-row ops of a CNN's forward and backward steps and of a transformer's, whose
    # time a larger batch changes by more than its work (another kernel path, buffers
    # mapped afresh and faulted in). One name here adds an op, as long as its tensor
    # arguments are floating point, or named ``indices`` (filled with zeros).
    **dict.fromkeys((
        "convolution_backward",
        "native_batch_norm", "_native_batch_norm_legit_no_training",
        "native_batch_norm_backward",
        "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
        "threshold_backward", "add", "mul", "native_layer_norm", "_softmax", "gelu",
    ), ProbeKind.REPLAYED),
}


# The paths the ceilings time each family's peak by (hardware/microbench.py): torch.mm and
# F.linear for the matmuls, a 3x3 conv2d for the convolutions; and the words a report says
# them in.
PATH_FAMILY: dict[str, Family] = {"mm": Family.MATMUL, "linear": Family.MATMUL,
                                  "conv2d": Family.CONV}
PATH_WORDS: dict[str, str] = {"mm": "torch.mm", "linear": "F.linear", "conv2d": "a 3x3 conv2d"}
# The path the step-time model reads a family's speed from when it was never measured
# compute-bound (its probe is the model's own call: a Linear, a conv2d).
FAMILY_PATH: dict[Family, str] = {Family.MATMUL: "linear", Family.CONV: "conv2d"}

# Kernel names of the GEMM family as the profiler and Nsight Compute print them: cuBLAS's
# GEMMs and GEMVs (a GEMV's kernel is a template whose arguments name cublasGemv...),
# CUTLASS's, and fused attention.
_GEMM_KERNEL = re.compile(r"gemm|gemv|fmha|flash|attention", re.IGNORECASE)


# torch.distributed's collectives as the counting pass sees them (the c10d namespace): no
# roofline of this machine's arithmetic or memory applies to bytes sent to other ranks. The
# namespace is part of the name: ``aten::scatter_`` (a KV-cache write) is not
# ``c10d::scatter_``.
COLLECTIVES = frozenset(f"c10d::{name}" for name in (
    "allreduce_", "allreduce_coalesced_", "broadcast_", "allgather_", "_allgather_base_",
    "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_", "reduce_", "gather_", "scatter_", "alltoall_",
    "alltoall_base_", "send", "recv_", "barrier",
))


# Ops whose probe needs the call's recorded non-tensor arguments (a convolution's stride,
# padding, ...; a replayed op's in schema order): the counting pass records them, and
# their probes are the cost-bounded ones (a matmul's probe is its shapes alone).
ARGS_PROBED = frozenset(name for name, kind in PROBES.items()
                        if kind in (ProbeKind.CONV_ARGS, ProbeKind.REPLAYED))
# The per-row ops a probe calls again from their recorded arguments, whichever overload
# they fit (profiler/probe.py's _Replay): batch norm, pooling, the backward convolution,
# ... of a CNN's forward and backward steps and of a transformer's. And every op a probe
# times: the matmuls, the convolution and these.
REPLAYED_OPS = frozenset(name for name, kind in PROBES.items() if kind == ProbeKind.REPLAYED)
PROBED_OPS = frozenset(PROBES)


def op_name(namespace: str, packet: str) -> str:
    """An op's name in every record: the packet alone for aten, else namespaced."""
    return packet if namespace == "aten" else f"{namespace}::{packet}"


def is_collective(name: str) -> bool:
    """A torch.distributed collective (c10d): communication, not this device's arithmetic."""
    return name in COLLECTIVES


def family(name: str) -> Family | None:
    """The kernel family of the op named, or None for any other op."""
    return FAMILIES.get(name)


def is_dense(name: str) -> bool:
    """A matmul or a convolution: dense kernels whose FLOPs are exact."""
    return name in FAMILIES


def is_gemm(name: str) -> bool:
    """An op of the GEMM family on a GPU: matmuls, convolutions (implicit GEMMs in cuDNN)
    and fused attention (the --target-gpu prediction's terms, the calibration that fits
    them).

    Example:
        >>> is_gemm("addmm"), is_gemm("_scaled_dot_product_flash_attention"), is_gemm("add")
        (True, True, False)
    """
    return family(name) is not None or "attention" in name


def is_gemm_kernel(kernel_name: str) -> bool:
    """A kernel of the GEMM family by the name the profiler or Nsight Compute prints."""
    return _GEMM_KERNEL.search(kernel_name) is not None


def probe_kind(name: str) -> ProbeKind | None:
    """How a kernel probe calls the op named, or None when it is not probed."""
    return PROBES.get(name)


def ops_of(family_: Family) -> frozenset[str]:
    """Every op name of one family."""
    return frozenset(name for name, f in FAMILIES.items() if f == family_)


def probed(kind: ProbeKind) -> frozenset[str]:
    """Every op name probed one way."""
    return frozenset(name for name, k in PROBES.items() if k == kind)
