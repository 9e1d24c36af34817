"""report.json: written atomically with its sentences, read back through the typed loader.

The document is :func:`batchscope.records.codec.encode` of the report plus the words a
reader without batchscope wants beside the numbers: each flag's ``text``, ``stop_reason``,
the rule's and the explanation's sentences (``recommendation.rule_text``,
``recommendation.explanation``). :func:`load_report` ignores them: it reads the numbers and
the renderers write the words again.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from batchscope.errors import UsageError
from batchscope.records import Report
from batchscope.records.codec import decode_report, dumps, encode
from batchscope.reports.flag_text import flag_text, rule_text, stop_text
from batchscope.reports.narrative import explanation
from batchscope.reports.view import shown_flag

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
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def document(report: Report) -> dict[str, Any]:
    """report.json's document: the numbers, and the sentences beside them."""
    doc = encode(report)
    unit = report.model.unit or "sample"
    for flag, shown in zip(report.flags, doc["flags"], strict=True):
        shown["text"] = flag_text(shown_flag(report, flag))  # one page-fault figure
    for batch, shown in zip(report.batches, doc["batches"], strict=True):
        for flag, f in zip(batch.flags, shown["flags"], strict=True):
            f["text"] = flag_text(flag)
        for op, shown_op in zip(batch.ops, shown["ops"], strict=True):
            for flag, f in zip(op.flags, shown_op["flags"], strict=True):
                f["text"] = flag_text(flag)
    doc["stop_reason"] = stop_text(report.stop, unit)
    if report.recommendation is not None:
        doc["recommendation"]["rule_text"] = rule_text(report.recommendation.rule, unit)
        doc["recommendation"]["explanation"] = explanation(report)
    return doc


def dumps_report(report: Report) -> str:
    """The report as report.json's text; NaN or Infinity anywhere is a bug and raises."""
    return dumps(document(report))


def write_json(report: Report, out_dir: str | os.PathLike[str]) -> Path:
    path = Path(out_dir) / "report.json"
    atomic_write_text(path, dumps_report(report))
    return path


def read_capped(path: Path, max_bytes: int, what: str) -> str:
    """The UTF-8 text of a file from outside, refused past ``max_bytes`` before it is read.

    Raises:
        UsageError: one sentence naming the file (it is not ``what``, too large, unreadable).
    """
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise UsageError(f"{path} is {size:,} bytes, over the {max_bytes:,}-byte cap.")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not {what}: byte {exc.start} is not UTF-8.") from None


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read a report.json that came from outside as a typed :class:`Report`.

    The one entry point for every reader of a report file (``diagnose compare``,
    ``diagnose serve``): the file is within the size cap, is JSON with our schema, and
    every field has its type (:func:`batchscope.records.codec.decode_report`).

    Example:
        >>> report = load_report("batchscope-report/report.json")  # doctest: +SKIP
        >>> report.batches[0].batch_size  # doctest: +SKIP
        1

    Raises:
        UsageError: one sentence naming the file and what is wrong with it (exit 4).
    """
    path = Path(path)
    text = read_capped(path, MAX_REPORT_BYTES, "a report")
    return decode_report(text, str(path))
