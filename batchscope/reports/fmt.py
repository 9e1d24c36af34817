"""Number formatting: the one module every renderer and the prose use.

The HTML, the Markdown summary, ``compare``, the terminal and the explanation
(:mod:`batchscope.reports.narrative`) all format through here, so one quantity reads the
same wherever it is shown. Bytes are decimal (1 MB = 1e6 bytes) everywhere, as bandwidths
(GB/s) are quoted, so a step's bytes and the bandwidth that moves them share units.

Every formatter takes ``None`` (a value the report does not have) and returns ``"–"``, so a
renderer never has to branch on missing data to print it.

A figure with its 95% interval reads the same in every format: the figure, then its interval
in parentheses, both ends in the figure's own unit and scale (``"638 k (479–843 k)"``,
``"746 µs (685–815 µs)"``, ``"82.4× (68.2–97.1×)"``); a figure without one (a report
written before intervals) is the figure alone. The ``*_band`` formatters below give the
text; the ``*_parts`` ones the figure and the interval apart (:class:`Band`), for a cell or
a card that places them apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscope.records.interval import Interval

MISSING = "–"
_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# (scale, unit), largest first; below the last entry a quantity is shown in its base unit.
_BYTES = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))
_TIMES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
# Durations from this many seconds up are shown without decimals ("125 s").
WHOLE_SECONDS_FROM = 100.0


def _rounded(value: float, digits: int = 3) -> float:
    """``value`` at ``digits`` significant digits: the scale of a figure is chosen on what it
    will print, so 999.6 µs reads "1 ms", never "1e+03 µs"."""
    return float(f"{value:.{digits}g}")


def _si_scale(value: float, digits: int = 3) -> tuple[float, str]:
    """The SI divisor and prefix that print ``value`` with 1-3 digits before the point."""
    shown = abs(_rounded(value, digits))
    return next(((s, p) for s, p in _SI if shown >= s), (1.0, ""))


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """``1.23e9, "FLOP/s"`` -> ``"1.23 GFLOP/s"`` (3 significant digits by default)."""
    if value is None:
        return MISSING
    scale, prefix = _si_scale(value, digits)
    return f"{_scaled(value / scale, digits)} {prefix}{unit}".rstrip()


def flops(value: float | None) -> str:
    """A FLOP count: ``2.52e8`` -> ``"252 MFLOP"``."""
    return si(value, "FLOP")


def nbytes(value: float | None) -> str:
    """Bytes in decimal units: ``"494.6 MB"``."""
    if value is None:
        return MISSING
    for scale, unit in _BYTES:
        if abs(value) >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} B"


def byte_scale(largest: float) -> tuple[float, str]:
    """Divisor and unit that show ``largest`` bytes with 1-3 digits before the point.

    For a chart axis or a table column, where every value shares one unit.
    """
    for scale, unit in _BYTES:
        if largest >= scale:
            return scale, unit
    return 1.0, "B"


def time_scale(largest_s: float) -> tuple[float, str]:
    """Divisor and unit that show ``largest_s`` seconds with 1-3 digits before the point."""
    for scale, unit in _TIMES:
        if largest_s >= scale:
            return scale, unit
    return _TIMES[-1]


def _seconds_unit(value: float) -> tuple[float, str]:
    """The divisor and unit :func:`seconds` prints ``value`` in (below 1 s)."""
    return time_scale(_rounded(value))


def seconds(value: float | None) -> str:
    """A duration with a unit that keeps 3-4 significant digits: ``"61.5 ms"``."""
    if value is None:
        return MISSING
    if value >= WHOLE_SECONDS_FROM:
        return f"{value:,.0f} s"
    if _rounded(value) >= 1:
        return f"{value:.2f} s"
    scale, unit = _seconds_unit(value)
    return f"{_scaled(value / scale)} {unit}"


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
    """A speedup or factor: ``"6.5×"``, ``"133×"``; below 1 two significant digits
    (``"0.031×"``), so a factor that shrinks something never reads ``"0.0×"``."""
    if value is None:
        return MISSING
    if abs(value) < 1:
        return f"{value:.2g}×"
    return f"{value:,.1f}×" if value < 100 else f"{value:,.0f}×"


def number(value: float | None, digits: int = 3) -> str:
    """A plain quantity with ``digits`` significant digits: ``"6.67"``."""
    if value is None:
        return MISSING
    return _scaled(value, digits)


def shapes(input_shapes: list[list[int]] | None) -> str:
    """``[[16, 768], [768, 3072]]`` -> ``"[16, 768] [768, 3072]"``; scalars as ``[]``."""
    if not input_shapes:
        return ""
    return " ".join("[" + ", ".join(str(d) for d in shape) + "]" for shape in input_shapes)


# -- a figure with its 95% interval ---------------------------------------------------------
@dataclass(frozen=True)
class Band:
    """A figure and its interval, formatted apart: ``figure`` (``"638 k"``) and ``interval``
    (``"479–843 k"``, ``"≥ 479 k"``; "" without one), so a table cell or a card can place
    each where it wants without slicing :attr:`text`.

    Example:
        >>> band = si_parts(638_000, Interval(479_000, 843_000))
        >>> band.figure, band.interval, band.bracketed, band.text
        ('638 k', '479–843 k', '(479–843 k)', '638 k (479–843 k)')
    """

    figure: str
    interval: str = ""

    @property
    def bracketed(self) -> str:
        """The interval in parentheses, as every format prints it; "" without one."""
        return f"({self.interval})" if self.interval else ""

    @property
    def text(self) -> str:
        """The figure, then its interval in parentheses: ``"638 k (479–843 k)"``."""
        return f"{self.figure} {self.bracketed}" if self.interval else self.figure


def _scaled(value: float, digits: int = 3) -> str:
    """One end of an interval, already divided by its scale: 3 significant digits, whole
    numbers with thousands separators from 1,000 up (never ``"1.2e+03"``, nor ``"1e+03"``
    for 999.6)."""
    if math.isfinite(value) and abs(_rounded(value, digits)) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


# What an interval too wide to mean anything shows instead of its numbers, after its figure
# (records/interval.MEANINGFUL_SPAN): "50% (not measurable here)", never "50% (0-19926639%)".
NOT_MEASURABLE = "not measurable here"


def _usable(interval: Interval | None) -> bool:
    """An interval to print: present, neither end NaN."""
    return interval is not None and not math.isnan(interval.low) \
        and not math.isnan(interval.high)


def _parts(figure: str, interval: Interval | None, scale: float, suffix: str) -> Band:
    """``figure`` and the interval's ends divided by ``scale``, each followed by ``suffix``;
    :data:`NOT_MEASURABLE` for the interval where it is too wide to mean anything."""
    if interval is None or not _usable(interval):
        return Band(figure)
    if not interval.meaningful():
        return Band(figure, NOT_MEASURABLE)
    low = _scaled(interval.low / scale)
    return Band(figure, f"{low}–{_scaled(interval.high / scale)}{suffix}")


def si_parts(value: float | None, interval: Interval | None, unit: str = "") -> Band:
    """A quantity and its interval, both ends at the quantity's SI prefix."""
    if value is None:
        return Band(MISSING)
    scale, prefix = _si_scale(value)
    return _parts(si(value, unit), interval, scale, f" {prefix}{unit}".rstrip())


