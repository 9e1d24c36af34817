"""One typed payload per flag kind (and per stop and assumption kind): every kind has one,
each round-trips through a record's values (and JSON), a missing key is named when read, and
every recorded report's flags, stop and assumptions read back through their payloads."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from batchscope.records import (
    Assumption,
    AssumptionKind,
    Flag,
    FlagKind,
    Report,
    Stop,
    StopKind,
)
from batchscope.records.codec import decode_report, parse_json
from batchscope.records.flag_payloads import (
    ASSUMPTION_PAYLOADS,
    PAYLOADS,
    STOP_PAYLOADS,
    AssumptionPayload,
    CapStop,
    CeilingSpread,
    Compiled,
    FlagPayload,
    NoisyTiming,
    Payload,
    PayloadError,
    PredictedNotToFit,
    PredictedStop,
    SkippedStop,
    StopPayload,
    assumption_payload_of,
    payload_of,
    stop_payload_of,
)
from batchscope.reports.flag_text import assumption_text, flag_text, stop_text

REPORTS = sorted((Path(__file__).parents[1] / "data" / "reports").rglob("*.json"))

# A value of each field type, to build a payload of every class.
_SAMPLES: dict[Any, Any] = {str: "x", int: 3, float: 0.5, bool: True,
                            list[int]: [2, 4], list[str]: ["a", "b"], list[float]: [0.25, 0.75]}

# Payloads whose fields constrain each other: their own samples, both ways round.
_OWN: dict[type[Payload], list[Payload]] = {
    PredictedNotToFit: [
        PredictedNotToFit(predicted_bytes=3e9, from_batches=[4, 8], budget_bytes=2**31),
        PredictedNotToFit(predicted_bytes=3e9, from_batches=[4, 8], more_bytes=1e9,
                          free_bytes=2**30)],
    SkippedStop: [
        SkippedStop(predicted_bytes=3e9, from_batches=[4, 8], budget_bytes=2**31),
        SkippedStop(predicted_bytes=3e9, from_batches=[4, 8], more_bytes=1e9,
                    free_bytes=2**30),
        SkippedStop()],
}


def _sample(hint: Any) -> Any:
    """A value of ``hint``: of its first arm that is not None, for a union."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return _SAMPLES[hint]


T = TypeVar("T", bound=Payload)


def _payloads(cls: type[T]) -> list[T]:
    """Every field filled, and only the fields without a default."""
    if cls in _OWN:
        return cast(list[T], _OWN[cls])
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    full = cls(**{f.name: _sample(hints[f.name]) for f in fields})
    required = cls(**{f.name: _sample(hints[f.name]) for f in fields
                      if f.default is dataclasses.MISSING})
    return [full, required]


@pytest.mark.parametrize(("registry", "kinds"), [
    (PAYLOADS, FlagKind), (STOP_PAYLOADS, StopKind), (ASSUMPTION_PAYLOADS, AssumptionKind)])
def test_every_kind_has_exactly_one_payload(registry: dict[Any, type[Payload]],
                                            kinds: Any) -> None:
    assert set(registry) == set(kinds)
    classes = list(registry.values())
    assert len(set(classes)) == len(classes) == len(kinds)
    assert all(cls.kind == kind for kind, cls in registry.items())


@pytest.mark.parametrize("cls", list(PAYLOADS.values()), ids=lambda c: c.__name__)
def test_payload_round_trips_through_values(cls: type[FlagPayload]) -> None:
    for p in _payloads(cls):
        flag = Flag.of(p, batch_size=8, op_id="aten::mm#0")
        assert (flag.kind, flag.batch_size, flag.op_id) == (cls.kind, 8, "aten::mm#0")
        assert cls.of(flag) == p
        wired = Flag(flag.kind, 8, None, json.loads(json.dumps(flag.values)))
        assert cls.of(wired) == p
        assert payload_of(wired) == p
        assert isinstance(flag_text(flag), str)


@pytest.mark.parametrize("cls", list(STOP_PAYLOADS.values()), ids=lambda c: c.__name__)
def test_stop_payload_round_trips_through_values(cls: type[StopPayload]) -> None:
    for p in _payloads(cls):
        stop = Stop.of(p, batch_size=8)
        assert (stop.kind, stop.batch_size) == (cls.kind, 8)
        wired = Stop(stop.kind, 8, json.loads(json.dumps(stop.values)))
        assert cls.of(wired) == stop_payload_of(wired) == p
        assert isinstance(stop_text(stop), str)


