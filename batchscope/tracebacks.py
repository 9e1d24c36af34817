"""Other people's exceptions and values, told to the user: one line, and only their frames.

A model file, a ``make_inputs`` or a training step can raise anything with any message, and
a model file or a report can hold any value. :func:`describe_exception` and :func:`quote`
turn them into one bounded line for an error sentence or a report, and never raise
themselves; :func:`user_frames` keeps the traceback frames that are in the user's files, so
they see where their code went wrong without the frames of importlib, torch or batchscope.
"""

from __future__ import annotations

import math
import os
import sysconfig
import traceback
from pathlib import Path
from typing import Any

# Longest exception text we echo back: a hostile or runaway message must not flood reports.
MAX_ERROR_CHARS = 2000
# Longest value quoted inside an error sentence: enough to recognise it, not to flood.
MAX_QUOTED_CHARS = 60
# Python refuses to print integers over 4300 digits (and printing long ones is slow): an
# integer with more bits than this is described by its size instead (~300 digits).
MAX_QUOTED_INT_BITS = 1000


def truncate(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters cut]"


def describe_exception(exc: BaseException) -> str:
    """``TypeName: message`` on one line, truncated; an unprintable message is said so."""
    try:
        message = str(exc).strip().replace("\n", " ")
    except Exception:  # noqa: BLE001 - a hostile __str__ must not replace the real error
        message = "(its message cannot be printed)"
    return truncate(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def quote(value: Any, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` for an error sentence: one line of at most ``limit`` characters.

    Never raises: a huge integer is described by its size, and a value whose ``repr``
    fails (a user object, a list holding a huge integer) by its type.

    Example:
        >>> quote("x" * 100, limit=8)
        "'xxxxxx…"
        >>> quote(2**5000)
        'an integer of 1506 digits'
    """
    if isinstance(value, int) and value.bit_length() > MAX_QUOTED_INT_BITS:
        return f"an integer of {_decimal_digits(value)} digits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - user objects may raise anything from __repr__
        text = f"a {type(value).__name__} that cannot be printed"
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _decimal_digits(value: int) -> int:
    """How many decimal digits ``value`` has, without printing it."""
    digits = int(abs(value).bit_length() * math.log10(2))
    return digits + int(abs(value) >= 10**digits)


def _library_dirs() -> list[str]:
    """Folders whose frames are not the user's: the stdlib, site-packages, batchscope."""
    paths = sysconfig.get_paths()
    dirs = {paths.get("stdlib", ""), paths.get("purelib", ""), paths.get("platlib", "")}
    dirs.add(str(Path(__file__).resolve().parent))
    return [d for d in dirs if d]


def user_frames(exc: BaseException) -> str:
    """The traceback of ``exc`` restricted to the user's own files.

    Frames inside the standard library, installed packages, importlib and batchscope are
    left out, so the user sees only where their code went wrong.
    """
    skip = _library_dirs()
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen")
        and not any(os.path.abspath(f.filename).startswith(d) for d in skip)
    ]
    if not frames:
        return ""
    return "".join(traceback.format_list(frames)).rstrip()
