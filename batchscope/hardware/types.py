"""The :class:`Ceilings` record: what this machine can do at best, measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from batchscope.hardware.figures import CeilingDetails, DatasheetSpec
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
        peak_flops_per_s: best measured matmul FLOP/s per dtype name ("float32", ...).
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

    def peak_for(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``, falling back to fp32 for dtypes not measured."""
        return self.peak_flops_per_s.get(dtype) or self.peak_flops_per_s[FP32]

    def ridge_for(self, dtype: str) -> float:
        """Ridge point R = peak FLOP/s / bandwidth, in FLOP per byte."""
        return self.peak_for(dtype) / self.bandwidth_bytes_per_s

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
