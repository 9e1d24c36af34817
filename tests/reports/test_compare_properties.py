"""Hostile report.json by property: ``diagnose compare`` compares or says one sentence, exit 4.

Whatever the two files hold (any JSON, report-shaped JSON with wrong types, a real report
with one field made hostile), the command must end in a comparison (exit 0 or 1) or in one
``error:`` line with exit 4 -- never a traceback (exit 3) and never an exception escaping
the CLI. ``catch_exceptions=False`` makes an escaping exception fail the test with its
traceback, so hypothesis shrinks it to the smallest file that crashes.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from batchscope.cli import tools_app
from tests.reports.conftest import REPORTS

runner = CliRunner()
MLP = REPORTS / "mlp.json"
SCHEMA = "batchscope.report/1"
REAL = json.loads(MLP.read_text(encoding="utf-8"))
# Exit codes of a finished comparison (no regression, regression) and of a usage error.
COMPARED = (0, 1)
USAGE = 4
# Each CLI call parses, compares and renders a real report (~60 kB): tens of ms. These
# budgets keep the whole file near 10 s on one core.
RANDOM_EXAMPLES = 60
MUTATION_EXAMPLES = 100
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A stand-in string for a number literal that json.dumps cannot write (it overflows a float
# or an int when read back): replaced by the literal in the file's text.
RAW = "\x00raw:"
OVERFLOWING_LITERALS = ("1e400", "-1e400", "9" * 400, "1" * 5000)

# Surrogates included: json.dumps writes them as \udXXX escapes, which json.loads accepts.
any_text = st.text(st.characters(blacklist_categories=()), max_size=12)
huge_ints = st.sampled_from([2**63, -(2**63) - 1, 10**308, 10**309, -(10**400)])
scalars = (st.none() | st.booleans() | st.integers() | huge_ints
           | st.floats(allow_nan=True, allow_infinity=True) | any_text
           | st.sampled_from([RAW + lit for lit in OVERFLOWING_LITERALS]))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)


def _field(kind: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes anything at all."""
    return st.one_of(kind, kind, json_values)


# Sizes collide often, so the base's recommendation usually names a batch the head has too.
sizes = st.sampled_from([1, 2, 4, 8])
numbers = st.floats(min_value=0, max_value=1e12) | st.integers(0, 10**6)
latencies = st.fixed_dictionaries(
    {}, optional={k: _field(numbers) for k in ("median", "p25", "p75")})
