"""The one serialisation of records: to JSON-safe values, and back through one typed decoder.

:func:`encode` turns a :class:`~batchscope.records.report.Report` into the dict report.json
holds (numbers only: the reports layer adds the sentences). :func:`decode_report` is the one
way back: a dict or JSON text from outside becomes a typed Report or raises
:class:`~batchscope.errors.UsageError` with one sentence naming the field, e.g.
``head.json is not a batchscope report: batches[0].batch_size is a string, not an integer.``
Types come from the dataclasses themselves (msgspec reads their annotations), so a section
added to the report is checked the day it is added.

Example:
    >>> decode_report({"schema": "batchscope.report/2", "model": {"target": "m"},
    ...                "hardware": None, "batches": [], "recommendation": None,
    ...                "run": {}}, "r").model.target
    'm'
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from batchscope.errors import UsageError
from batchscope.records.ab import AB_SCHEMA, ABMeasurement
from batchscope.records.flag_payloads import Note, NoteStop
from batchscope.records.flags import Flag, Stop
from batchscope.records.measurement import PeakMemoryMethod
from batchscope.records.report import SCHEMA, SCHEMA_1, Report
from batchscope.tracebacks import quote
from batchscope.typed_json import decode, to_builtins

__all__ = ["decode", "decode_ab", "decode_report", "dumps", "encode", "to_builtins"]

# report.json nests about 7 levels (hardware.details.matmul.float32.sizes[0].n); anything
# far deeper is not ours, and would cost recursion depth in every reader after us.
MAX_NESTING = 32
# A float64 tops out near 1.8e308: an integer literal longer than this cannot be a
# measurement, and is refused before Python spends time converting it.
MAX_INT_DIGITS = 320


def encode(report: Report) -> dict[str, Any]:
    """The report as report.json's dict, before the reports layer adds its sentences."""
    doc: dict[str, Any] = {"schema": SCHEMA, **to_builtins(report)}
    if report.hardware is not None:  # derived, for readers without our code
        doc["hardware"]["ridge_flops_per_byte"] = report.hardware.ridge_flops_per_byte
    return doc


def dumps(doc: Any) -> str:
    """JSON text of ``doc``; NaN or Infinity anywhere is a bug and raises ValueError."""
    return json.dumps(doc, indent=1, allow_nan=False, ensure_ascii=False)


class _Problem(Exception):
    """What is wrong with a document; the caller adds which document."""


