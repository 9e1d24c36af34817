"""report.json: written atomically, read back defensively with :func:`load_report`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from batchscope.errors import UsageError
from batchscope.records import SCHEMA, Report
from batchscope.reports.report_shape import check_report, kind_of
from batchscope.tracebacks import quote

# report.json of a long sweep of a large model stays well under this; anything bigger is
# not ours (or hostile) and is refused before parsing.
MAX_REPORT_BYTES = 64 * 2**20
# A float64 tops out near 1.8e308: an integer literal longer than this cannot be a
# measurement, and is refused before Python spends time converting it.
MAX_INT_DIGITS = 320


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def dumps(report: Report) -> str:
    """The report as JSON text; NaN or Infinity anywhere is a bug and raises."""
    return json.dumps(report.to_dict(), indent=1, allow_nan=False, ensure_ascii=False)


def write_json(report: Report, out_dir: str | os.PathLike[str]) -> Path:
    path = Path(out_dir) / "report.json"
    atomic_write_text(path, dumps(report))
    return path


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a report")


def _bounded_int(text: str) -> int:
    """``int(text)``, refusing integers far beyond any measurement before converting them."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {digits:,} digits is not a measurement")
    return int(text)


def _parse_file(path: Path) -> Any:
    """Parse a JSON file, refusing oversized files, NaN/Infinity and deep nesting.

    Raises:
        UsageError: the file cannot be read or is not JSON, in one sentence.
    """
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise UsageError(f"{path} is {size:,} bytes, over the {MAX_REPORT_BYTES:,}-byte cap.")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not a report: byte {exc.start} is not UTF-8.") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_int=_bounded_int)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise UsageError(f"{path} is not a valid report: {exc}.") from None
    except RecursionError:
        raise UsageError(f"{path} is not a report: its JSON nests too deeply.") from None


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a report.json that came from outside, checked so that readers can index it.

    The one entry point for every reader of a report file (``diagnose compare`` now,
    ``serve`` and ``trace`` later): the file is JSON within the size cap, has our schema,
    and passes :func:`~batchscope.reports.report_shape.check_report` (finite numbers, the
    documented fields typed right).

    Example:
        >>> doc = load_report("batchscope-report/report.json")  # doctest: +SKIP
        >>> doc["batches"][0]["batch_size"]  # doctest: +SKIP
        1

    Raises:
        UsageError: one sentence naming the file and what is wrong with it (exit 4).
    """
    path = Path(path)
    data = _parse_file(path)
    found = data.get("schema") if isinstance(data, dict) else None
    if found != SCHEMA:
        what = kind_of(data) if not isinstance(data, dict) else (
            "no schema field" if found is None else f"schema {quote(found)}")
        raise UsageError(f"{path} holds {what}; expected a report of schema {SCHEMA!r}.")
    check_report(data, str(path))
    return data