ops = st.fixed_dictionaries({}, optional={
    "op_id": _field(st.sampled_from(["mm@0", "add@1"])),
    "name": _field(st.just("mm")), "bound": _field(st.sampled_from(["memory", "compute"])),
    "flags": _field(st.lists(any_text, max_size=2)), "time_s": _field(numbers),
})
batches = st.fixed_dictionaries(
    {"batch_size": _field(sizes), "status": _field(st.sampled_from(["ok", "oom"]))},
    optional={"throughput_per_s": _field(numbers), "latency_s": _field(latencies),
              "ops": _field(st.lists(ops, max_size=2))},
)
report_like = st.fixed_dictionaries(
    {"schema": st.just(SCHEMA) | json_values, "batches": _field(st.lists(batches, max_size=4))},
    optional={
        "recommendation": _field(st.fixed_dictionaries({"batch_size": _field(sizes)})),
        "model": _field(st.fixed_dictionaries({}, optional={"unit": any_text, "mode": any_text})),
        "hardware": _field(st.fixed_dictionaries({}, optional={"name": any_text})),
        "partial": json_values, "flags": json_values,
    },
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path in ``value`` (containers and leaves), skipping the hardware details."""
    if prefix[:2] == ("hardware", "details"):
        return
    yield prefix
    children = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, (*prefix, key))


def _worth_mutating(path: tuple[Any, ...]) -> bool:
    """Batches and ops are alike: any whole batch, but the fields of only the first, the
    last and the recommended one (whose throughput is the gate), and of their first op."""
    if len(path) < 3 or path[0] != "batches":
        return True
    if path[1] not in KEY_BATCHES:
        return False
    return len(path) < 5 or path[2] != "ops" or path[3] == 0


GATE = REAL["recommendation"]["batch_size"]
GATE_INDEX = next(i for i, b in enumerate(REAL["batches"]) if b["batch_size"] == GATE)
KEY_BATCHES = {0, len(REAL["batches"]) - 1, GATE_INDEX}
REAL_PATHS = [p for p in _paths(REAL) if p and _worth_mutating(p)]
DELETE = object()


hostile_values = st.just(DELETE) | scalars | json_values


def mutated(path: tuple[Any, ...], value: Any, real: Any = REAL) -> Any:
    """A copy of ``real`` (the mlp report) with the field at ``path`` set to ``value`` (or
    deleted)."""
    doc = json.loads(json.dumps(real))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def dump(doc: Any) -> str:
    """JSON text of ``doc``, NaN and Infinity included, RAW stand-ins as bare literals."""
    text = json.dumps(doc)  # allow_nan: NaN/Infinity tokens are part of the attack
    for literal in OVERFLOWING_LITERALS:
        text = text.replace(json.dumps(RAW + literal), literal)
    return text


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="compare-props-") as name:
        yield Path(name)


def compare(folder: Path, base: str | Path, head: str | Path) -> Result:
    """``diagnose compare`` on two files or JSON texts (a str is written to a file first)."""
    paths = []
    for name, item in (("base.json", base), ("head.json", head)):
        if isinstance(item, str):
            (folder / name).write_text(item, encoding="utf-8", errors="surrogatepass")
            item = folder / name
        paths.append(str(item))
    return runner.invoke(tools_app, ["compare", *paths], catch_exceptions=False)


def assert_clean(result: Result) -> None:
    """A comparison, or one ``error:`` sentence on stderr and exit 4."""
    assert result.exit_code in (*COMPARED, USAGE), result.output
    if result.exit_code == USAGE:
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: ") and lines[0].endswith("."), lines[0]
        assert "Traceback" not in result.output
    else:
        assert "regression" in result.stdout and result.stderr == ""


@settings(SETTINGS, max_examples=RANDOM_EXAMPLES)
@given(doc=json_values)
def test_any_json_is_compared_or_refused(folder: Path, doc: Any) -> None:
    assert_clean(compare(folder, MLP, dump(doc)))
    assert_clean(compare(folder, dump(doc), MLP))


@settings(SETTINGS, max_examples=RANDOM_EXAMPLES)
@given(base=report_like, head=report_like)
def test_report_shaped_json_is_compared_or_refused(folder: Path, base: Any, head: Any) -> None:
    assert_clean(compare(folder, dump(base), dump(head)))


@settings(SETTINGS, max_examples=MUTATION_EXAMPLES)
@given(path=st.sampled_from(REAL_PATHS), value=hostile_values, as_head=st.booleans())
# What the properties found in the reader before it checked the shape (kept as regressions):
@example(path=("batches", GATE_INDEX, "ops", 0), value=None, as_head=False)  # AttributeError
@example(path=("batches", GATE_INDEX, "throughput_per_s"), value=10**309, as_head=False)
@example(path=("batches", GATE_INDEX, "latency_s", "p25"), value=10**309, as_head=True)
@example(path=("model", "target"), value="\ud800", as_head=True)  # UnicodeEncodeError
@example(path=("recommendation", "batch_size"), value=True, as_head=False)  # read as batch 1
def test_a_real_report_with_one_hostile_field(folder: Path, path: tuple[Any, ...], value: Any,
                                              as_head: bool) -> None:
    text = dump(mutated(path, value))
    assert_clean(compare(folder, MLP, text) if as_head else compare(folder, text, MLP))


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,  # deeper than the parser's recursion
    '{"schema": "%s", "batches": [], "deep": %s}' % (SCHEMA, "[" * 40 + "]" * 40),
    '{"schema": "%s", "batches": [], "n": %s}' % (SCHEMA, "7" * 5000),
    '{"schema": "%s", "batches": [], "x": 1e400}' % SCHEMA,
    '{"schema": "%s", "batches": [], "model": {"target": "\\ud800"}}' % SCHEMA,
    '{"schema": ["%s"], "batches": []}' % SCHEMA,
    '{"schema": "%s", "batches": []}\n\n{}' % SCHEMA,
    "",
])
def test_hand_picked_hostile_files_exit_4(folder: Path, text: str) -> None:
    result = compare(folder, MLP, text)
    assert result.exit_code == USAGE, result.output
    assert_clean(result)


def test_a_file_that_is_not_utf8_exits_4(folder: Path) -> None:
    bad = folder / "latin1.json"
    bad.write_bytes('{"schema": "batchscope.report/1", "batches": [], "x": "é"}'.encode("latin-1"))
    result = runner.invoke(tools_app, ["compare", str(MLP), str(bad)], catch_exceptions=False)
    assert result.exit_code == USAGE and "UTF-8" in result.stderr
    assert_clean(result)


def test_a_folder_instead_of_a_file_exits_4(folder: Path) -> None:
    result = runner.invoke(tools_app, ["compare", str(MLP), str(folder)], catch_exceptions=False)
    assert_clean(result)
    assert result.exit_code == USAGE


def test_the_mutation_strategy_reaches_the_fields_compare_reads() -> None:
    # Guard for the strategy itself: the fields the gate reads are among the mutated paths.
    index = GATE_INDEX
    for path in (("batches", index, "throughput_per_s"), ("recommendation", "batch_size"),
                 ("batches", index, "latency_s", "median"), ("batches", 0, "ops", 0, "op_id"),
                 ("batches", 3), ("model", "unit"), ("hardware", "name")):
        assert path in REAL_PATHS
    assert ("batches", 3, "ops", 0, "bound") not in REAL_PATHS or 3 in KEY_BATCHES
    assert REAL["batches"][index]["status"] == "ok"