def _reject_constant(name: str) -> Any:
    raise _Problem(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    """``float(text)``, refusing a literal beyond float64 (``1e400`` would read as inf)."""
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= MAX_QUOTED_KEY else text[: MAX_QUOTED_KEY - 1] + "…"
        raise _Problem(f"the number {shown} is too large to be a measurement")
    return value


def _bounded_int(text: str) -> int:
    """``int(text)``, refusing integers far beyond any measurement before converting them."""
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Problem(f"an integer of {digits:,} digits is too large to be a measurement")
    return int(text)


def parse_json(text: str) -> Any:
    """Parse JSON from outside, refusing NaN/Infinity, absurd numbers, invalid text and deep
    nesting (every check of :func:`_check_tree`).

    Raises:
        _Problem: what is wrong, in words.
    """
    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                         parse_int=_bounded_int)
    except RecursionError:
        raise _Problem("its JSON nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise _Problem(f"it is not valid JSON ({exc})") from None
    _check_tree(doc)
    return doc


def _child(where: str, key: str | int) -> str:
    """The path of ``key`` inside ``where``; odd keys are quoted and cut."""
    simple = isinstance(key, str) and key.isidentifier() and len(key) <= MAX_QUOTED_KEY
    name = key if simple else quote(key, MAX_QUOTED_KEY)
    return f"{where}.{name}" if where else str(name)


_JSON_CONSTANTS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _bad_scalar(value: Any) -> str | None:
    """Why a value cannot be a JSON scalar of a report, or None when it can."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return ("is an integer too large to be a measurement"
                if abs(value) > sys.float_info.max else None)
    if isinstance(value, float):
        return None if math.isfinite(value) else \
            f"is {_JSON_CONSTANTS[repr(value)]}, not a finite number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "holds a lone surrogate escape (not valid Unicode)"
        return None
    return f"is {_kind_of(value)}, not a JSON value"


def _check_tree(doc: Any) -> None:
    """Every value a JSON value report.json could hold: objects with string keys, lists,
    finite numbers within float64, valid Unicode text, at most :data:`MAX_NESTING` deep.

    The parser already refused most of this in a file; a dict from the Python API is
    checked here alone. Walks with an explicit stack, so neither depth nor a cycle can
    exhaust recursion.

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
                # json.dumps writes an integer key as a string; anything else is not JSON's
                reason = (_bad_scalar(key) if isinstance(key, (str, int))
                          and not isinstance(key, bool) else f"is {_kind_of(key)}, not a string")
                if reason is not None:
                    raise _Problem(f"a key in {where or 'the document'} {reason}")
                stack.append((item, _child(where, key), depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        else:
            reason = _bad_scalar(value)
            if reason is not None:
                raise _Problem(f"{where or 'the document'} {reason}")


# msgspec's words for JSON types, and ours: what a field is, and what it should be.
_GOT = {"int": "an integer", "float": "a number", "str": "a string", "bool": "a boolean",
        "object": "an object", "array": "a list", "null": "null"}
_WANT = {**_GOT, "bool": "true or false"}
# Where msgspec says a problem is: " - at `$.batches[3].status`", or for a dict's key
# " - at `key` in `$.run.ranks`".
_WHERE = r"(?: - at (?P<key>`key` in )?`\$(?P<at>[^`]*)`)?$"
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`" + _WHERE, re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`" + _WHERE, re.DOTALL)
_AT = re.compile(r"^(?P<what>.*?)" + _WHERE, re.DOTALL)
# Longest key quoted in a field path, and longest message of msgspec's quoted whole.
MAX_QUOTED_KEY = 24
MAX_MESSAGE_CHARS = 200


def _path(match: re.Match[str]) -> str:
    """``.batches[3].status`` -> ``batches[3].status``; a key of ``.run.ranks`` -> ``a key
    in run.ranks`` (msgspec writes a dict's key as ``[...]``, so no user text reaches it)."""
    where = (match["at"] or "").lstrip(".") or "the document"
    return f"a key in {where}" if match["key"] else where


def _wanted(want: str) -> str:
    """``int | null`` -> ``an integer or null``."""
    words = [_WANT.get(w.strip(), f"`{w.strip()}`") for w in want.split("|")]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _sentence(error: msgspec.ValidationError) -> str:
    """msgspec's message as the one sentence a user reads (without the final period)."""
    text = str(error)
    match = _EXPECTED.match(text)
    if match:
        got = _GOT.get(match["got"], f"`{match['got']}`")
        return f"{_path(match)} is {got}, not {_wanted(match['want'])}"
    match = _MISSING.match(text)
    if match:
        where = (match["at"] or "").lstrip(".")
        return f"{where + '.' if where else ''}{match['name']} is missing"
    match = _AT.match(text)
    what = match["what"] if match else text
    what = _one_line(what[:1].lower() + what[1:])
    return f"{_path(match)}: {what}" if match and match["at"] is not None else what


def _one_line(text: str) -> str:
    """``text`` on one line of at most :data:`MAX_MESSAGE_CHARS` characters."""
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


# What a number read by every renderer must be: a name for the sentence, and the test.
_SIZE = ("an integer ≥ 1", lambda v: v >= 1)
_NON_NEGATIVE = ("a number ≥ 0", lambda v: v >= 0)
_POSITIVE = ("a number > 0", lambda v: v > 0)
_SHARE = ("a share in (0, 1]", lambda v: 0 < v <= 1)
_Range = tuple[str, Callable[[float], bool]]


def _check_ranges(report: Report) -> None:
    """The few numbers readers divide by or plot on a log axis are in range: batch sizes
    ≥ 1, measured times, throughputs and bytes ≥ 0, the machine's bandwidth > 0.

    Raises:
        _Problem: the first number out of range, with where it is.
    """
    checks: list[tuple[str, float | None, _Range]] = []
    for i, b in enumerate(report.batches):
        at = f"batches[{i}]"
        checks += [(f"{at}.batch_size", b.batch_size, _SIZE),
                   (f"{at}.throughput_per_s", b.throughput_per_s, _NON_NEGATIVE),
                   (f"{at}.peak_memory_bytes", b.peak_memory_bytes, _NON_NEGATIVE),
                   (f"{at}.profiled_step_s", b.profiled_step_s, _NON_NEGATIVE),
                   (f"{at}.op_time_s", b.op_time_s, _NON_NEGATIVE)]
        if b.latency_s is not None:
            lat = b.latency_s
            checks += [(f"{at}.latency_s.{key}", value, _NON_NEGATIVE) for key, value in (
                ("median", lat.median), ("p25", lat.p25), ("p75", lat.p75), ("min", lat.min),
                ("max", lat.max))]
        checks += [(f"{at}.ops[{j}].time_s", op.time_s, _NON_NEGATIVE)
                   for j, op in enumerate(b.ops)]
    if report.recommendation is not None:
        rec = report.recommendation
        checks += [("recommendation.batch_size", rec.batch_size, _SIZE),
                   ("recommendation.near_best_share", rec.near_best_share, _SHARE),
                   ("recommendation.rule.share", rec.rule.share, _SHARE)]
    hw = report.hardware
    if hw is not None:
        checks += [("hardware.bandwidth_bytes_per_s", hw.bandwidth_bytes_per_s, _POSITIVE),
                   ("hardware.overhead_s", hw.overhead_s, _NON_NEGATIVE)]
        checks += [(_child("hardware.peak_flops_per_s", key), value, _NON_NEGATIVE)
                   for key, value in hw.peak_flops_per_s.items()]
    _check(checks)


def _check(checks: list[tuple[str, float | None, _Range]]) -> None:
    """Raise :class:`_Problem` for the first value (not None) that fails its range."""
    for where, value, (wanted, test) in checks:
        if value is not None and not test(value):
            raise _Problem(f"{where} is {quote(value, MAX_QUOTED_KEY)}, not {wanted}")


def decode_report(doc: Any, label: str) -> Report:
    """A report.json document (a dict or its JSON text) as a typed :class:`Report`.

    Schema 1 documents (flags, the stop and the rule as sentences) are read too: their
    sentences become NOTE kinds that the renderers print as they were.

    What a reader may rely on afterwards: every field has its type (and every number is
    finite), batch sizes are ≥ 1, measured times, throughputs and bytes are ≥ 0, and the
    hardware's bandwidth is > 0 (see :func:`_check_ranges`).

    Raises:
        UsageError: one sentence naming ``label`` and the first problem found (exit 4);
            never anything else, whatever ``doc`` holds.
    """
    return _decode_document(doc, label, "a batchscope report", _report_of)


def _report_of(doc: dict[str, Any]) -> Report:
    schema = doc.get("schema")
    if schema == SCHEMA_1:
        doc = _from_schema_1(doc)
    elif schema != SCHEMA:
        what = "no schema field" if schema is None else f"schema {quote(schema)}"
        raise _Problem(f"it holds {what}; expected a report of schema {SCHEMA!r}")
    report = decode(doc, Report)
    _check_ranges(report)
    return report


def decode_ab(doc: Any, label: str) -> ABMeasurement:
    """An ``ab.json`` document (a dict or its JSON text) as the typed measurement it holds.

    Only the measurement is read (both sides, their work, the pairs): the verdict written
    beside it is the writer's, so a reader judges the measurement again
    (``reports.ab_compare.judge``) with its own threshold. Afterwards every field has its
    type, the batch size is ≥ 1, every pair's latencies are > 0 (the ratio divides by
    them), and the work counts are ≥ 0.

    Raises:
        UsageError: one sentence naming ``label`` and the first problem found (exit 4);
            never anything else, whatever ``doc`` holds.
    """
    return _decode_document(doc, label, "a batchscope A/B result", _ab_of)


def _ab_of(doc: dict[str, Any]) -> ABMeasurement:
    schema = doc.get("schema")
    if schema != AB_SCHEMA:
        what = "no schema field" if schema is None else f"schema {quote(schema)}"
        raise _Problem(f"it holds {what}; expected an A/B result of schema {AB_SCHEMA!r}")
    if "measurement" not in doc:
        raise _Problem("measurement is missing")
    try:
        m = decode(doc["measurement"], ABMeasurement)
    except msgspec.ValidationError as error:  # its paths start below measurement
        raise _Problem(_inside("measurement", _sentence(error))) from None
    checks: list[tuple[str, float | None, _Range]] = [
        ("measurement.batch_size", m.batch_size, _SIZE),
        ("measurement.block_s", m.block_s, _NON_NEGATIVE)]
    for i, p in enumerate(m.pairs):
        checks += [(f"measurement.pairs[{i}].base_latency_s", p.base_latency_s, _POSITIVE),
                   (f"measurement.pairs[{i}].head_latency_s", p.head_latency_s, _POSITIVE)]
    for side in ("base", "head"):
        work = getattr(m, side).work
        if work is not None:
            checks += [(f"measurement.{side}.work.{key}", getattr(work, key), _NON_NEGATIVE)
                       for key in ("flops", "bytes", "op_calls", "kernel_calls")]
    _check(checks)
    return m


def _inside(field: str, sentence: str) -> str:
    """A sentence about a path inside a sub-document, the path put under ``field``:
    ``pairs[1].x is ...`` -> ``measurement.pairs[1].x is ...``, ``the document is ...`` ->
    ``measurement is ...``."""
    key = "a key in "
    prefix, rest = (key, sentence[len(key):]) if sentence.startswith(key) else ("", sentence)
    if rest.startswith("the document"):
        return f"{prefix}{field}{rest[len('the document'):]}"
    return f"{prefix}{field}.{rest}"


T = TypeVar("T")


def _decode_document(doc: Any, label: str, what: str,
                     read: Callable[[dict[str, Any]], T]) -> T:
    """``read`` of a JSON document from outside (a dict or its text), every problem one
    sentence: "``label`` is not ``what``: ...".

    Raises:
        UsageError: the first problem found; never anything else, whatever ``doc`` holds.
    """
    try:
        if isinstance(doc, (str, bytes)):
            doc = parse_json(doc if isinstance(doc, str) else doc.decode("utf-8"))
        else:
            _check_tree(doc)
        if not isinstance(doc, dict):
            raise _Problem(f"the document is {_kind_of(doc)}, not an object")
        return read(doc)
    except _Problem as problem:
        raise UsageError(f"{label} is not {what}: {problem}.") from None
    except msgspec.ValidationError as error:
        raise UsageError(f"{label} is not {what}: {_sentence(error)}.") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{label} is not {what}: byte {exc.start} is not UTF-8.") from None
    except (ValueError, TypeError, RecursionError) as exc:  # a checked tree should not get here
        raise UsageError(f"{label} is not {what}: {_one_line(str(exc))}.") from None


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a Python {type(value).__name__}"


# -- schema 1 ----------------------------------------------------------------------------------
# How schema 1 named each peak-memory method: by how its sentence began.
_METHODS_1 = (
    ("torch.cuda.max_memory_allocated", PeakMemoryMethod.CUDA_MAX_ALLOCATED),
    ("peak resident set size of the worker process", PeakMemoryMethod.WORKER_PEAK_RSS),
    ("lifetime peak resident set size of the worker", PeakMemoryMethod.LIFETIME_PEAK_RSS),
    ("lifetime peak resident set size (ru_maxrss)", PeakMemoryMethod.LIFETIME_MAXRSS),
)


def _note(text: Any) -> dict[str, Any]:
    note: dict[str, Any] = to_builtins(Flag.of(Note(text=str(text))))
    return note


def _notes(flags: Any) -> Any:
    """Schema 1's flag sentences as NOTE flags; anything but a list of them is left for the
    decoder to name (null: no flags)."""
    if flags is None:
        return []
    return [_note(f) for f in flags] if isinstance(flags, list) else flags


def _from_schema_1(doc: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 document in schema 2's shape: sentences kept as NOTE kinds, fields that
    moved put where schema 2 has them. What schema 1 did not record stays at its default."""
    doc = dict(doc)
    doc["schema"] = SCHEMA
    if "flags" in doc:
        doc["flags"] = _notes(doc["flags"])
    reason = doc.pop("stop_reason", None)
    if isinstance(reason, str) and reason:
        doc["stop"] = to_builtins(Stop.of(NoteStop(text=reason)))
    model = doc.get("model")
    if isinstance(model, dict):
        doc["model"] = {k: v for k, v in model.items() if v is not None}
    run = doc.get("run")
    if isinstance(run, dict):
        run = {k: v for k, v in run.items() if k in ("tool_version", "torch_version",
                                                    "started_at", "wall_s", "batch_size_known")}
        run["source"] = "trace" if (doc.get("run") or {}).get("source") == "trace" else "sweep"
        doc["run"] = run
    batches = doc.get("batches")
    if isinstance(batches, list):
        doc["batches"] = [_batch_1(b) if isinstance(b, dict) else b for b in batches]
    rec = doc.get("recommendation")
    if isinstance(rec, dict):
        doc["recommendation"] = _recommendation_1(rec)
    hardware = doc.get("hardware")
    if isinstance(hardware, dict):
        doc["hardware"] = _hardware_1(hardware)
    for section in ("distributed", "serving", "allocator", "sequence_grid", "estimates",
                    "prediction"):  # schema 1's shapes of these were not checked: dropped
        doc.pop(section, None)
    return doc


def _hardware_1(hardware: dict[str, Any]) -> dict[str, Any]:
    """Schema 1's ceilings: the per-op floor's figures were one key per op beside
    ``floor_s`` (now under ``overhead.ops``); a datasheet's roofs carried a sentence
    (``note``) and their datasheet row untyped, which schema 2 leaves out."""
    hardware = dict(hardware)
    details = hardware.get("details")
    if isinstance(details, dict):
        details = {k: v for k, v in details.items() if k != "note"}
        overhead = details.get("overhead")
        if isinstance(overhead, dict) and "ops" not in overhead:
            details["overhead"] = {"ops": {k: v for k, v in overhead.items() if k != "floor_s"},
                                   "floor_s": overhead.get("floor_s")}
        hardware["details"] = details
    if hardware.get("source") == "datasheet":
        hardware.pop("spec", None)
    return hardware


def _batch_1(batch: dict[str, Any]) -> dict[str, Any]:
    batch = dict(batch)
    method = batch.get("peak_memory_method")
    if isinstance(method, str):
        batch["peak_memory_method"] = next(
            (m.value for start, m in _METHODS_1 if method.startswith(start)), "")
    if "flags" in batch:
        batch["flags"] = _notes(batch["flags"])
    if isinstance(batch.get("ops"), list):
        batch["ops"] = [{**op, "flags": _notes(op.get("flags"))} if isinstance(op, dict) else op
                        for op in batch["ops"]]
    batch.pop("nvml", None)  # schema 1 kept NVML's window untyped
    return batch


# Schema 1's energy rule: "... within 11% of the lowest measured (0.0123 J/token at batch 8)".
_ENERGY_RULE_1 = re.compile(r"^smallest batch size whose energy per .*? of the lowest measured "
                            r"\((?P<best>\d+(?:\.\d+)?(?:e[+-]?\d+)?) J/.*? at batch "
                            r"(?P<batch>\d{1,18})\)")


def _number(value: Any, default: float) -> float:
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)
    return value if finite else default


def _rule_1(rec: dict[str, Any]) -> dict[str, Any]:
    """Schema 1's rule sentence as a rule of schema 2, by how the sentence began. The limits
    it excluded were only words; they are not kept."""
    said = rec.get("rule")
    sentence = said if isinstance(said, str) else ""
    share = _number(rec.get("near_best_share"), 0.9)
    best_batch = rec.get("best_batch_size") or rec["batch_size"]
    rule = {"kind": "near_best", "share": share, "best_batch_size": best_batch,
            "best_value": _number(rec.get("best_throughput_per_s"), 0.0)}
    energy = _ENERGY_RULE_1.match(sentence)
    if sentence.startswith("the only batch size measured"):
        rule["kind"] = "only_one"
    elif sentence.startswith("energy objective unavailable"):
        rule["kind"] = "energy_unavailable"
    elif energy and math.isfinite(float(energy["best"])):
        rule.update(kind="energy", best_value=float(energy["best"]),
                    best_batch_size=int(energy["batch"]))
    return rule


def _recommendation_1(rec: dict[str, Any]) -> dict[str, Any] | None:
    if not isinstance(rec.get("batch_size"), int):
        return None
    rule = _rule_1(rec)
    rec = {k: v for k, v in rec.items() if k not in ("rule", "explanation", "excluded",
                                                    "accumulation", "prediction")}
    rec["rule"] = rule
    return rec
