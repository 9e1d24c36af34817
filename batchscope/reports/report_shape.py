"""What a report.json must hold before anything reads it: JSON values we wrote, typed right.

:func:`check_report` is the one gate between a report dict from outside (a file, an API
caller) and the code that indexes it. After it passes, a reader may rely on:

- every number is finite and fits a float64 (no NaN, no Infinity, no 400-digit integer),
  every string is valid Unicode, and nothing nests deeper than :data:`MAX_NESTING`;
- the sections of DESIGN.md ("report.json — fields others rely on") have the types listed
  in the tables below; a field may be absent or null unless it is marked required;
- ``batches`` is a list of objects, each with a positive integer ``batch_size`` and a
  string ``status``, and every op is an object.

Fields not listed here are free (DESIGN.md: add freely) and only pass the value checks.
The first problem found raises :class:`~batchscope.errors.UsageError` with one sentence
that names the field, e.g. ``head.json is not a batchscope report: batches[3].status is a
number, not a string.``

Example:
    >>> check_report({"schema": "batchscope.report/1", "batches": []}, "r")
    >>> check_report({"schema": "batchscope.report/1", "batches": {}}, "r")
    Traceback (most recent call last):
    ...
    batchscope.errors.UsageError: r is not a batchscope report: batches is an object, not a list.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchscope.errors import UsageError
from batchscope.tracebacks import quote

# report.json nests about 7 levels (hardware.details.matmul.float32.sizes[0].n); anything
# far deeper is not ours, and would cost recursion depth in every reader after us.
MAX_NESTING = 32
# Longest key quoted in a field path (a path may hold up to MAX_NESTING of them).
MAX_QUOTED_KEY = 24


@dataclass(frozen=True)
class Kind:
    """An allowed type of a field: what to call it in a message, and the test."""

    description: str
    test: Callable[[Any], bool]


def is_number(value: Any) -> bool:
    """An int or float that is not a bool (the value checks already made it finite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number_map(value: Any) -> bool:
    return isinstance(value, dict) and all(v is None or is_number(v) for v in value.values())


def _shapes(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(s, list) and all(_is_int(d) for d in s) for s in value)


def _counts(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        _is_int(c) and c >= 0 for c in value)


TEXT = Kind("a string", lambda v: isinstance(v, str))
FLAG = Kind("true or false", lambda v: isinstance(v, bool))
NUMBER = Kind("a number", is_number)
NON_NEGATIVE = Kind("a number ≥ 0", lambda v: is_number(v) and v >= 0)
POSITIVE_INT = Kind("a positive integer", lambda v: _is_int(v) and v > 0)
COUNT = Kind("an integer ≥ 0", lambda v: _is_int(v) and v >= 0)
OBJECT = Kind("an object", lambda v: isinstance(v, dict))
LIST = Kind("a list", lambda v: isinstance(v, list))
NUMBER_MAP = Kind("an object of numbers", _number_map)
SHAPES = Kind("a list of shapes (lists of integers)", _shapes)
COUNTS = Kind("a non-empty list of integers ≥ 0", _counts)

Fields = dict[str, tuple[Kind, bool]]  # name -> (kind, required)


def _optional(**kinds: Kind) -> Fields:
    return {name: (kind, False) for name, kind in kinds.items()}


TOP_FIELDS: Fields = {
    **_optional(schema=TEXT, partial=FLAG, stop_reason=TEXT, model=OBJECT, hardware=OBJECT,
                run=OBJECT, recommendation=OBJECT, flags=LIST, serving=OBJECT,
                allocator=OBJECT),
    "batches": (LIST, True),
}
MODEL_FIELDS = _optional(target=TEXT, dtype=TEXT, mode=TEXT, unit=TEXT, device=TEXT,
                         parameters=COUNT, parameter_bytes=NON_NEGATIVE, threads=COUNT,
                         available_memory_bytes=NON_NEGATIVE, contexts=COUNTS)
HARDWARE_FIELDS = _optional(device=TEXT, name=TEXT, source=TEXT, threads=COUNT,
                            peak_flops_per_s=NUMBER_MAP, ridge_flops_per_byte=NUMBER_MAP,
                            bandwidth_bytes_per_s=NON_NEGATIVE, overhead_s=NON_NEGATIVE)
RUN_FIELDS = _optional(options=OBJECT)
OPTIONS_FIELDS = _optional(latency_limit_s=NON_NEGATIVE, memory_budget_bytes=NON_NEGATIVE)
RECOMMENDATION_FIELDS = _optional(
    batch_size=POSITIVE_INT, rule=TEXT, explanation=TEXT, speedup_from_batching=NUMBER,
    predicted_critical_batch=NUMBER, measured_knee_batch=NUMBER, best_batch_size=POSITIVE_INT,
    best_throughput_per_s=NON_NEGATIVE, batch_size_without_page_faults=POSITIVE_INT)
BATCH_FIELDS: Fields = {
    **_optional(latency_s=OBJECT, throughput_per_s=NON_NEGATIVE,
                peak_memory_bytes=NON_NEGATIVE, time_share=NUMBER_MAP, bytes=NUMBER_MAP,
                flops=NUMBER, profiled_step_s=NON_NEGATIVE, ops=LIST, flags=LIST,
                error=TEXT, op_time_s=NON_NEGATIVE),
    "batch_size": (POSITIVE_INT, True),
    "status": (TEXT, True),
}
LATENCY_FIELDS = _optional(median=NON_NEGATIVE, p25=NON_NEGATIVE, p75=NON_NEGATIVE,
                           min=NON_NEGATIVE, max=NON_NEGATIVE, n=COUNT)
OP_FIELDS = _optional(op_id=TEXT, name=TEXT, module=TEXT, dtype=TEXT, bound=TEXT, calls=COUNT,
                      time_s=NON_NEGATIVE, roof_time_s=NON_NEGATIVE, flops=NUMBER,
                      bytes=NUMBER_MAP, intensity=NUMBER, efficiency=NUMBER, flags=LIST,
                      input_shapes=SHAPES)
SERVING_FIELDS = _optional(contexts=COUNTS, base_context=COUNT, context_grid=LIST,
                           what_if=OBJECT)
GRID_FIELDS: Fields = {
    **_optional(latency_s=OBJECT, input_bytes=NON_NEGATIVE, error=TEXT),
    "batch_size": (POSITIVE_INT, True),
    "context": (COUNT, True),
    "status": (TEXT, True),
}
ALLOCATOR_FIELDS = _optional(batches=LIST, batch_size=POSITIVE_INT,
                             throughput_per_s=NON_NEGATIVE, cost_per_fault_s=NON_NEGATIVE,
                             taken=FLAG, env=OBJECT, set_by=TEXT)
KEPT_FIELDS: Fields = {
    **_optional(latency_s=NON_NEGATIVE, kept_latency_s=NON_NEGATIVE, kept_timed_steps=COUNT,
                throughput_per_s=NON_NEGATIVE, kept_throughput_per_s=NON_NEGATIVE,
                page_faults_per_step=NON_NEGATIVE, kept_page_faults_per_step=NON_NEGATIVE,
                speedup=NON_NEGATIVE, taken=FLAG, error=TEXT),
    "batch_size": (POSITIVE_INT, True),
    "status": (TEXT, True),
}
# Sections of the top level that are objects with known fields.
SECTIONS = {"model": MODEL_FIELDS, "hardware": HARDWARE_FIELDS, "run": RUN_FIELDS,
            "recommendation": RECOMMENDATION_FIELDS, "serving": SERVING_FIELDS,
            "allocator": ALLOCATOR_FIELDS}


def kind_of(value: Any) -> str:
    """What a JSON value is, in words: ``"a string"``, ``"null"``, ``"an object"``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


class _Problem(Exception):
    """A report problem found while checking; :func:`check_report` adds the label."""


def _bad_value(value: Any) -> str | None:
    """Why a single JSON scalar cannot be in a report, or None when it can."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a finite number"
    if _is_int(value) and abs(value) > sys.float_info.max:
        return "an integer is too large to be a measurement"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds a lone surrogate escape (not valid Unicode)"
    return None


def _child(where: str, key: Any) -> str:
    """The path of ``key`` inside ``where``; odd keys are quoted and cut."""
    simple = isinstance(key, str) and key.isidentifier() and len(key) <= MAX_QUOTED_KEY
    name = key if simple else quote(key, MAX_QUOTED_KEY)
    return f"{where}.{name}" if where else name


def _check_values(doc: Any) -> None:
    """Check every value in ``doc``: finite numbers, valid text, bounded nesting.

    Walks the tree with an explicit stack, so a deep document cannot exhaust recursion.

    Raises:
        _Problem: the first bad value, with where it is.
    """
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_NESTING:
            raise _Problem(f"it nests deeper than {MAX_NESTING} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                reason = _bad_value(key)
                if reason is not None:
                    raise _Problem(f"a key in {where or 'the top level'}: {reason}")
                stack.append((item, _child(where, key), depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif value is not None and not isinstance(value, (bool, int, float, str)):
            raise _Problem(f"{where or 'the document'} is {kind_of(value)}, not a JSON value")
        else:
            reason = _bad_value(value)
            if reason is not None:
                raise _Problem(f"{where or 'the document'}: {reason}")


def _check_fields(obj: dict[str, Any], fields: Fields, where: str) -> None:
    for name, (kind, required) in fields.items():
        path = f"{where}.{name}" if where else name
        value = obj.get(name)
        if value is None:
            if required:
                raise _Problem(f"{path} is missing")
            continue
        if not kind.test(value):
            raise _Problem(f"{path} is {kind_of(value)}, not {kind.description}")


def _check_list_of_objects(items: list[Any], fields: Fields, where: str) -> None:
    for i, item in enumerate(items):
        path = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise _Problem(f"{path} is {kind_of(item)}, not an object")
        _check_fields(item, fields, path)


def _check_batch(batch: dict[str, Any], where: str) -> None:
    latency = batch.get("latency_s")
    if latency is not None:
        _check_fields(latency, LATENCY_FIELDS, f"{where}.latency_s")
    _check_list_of_objects(batch.get("ops") or [], OP_FIELDS, f"{where}.ops")


def _check_shape(doc: Any) -> None:
    """Check the sections and fields listed in the tables above.

    Raises:
        _Problem: the first field of the wrong type, with where it is.
    """
    if not isinstance(doc, dict):
        raise _Problem(f"the document is {kind_of(doc)}, not an object")
    _check_fields(doc, TOP_FIELDS, "")
    for section, fields in SECTIONS.items():
        if doc.get(section) is not None:
            _check_fields(doc[section], fields, section)
    options = (doc.get("run") or {}).get("options")
    if options is not None:
        _check_fields(options, OPTIONS_FIELDS, "run.options")
    grid = (doc.get("serving") or {}).get("context_grid") or []
    _check_list_of_objects(grid, GRID_FIELDS, "serving.context_grid")
    for i, point in enumerate(grid):
        if point.get("latency_s") is not None:
            _check_fields(point["latency_s"], LATENCY_FIELDS,
                          f"serving.context_grid[{i}].latency_s")
    _check_list_of_objects((doc.get("allocator") or {}).get("batches") or [], KEPT_FIELDS,
                           "allocator.batches")
    _check_list_of_objects(doc["batches"], BATCH_FIELDS, "batches")
    for i, batch in enumerate(doc["batches"]):
        _check_batch(batch, f"batches[{i}]")


def check_report(doc: Any, label: str) -> None:
    """Raise :class:`UsageError` unless ``doc`` is a report every reader can index safely.

    Args:
        doc: a parsed report.json (or a report dict from the Python API).
        label: how to name the report in the error sentence (its path, "base", "head").

    Raises:
        UsageError: one sentence naming the first problem found.
    """
    try:
        _check_values(doc)
        _check_shape(doc)
    except _Problem as problem:
        raise UsageError(f"{label} is not a batchscope report: {problem}.") from None
