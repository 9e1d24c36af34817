"""The :class:`Ceilings` record: what this machine can do at best, measured."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from batchscope.hardware.figures import (
    CeilingDetails,
    DatasheetSpec,
    FamilyPeak,
    TheoreticalPeak,
)
from batchscope.typed_json import decode, to_builtins

# Keys of ``peak_flops_per_s`` are torch dtype names without the "torch." prefix.
FP32 = "float32"
BF16 = "bfloat16"
FP16 = "float16"
TF32 = "tfloat32"  # fp32 matmul on tensor cores (GPU only)


@dataclass
class Ceilings:
    """Measured ceilings of one device, the roofs that ops are classified against.

    Attributes:
        device: "cpu" or "cuda" (the CUDA index is in ``details.host.gpu.index``).
        name: CPU model name or GPU product name.
        peak_flops_per_s: best measured FLOP/s per dtype name ("float32", ...), whichever
            probe reached it: the roof of ops of no kernel family with probes of its own.
        bandwidth_bytes_per_s: sustained streaming copy bandwidth, bytes read plus written.
        overhead_s: fixed cost of one small op (one-element add), the overhead floor.
        threads: intra-op threads the figures were measured with.
        torch_version: torch.__version__ at measurement time.
        source: how these figures were obtained ("measured", "cache", "datasheet").
        key: the cache key these figures are valid for.
        measured_at: ISO-8601 time of the measurement.
        details: what every figure was measured from (sizes, repeats, spread, paths).
        spec: datasheet figures of a known GPU: a cross-check only (None on CPUs), or the
            roofs themselves for a recorded trace (``source == "datasheet"``).
        cache_bytes: the device's last-level cache, the working set under which an op may
            beat the DRAM bandwidth roof: the L2 of a GPU, the largest-level cache of the CPU
            (one instance, as cpu0 sees it); None where it could not be read.
        family_peaks: kernel family ("matmul", "conv": op_families.Family) -> dtype -> that
            family's roof, from its own probes: a matmul is placed against what matmuls
            reach, never against a convolution's faster library path (issue 32: an EPYC's
            oneDNN convolution ran at twice its BLAS matmul). Empty in ceilings measured
            before calibration format 7, and for a datasheet's roofs.
        theoretical: the device's theoretical peak per dtype, an upper bound every measured
            rate is set against; None where it could not be worked out.
    """

    device: str
    name: str
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    overhead_s: float
    threads: int = 1
    torch_version: str = ""
    source: str = "measured"
    key: str = ""
    measured_at: str = ""
    details: CeilingDetails = field(default_factory=CeilingDetails)
    spec: DatasheetSpec | None = None
    cache_bytes: int | None = None
    family_peaks: dict[str, dict[str, FamilyPeak]] = field(default_factory=dict)
    theoretical: TheoreticalPeak | None = None

    def peak_for(self, dtype: str, family: str | None = None) -> float:
        """Peak FLOP/s for ``dtype`` (fp32 for dtypes not measured): the roof of kernel
        ``family`` ("matmul", "conv") where that family has one, else the dtype's peak.

        Example:
            >>> c = Ceilings("cpu", "x", {"float32": 380e9}, 40e9, 1e-6,
            ...              family_peaks={"matmul": {"float32": FamilyPeak(173e9, "mm")}})
            >>> c.peak_for("float32", "matmul"), c.peak_for("float32", "conv")
            (173000000000.0, 380000000000.0)
        """
        key = dtype if self.peak_flops_per_s.get(dtype) else FP32
        roof = self.family_peaks.get(family, {}).get(key) if family is not None else None
        return roof.flops_per_s if roof is not None else self.peak_flops_per_s[key]

    def ridge_for(self, dtype: str, family: str | None = None) -> float:
        """Ridge point R = peak FLOP/s / bandwidth, in FLOP per byte."""
        return self.peak_for(dtype, family) / self.bandwidth_bytes_per_s

    def with_peaks(self, peaks: dict[str, float]) -> Ceilings:
        """A copy whose dtype peaks are ``peaks``, every family roof of a dtype scaled by the
        same ratio as its peak (a roof lowered to its median repeat is lowered everywhere)."""
        families = {
            family: {dtype: dataclasses.replace(roof, flops_per_s=roof.flops_per_s
                                                * peaks[dtype] / self.peak_flops_per_s[dtype])
                     if dtype in peaks and self.peak_flops_per_s.get(dtype) else roof
                     for dtype, roof in by_dtype.items()}
            for family, by_dtype in self.family_peaks.items()}
        return dataclasses.replace(self, peak_flops_per_s=dict(peaks), family_peaks=families)

    @property
    def ridge_flops_per_byte(self) -> dict[str, float]:
        return {k: v / self.bandwidth_bytes_per_s for k, v in self.peak_flops_per_s.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe values of every field, and the ridge points (for readers of the cache)."""
        data: dict[str, Any] = to_builtins(self)
        data["ridge_flops_per_byte"] = self.ridge_flops_per_byte
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ceilings:
        """Back from :meth:`to_dict` (the ridge points are derived, not read).

        Raises:
            msgspec.ValidationError: a field of the wrong type.
        """
        return decode(data, cls)
