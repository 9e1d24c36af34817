"""Read a recorded torch.profiler (Kineto) trace: the events and the metadata, nothing more.

A trace is what ``prof.export_chrome_trace`` or ``tensorboard_trace_handler`` writes:
``{"traceEvents": [...], "deviceProperties": [...], "distributedInfo": {...}, ...}``, as
``.json`` or ``.json.gz``. Some writers store ``deviceProperties`` and ``distributedInfo`` as
the ``repr`` of a Python object instead of JSON; both are read. A truncated file (a job killed
while writing it) is read up to its last whole event, and says so.
"""

from __future__ import annotations

import ast
import gzip
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Event categories (``cat``) this analysis reads.
CPU_OP = "cpu_op"
USER_ANNOTATION = "user_annotation"
KERNEL = "kernel"
GPU_MEMCPY = "gpu_memcpy"
GPU_MEMSET = "gpu_memset"
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
DEVICE_CATEGORIES = frozenset({KERNEL, GPU_MEMCPY, GPU_MEMSET})


class TraceUnreadable(Exception):
    """Nothing in the file can be read as a profiler trace (one sentence says why)."""


@dataclass
class KinetoTrace:
    """The complete events (``ph == "X"``) of one trace, by what they are, and its metadata."""

    path: str
    ops: list[dict[str, Any]] = field(default_factory=list)  # cpu_op and user_annotation
    launches: list[dict[str, Any]] = field(default_factory=list)  # cuda_runtime/driver calls
    device_events: list[dict[str, Any]] = field(default_factory=list)  # kernels, memcpy, memset
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed: dict[str, Any] = field(default_factory=dict)
    truncated_after: int | None = None  # events read before a truncated file ended

    @property
    def rank(self) -> int | None:
        rank = self.distributed.get("rank")
        return rank if isinstance(rank, int) else None

    @property
    def world_size(self) -> int | None:
        size = self.distributed.get("world_size")
        return size if isinstance(size, int) else None

    @property
    def device_index(self) -> int | None:
        """The GPU most kernels ran on (``args.device``): rank 3 of a node runs on GPU 3,
        and ``deviceProperties`` lists every GPU of the node."""
        seen = Counter((e.get("args") or {}).get("device") for e in self.device_events)
        seen.pop(None, None)
        return seen.most_common(1)[0][0] if seen else None

    def _properties(self) -> dict[str, Any] | None:
        index = self.device_index
        chosen = next((p for p in self.device_properties if p.get("id") == index), None)
        return chosen or (self.device_properties[0] if self.device_properties else None)

    def device_name(self) -> str | None:
        """The name of the GPU the kernels ran on (``deviceProperties``), when recorded."""
        name = (self._properties() or {}).get("name")
        return name if isinstance(name, str) else None

    def device_memory_bytes(self) -> int | None:
        memory = (self._properties() or {}).get("totalGlobalMem")
        return memory if isinstance(memory, int) else None


def _python_or_json(value: Any) -> Any:
    """A metadata value: JSON already, or the ``repr`` of a Python list/dict (some writers)."""
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    return value


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error):
            # A truncated gzip: keep what decompresses.
            raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)
    return raw.decode("utf-8", errors="replace")


def _salvage_events(text: str) -> list[dict[str, Any]]:
    """The whole events of a trace whose JSON ends early, read one by one."""
    key = text.find('"traceEvents"')
    start = text.find("[", key) if key >= 0 else -1
    if start < 0:
        return []
    decoder = json.JSONDecoder()
    events: list[dict[str, Any]] = []
    pos = start + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            event, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        if isinstance(event, dict):
            events.append(event)
    return events


def _complete(event: Any) -> bool:
    return (isinstance(event, dict) and event.get("ph") == "X"
            and isinstance(event.get("ts"), (int, float))
            and isinstance(event.get("dur"), (int, float)))


def load_trace(path: str | Path) -> KinetoTrace:
    """Read one trace file.

    Raises:
        TraceUnreadable: the file is missing, not JSON, or has no events at all.
    """
    path = Path(path)
    try:
        text = _read_text(path)
    except OSError as exc:
        raise TraceUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    truncated_after: int | None = None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        events = _salvage_events(text)
        if not events:
            raise TraceUnreadable(
                f"{path} is not a profiler trace: it is not JSON, and no trace events could "
                "be read from it") from None
        document, truncated_after = {"traceEvents": events}, len(events)
    if isinstance(document, list):  # a bare event list (the Chrome trace array format)
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise TraceUnreadable(
            f"{path} is JSON but not a profiler trace: it has no traceEvents list")
    trace = KinetoTrace(path=str(path), truncated_after=truncated_after)
    props = _python_or_json(document.get("deviceProperties"))
    if isinstance(props, list):
        trace.device_properties = [p for p in props if isinstance(p, dict)]
    distributed = _python_or_json(document.get("distributedInfo"))
    if isinstance(distributed, dict):
        trace.distributed = distributed
    for event in document["traceEvents"]:
        if not _complete(event):
            continue
        category = event.get("cat")
        if category in (CPU_OP, USER_ANNOTATION):
            trace.ops.append(event)
        elif category in LAUNCH_CATEGORIES:
            trace.launches.append(event)
        elif category in DEVICE_CATEGORIES:
            trace.device_events.append(event)
    if not (trace.ops or trace.device_events):
        raise TraceUnreadable(
            f"{path} has no profiler events to analyse (no cpu_op, user_annotation or kernel "
            "events): was it written by torch.profiler?")
    return trace