def si_band(value: float | None, interval: Interval | None, unit: str = "") -> str:
    """A quantity and its interval, both ends at the quantity's SI prefix.

    Example:
        >>> si_band(638_000, Interval(479_000, 843_000))
        '638 k (479–843 k)'
        >>> si_band(638_000, None)
        '638 k'
    """
    return si_parts(value, interval, unit).text


def rate_band(value: float | None, interval: Interval | None, unit: str) -> str:
    """A throughput and its interval: ``"686 k (629–748 k) samples/s"``."""
    if value is None:
        return MISSING
    return f"{si_band(value, interval)} {unit}s/s"


def seconds_parts(value: float | None, interval: Interval | None) -> Band:
    """A duration and its interval, both ends in the duration's unit.

    Example:
        >>> seconds_parts(0.0103, Interval(0.0091, float("nan")))
        Band(figure='10.3 ms', interval='')
    """
    if value is None:
        return Band(MISSING)
    if _rounded(value) >= 1:
        return _parts(seconds(value), interval, 1.0, " s")
    scale, unit = _seconds_unit(value)
    return _parts(seconds(value), interval, scale, f" {unit}")


def seconds_band(value: float | None, interval: Interval | None) -> str:
    """A duration and its interval, both ends in the duration's unit.

    Example:
        >>> seconds_band(746e-6, Interval(685e-6, 815e-6))
        '746 µs (685–815 µs)'
    """
    return seconds_parts(value, interval).text


def ratio_parts(value: float | None, interval: Interval | None) -> Band:
    """A speedup and its interval."""
    if value is None:
        return Band(MISSING)
    if interval is None or not _usable(interval):
        return Band(ratio(value))
    if not interval.meaningful():
        return Band(ratio(value), NOT_MEASURABLE)
    low = ratio(interval.low).removesuffix("×")
    return Band(ratio(value), f"{low}–{ratio(interval.high)}")


def ratio_band(value: float | None, interval: Interval | None) -> str:
    """A speedup and its interval.

    Example:
        >>> ratio_band(82.36, Interval(68.18, 97.06))
        '82.4× (68.2–97.1×)'
    """
    return ratio_parts(value, interval).text


def pct_parts(value: float | None, interval: Interval | None) -> Band:
    """A share and its interval, in percent."""
    if value is None:
        return Band(MISSING)
    if interval is None or not _usable(interval):
        return Band(pct(value))
    if not interval.meaningful():
        return Band(pct(value), NOT_MEASURABLE)
    return Band(pct(value), f"{interval.low * 100:.0f}–{pct(interval.high)}")


def pct_band(value: float | None, interval: Interval | None) -> str:
    """A share and its interval, in percent.

    Example:
        >>> pct_band(0.93, Interval(0.81, 1.06))
        '93% (81–106%)'
    """
    return pct_parts(value, interval).text


def number_parts(value: float | None, interval: Interval | None) -> Band:
    """A plain quantity and its interval (or range)."""
    if value is None:
        return Band(MISSING)
    return _parts(number(value), interval, 1.0, "")


def number_band(value: float | None, interval: Interval | None) -> str:
    """A plain quantity and its interval: ``"46.2 (30.1–62.5)"``."""
    return number_parts(value, interval).text
