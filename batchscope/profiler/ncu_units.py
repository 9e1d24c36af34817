"""Units and values of Nsight Compute exports, in SI base units.

ncu prints each metric as text in a unit of its own choosing (``Kbyte``, ``usecond``,
``inst/cycle``, ``Gbyte/second``); the reader and the per-launch figures
(:mod:`batchscope.profiler.ncu_export`, :mod:`batchscope.profiler.ncu_figures`) need one scale
and one dimension for every figure, so both are read here and nowhere else.

**Units.** Every value is scaled by its own unit to SI base units: bytes (``Kbyte`` is 1000,
``KiB`` 1024), seconds, Hz, bytes/s. A unit without a known scale leaves its figure None with
a note; nothing is guessed. Thousands separators are read; ``n/a`` is "not collected".

Example:
    >>> dim, scale = parse_unit("usecond")
    >>> dim, parse_value("23.42") * scale
    (<Dim.SECONDS: 'seconds'>, 2.342e-05)
"""

from __future__ import annotations

import re
from enum import Enum


class Dim(str, Enum):
    """What a unit measures."""

    BYTES = "bytes"
    SECONDS = "seconds"
    HERTZ = "hertz"
    BYTES_PER_S = "bytes_per_s"
    COUNT = "count"  # "", inst, cycle, warp, ...: a plain number
    PER_CYCLE = "per_cycle"  # inst/cycle
    BYTES_PER_CYCLE = "bytes_per_cycle"
    PERCENT = "percent"


_DECIMAL = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 1024.0, "mi": 1024.0**2, "gi": 1024.0**3, "ti": 1024.0**4}
_TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "µs": 1e-6, "μs": 1e-6,
         "msecond": 1e-3, "ms": 1e-3, "second": 1.0, "s": 1.0, "sec": 1.0}
_HERTZ = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
_COUNTS = frozenset({"", "inst", "cycle", "warp", "block", "thread", "cluster", "sector",
                     "request", "wavefront", "register", "flop", "op"})
_BYTE_UNIT = re.compile(r"(?:([kmgtp]?)bytes?|([kmgt]i)b)")


def parse_unit(text: str) -> tuple[Dim, float] | None:
    """The dimension and the factor to SI base units of an ncu unit (None: unknown).

    >>> parse_unit("Mbyte"), parse_unit("Ghz"), parse_unit("Gbyte/s")
    ((<Dim.BYTES: 'bytes'>, 1000000.0), (<Dim.HERTZ: 'hertz'>, 1000000000.0), \
(<Dim.BYTES_PER_S: 'bytes_per_s'>, 1000000000.0))
    """
    unit = text.strip().lower()
    if unit == "%":
        return Dim.PERCENT, 1.0
    if unit in _HERTZ:
        return Dim.HERTZ, _HERTZ[unit]
    if unit in _TIME:
        return Dim.SECONDS, _TIME[unit]
    if unit in _COUNTS:
        return Dim.COUNT, 1.0
    byte_scale = _bytes_scale(unit)
    if byte_scale is not None:
        return Dim.BYTES, byte_scale
    if unit.count("/") == 1:
        top, bottom = unit.split("/")
        top_bytes = _bytes_scale(top)
        if bottom == "cycle":
            if top_bytes is not None:
                return Dim.BYTES_PER_CYCLE, top_bytes
            return (Dim.PER_CYCLE, 1.0) if top in _COUNTS else None
        if bottom in _TIME:
            if top_bytes is not None:
                return Dim.BYTES_PER_S, top_bytes / _TIME[bottom]
            if top == "cycle":
                return Dim.HERTZ, 1.0 / _TIME[bottom]
    return None


def _bytes_scale(unit: str) -> float | None:
    match = _BYTE_UNIT.fullmatch(unit)
    if match is None:
        return None
    decimal, binary = match.groups()
    return _BINARY[binary] if binary else _DECIMAL[decimal or ""]


_NOT_COLLECTED = frozenset({"", "n/a", "na", "-", "--"})
_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")


def parse_value(text: str) -> float | None:
    """A metric value as a float: thousands separators read, ``n/a`` None.

    Raises ValueError for text that is not a number. NaN and infinity parse (the caller
    rejects them with a note).

    >>> parse_value("1,275,068,416"), parse_value("9,495.42"), parse_value("n/a")
    (1275068416.0, 9495.42, None)
    """
    cell = text.strip()
    if cell.lower() in _NOT_COLLECTED:
        return None
    if _NUMBER.fullmatch(cell):
        return float(cell.replace(",", ""))
    if cell.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(cell)
    raise ValueError(cell)


def _resolution(text: str) -> float:
    """One unit of the last printed digit of a number ("2.33": 0.01)."""
    mantissa = text.strip().lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10.0 ** -decimals
