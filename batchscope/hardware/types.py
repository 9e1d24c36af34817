"""The :class:`Ceilings` record: what this machine can do at best, measured."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Keys of ``peak_flops_per_s`` are torch dtype names without the "torch." prefix.
FP32 = "float32"
BF16 = "bfloat16"
FP16 = "float16"
TF32 = "tfloat32"  # fp32 matmul on tensor cores (GPU only)


@dataclass
class Ceilings:
    """Measured ceilings of one device, the roofs that ops are classified against.

    Attributes:
        device: "cpu" or "cuda" (the CUDA index is in ``details["host"]["gpu"]["index"]``).
        name: CPU model name or GPU product name.
        peak_flops_per_s: best measured matmul FLOP/s per dtype name ("float32", ...).
        bandwidth_bytes_per_s: sustained streaming copy bandwidth, bytes read plus written.
        overhead_s: fixed cost of one small op (one-element add), the overhead floor.
        threads: intra-op threads the figures were measured with.
        torch_version: torch.__version__ at measurement time.
        source: how these figures were obtained ("measured", "cache", ...).
        key: the cache key these figures are valid for.
        measured_at: ISO-8601 time of the measurement.
        details: raw per-benchmark figures (sizes, repeats, spread) for the report.
        spec: datasheet figures of a known GPU, a cross-check only (None on CPUs).
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
    details: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] | None = None
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
        return {
            "device": self.device,
            "name": self.name,
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "overhead_s": self.overhead_s,
            "ridge_flops_per_byte": self.ridge_flops_per_byte,
            "threads": self.threads,
            "torch_version": self.torch_version,
            "source": self.source,
            "key": self.key,
            "measured_at": self.measured_at,
            "details": self.details,
            "spec": self.spec,
            "cache_bytes": self.cache_bytes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ceilings:
        return cls(
            device=d["device"],
            name=d["name"],
            peak_flops_per_s={k: float(v) for k, v in d["peak_flops_per_s"].items()},
            bandwidth_bytes_per_s=float(d["bandwidth_bytes_per_s"]),
            overhead_s=float(d["overhead_s"]),
            threads=int(d.get("threads", 1)),
            torch_version=d.get("torch_version", ""),
            source=d.get("source", "measured"),
            key=d.get("key", ""),
            measured_at=d.get("measured_at", ""),
            details=d.get("details", {}),
            spec=d.get("spec"),
            cache_bytes=_optional_int(d.get("cache_bytes")),  # absent before calibration format 3
        )


def _optional_int(value: Any) -> int | None:
    """``int(value)``, or None for None (a key missing from an older cache file or report)."""
    return None if value is None else int(value)