@pytest.mark.parametrize("cls", list(ASSUMPTION_PAYLOADS.values()), ids=lambda c: c.__name__)
def test_assumption_payload_round_trips_through_values(cls: type[AssumptionPayload]) -> None:
    for p in _payloads(cls):
        assumption = Assumption.of(p, family="matmul")
        assert (assumption.kind, assumption.family) == (cls.kind, "matmul")
        wired = Assumption(assumption.kind, "matmul", json.loads(json.dumps(assumption.values)))
        assert cls.of(wired) == assumption_payload_of(wired) == p
        assert assumption_text(assumption)


def test_omitted_fields_stay_out_of_values() -> None:
    """A key its site writes only sometimes is left out when None, as the sites did."""
    spread = Flag.of(CeilingSpread(dtype="float32", family="matmul", path="mm", size=4096,
                                   best=2e11, median=1e11, spread=0.4))
    assert list(spread.values) == ["dtype", "family", "path", "size", "best", "median",
                                   "spread"]
    assert "at_batch" not in Flag.of(Compiled(compiles_at=[8], compile_s=[1.5])).values


def test_a_missing_key_is_named_not_read_as_zero() -> None:
    flag = Flag(FlagKind.NOISY_TIMING, 8, values={})
    with pytest.raises(PayloadError, match="noisy_timing flag's values do not fit its "
                       "payload, NoisyTiming: Object missing required field `spread`"):
        NoisyTiming.of(flag)
    with pytest.raises(PayloadError, match="spread"):
        flag_text(flag)
    with pytest.raises(PayloadError, match="spread"):
        NoisyTiming.of(Flag(FlagKind.NOISY_TIMING, 8, values={"spread": "wide"}))
    partial = Stop(StopKind.PREDICTED, values={"remaining": [8, 16]})
    with pytest.raises(PayloadError, match=r"predicted stop's values .* `fitted_on`"):
        stop_text(partial)
    with pytest.raises(PayloadError, match="`largest`"):
        CapStop.of(Stop(StopKind.CAP))


def test_a_payload_of_another_kind_is_refused() -> None:
    flag = Flag.of(NoisyTiming(spread=0.3), 8)
    with pytest.raises(PayloadError, match="noisy_timing flag has no CeilingSpread payload"):
        CeilingSpread.of(flag)
    with pytest.raises(PayloadError, match="cap stop has no PredictedStop payload"):
        PredictedStop.of(Stop.of(CapStop(largest=8)))


def test_fields_that_go_together_are_checked() -> None:
    with pytest.raises(PayloadError, match="either 'budget_bytes' or"):
        PredictedNotToFit.from_values({"predicted_bytes": 1.0, "from_batches": [2, 4]})
    with pytest.raises(PayloadError, match="fast without slow"):
        CeilingSpread.from_values({"dtype": "float32", "best": 1.0, "median": 1.0,
                                   "spread": 0.5, "fast": 1.0})


def _records(node: object) -> list[Flag | Stop | Assumption]:
    """Every flag, stop and assumption anywhere in a decoded report."""
    if isinstance(node, (Flag, Stop, Assumption)):
        return [node]
    if isinstance(node, (list, tuple)):
        return [f for item in node for f in _records(item)]
    if isinstance(node, dict):
        return [f for item in node.values() for f in _records(item)]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return [f for field in dataclasses.fields(node)
                for f in _records(getattr(node, field.name))]
    return []


def _flags(node: object) -> list[Flag]:
    return [r for r in _records(node) if isinstance(r, Flag)]


def test_recorded_reports_hold_flags() -> None:
    assert len(REPORTS) >= 5
    kinds = {f.kind for path in REPORTS
             for f in _flags(decode_report(parse_json(path.read_text()), str(path)))}
    assert {FlagKind.NOISY_TIMING, FlagKind.NOTE, FlagKind.PAGE_FAULTS} <= kinds
    others = {r.kind for path in REPORTS
              for r in _records(decode_report(parse_json(path.read_text()), str(path)))}
    assert {StopKind.CAP, StopKind.PLATEAU, AssumptionKind.PATH_SPEED} <= others


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_recorded_reports_flags_read_back(path: Path) -> None:
    report = decode_report(parse_json(path.read_text()), str(path))
    assert isinstance(report, Report)
    for record in _records(report):
        if isinstance(record, Flag):
            assert type(payload_of(record)) is PAYLOADS[record.kind]
            assert flag_text(record)
        elif isinstance(record, Stop):
            assert type(stop_payload_of(record)) is STOP_PAYLOADS[record.kind]
            assert stop_text(record)
        else:
            assert type(assumption_payload_of(record)) is ASSUMPTION_PAYLOADS[record.kind]
            assert assumption_text(record)
