"""report.json: written atomically, read back defensively (no NaN, a size cap, the schema)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from batchscope.errors import UsageError
from batchscope.report import SCHEMA, Report

# report.json of a long sweep of a large model stays well under this; anything bigger is
# not ours (or hostile) and is refused before parsing.
MAX_REPORT_BYTES = 64 * 2**20


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


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a report.json, refusing oversized files, NaN/Infinity and other schemas."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}.") from None
    if size > MAX_REPORT_BYTES:
        raise UsageError(f"{path} is {size:,} bytes, over the {MAX_REPORT_BYTES:,}-byte cap.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not a valid report: {exc}.") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UsageError(f"{path} has schema {found!r}; expected {SCHEMA!r}.")
    return data
