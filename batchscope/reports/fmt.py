"""Number formatting shared by the HTML, Markdown and compare renderers.

Every formatter takes ``None`` (a value the report does not have) and returns ``"–"``, so a
renderer never has to branch on missing data to print it.
"""

from __future__ import annotations

MISSING = "–"
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# Bytes in decimal units, like bandwidth (GB/s) and the classifier's explanation (MB).
_BYTES = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """``1.23e9, "FLOP"`` -> ``"1.23 GFLOP"`` (3 significant digits by default)."""
    if value is None:
        return MISSING
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}".rstrip()
    return f"{value:.{digits}g} {unit}".rstrip()


def nbytes(value: float | None) -> str:
    """Bytes in decimal units: ``"494.6 MB"``."""
    if value is None:
        return MISSING
    for scale, unit in _BYTES:
        if abs(value) >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def seconds(value: float | None) -> str:
    """A duration with a unit that keeps 3-4 significant digits: ``"61.5 ms"``."""
    if value is None:
        return MISSING
    if value >= 100:
        return f"{value:,.0f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    if value >= 1e-6:
        return f"{value * 1e6:.3g} µs"
    return f"{value * 1e9:.3g} ns"


def rate(value: float | None, unit: str) -> str:
    """A throughput: ``"260 tokens/s"``, ``"1.33 M samples/s"``."""
    if value is None:
        return MISSING
    text = si(value, digits=3)
    return f"{text} {unit}s/s"


def pct(value: float | None, digits: int = 0) -> str:
    """A share in [0, 1] as a percentage: ``"81%"``."""
    if value is None:
        return MISSING
    return f"{value * 100:.{digits}f}%"


def signed_pct(value: float | None) -> str:
    """A relative change: ``"+4.2%"``, ``"−20.0%"`` (a true minus sign)."""
    if value is None:
        return MISSING
    text = f"{value * 100:+.1f}%"
    return text.replace("-", "−")


def ratio(value: float | None) -> str:
    """A speedup or factor: ``"6.5×"``."""
    if value is None:
        return MISSING
    return f"{value:,.1f}×" if value < 100 else f"{value:,.0f}×"


def number(value: float | None, digits: int = 3) -> str:
    """A plain quantity with ``digits`` significant digits: ``"6.67"``."""
    if value is None:
        return MISSING
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def shapes(input_shapes: list[list[int]] | None) -> str:
    """``[[16, 768], [768, 3072]]`` -> ``"[16, 768] [768, 3072]"``; scalars as ``[]``."""
    if not input_shapes:
        return ""
    return " ".join("[" + ", ".join(str(d) for d in shape) + "]" for shape in input_shapes)
