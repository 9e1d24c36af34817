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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from batchscope.cli import tools_app
from batchscope.errors import UsageError
from batchscope.records import SCHEMA, Report
from batchscope.records.codec import decode_report
from batchscope.records.report import SCHEMA_1
from tests.reports.conftest import REPORTS

runner = CliRunner()
MLP = REPORTS / "mlp.json"
REAL = json.loads(MLP.read_text(encoding="utf-8"))
# The same sweep as recorded at schema 1 (sentences where schema 2 has kinds): still read.
MLP_1 = REPORTS / "schema1" / "mlp.json"
REAL_1 = json.loads(MLP_1.read_text(encoding="utf-8"))
# Exit codes of a finished comparison (no regression, regression) and of a usage error.
COMPARED = (0, 1)
USAGE = 4
# Each CLI call parses, compares and renders a real report (~60 kB): tens of ms. These
# budgets keep the whole file near 10 s on one core.
RANDOM_EXAMPLES = 60
MUTATION_EXAMPLES = 100
SCHEMA_1_MUTATION_EXAMPLES = 40
DICT_EXAMPLES = 150  # decode_report alone, no CLI: ~1 ms each
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A stand-in string for a number literal that json.dumps cannot write (it overflows a float
# or an int when read back): replaced by the literal in the file's text.
RAW = "\x00raw:"
OVERFLOWING_LITERALS = ("1e400", "-1e400", "9" * 400, "1" * 5000)

# Surrogates included: json.dumps writes them as \udXXX escapes, which json.loads accepts.
any_text = st.text(st.characters(blacklist_categories=()), max_size=12)
# Text a report batchscope writes can hold: valid Unicode. The loader refuses a lone
# surrogate with one sentence (test_compare.py, test_json_report.py), so a plausible report
# draws its text without them, or a draw of one fails the test at random (it did, in CI).
report_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
huge_ints = st.sampled_from([2**63, -(2**63) - 1, 10**308, 10**309, -(10**400)])
scalars = (st.none() | st.booleans() | st.integers() | huge_ints
           | st.floats(allow_nan=True, allow_infinity=True) | any_text
           | st.sampled_from([RAW + lit for lit in OVERFLOWING_LITERALS]))
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)


Field = Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]]


def _hostile(kind: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a plausible value, sometimes anything at all."""
    return st.one_of(kind, kind, json_values)


def _plausible(kind: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return kind


# Sizes collide often, so the base's recommendation usually names a batch the head has too.
sizes = st.sampled_from([1, 2, 4, 8])
numbers = st.floats(min_value=0, max_value=1e12) | st.integers(0, 10**6)


def report_shaped(field: Field) -> st.SearchStrategy[Any]:
    """A report.json of either schema, each field the record requires (records/report.py)
    drawn through ``field``: :func:`_plausible` gives reports the loader must take,
    :func:`_hostile` reports with any number of fields of the wrong type or value."""
    latencies = st.fixed_dictionaries(
        {"median": field(numbers), "p25": field(numbers), "p75": field(numbers),
         "n": field(st.integers(0, 99))},
        optional={k: field(numbers) for k in ("min", "max")})
    ops = st.fixed_dictionaries({
        "op_id": field(st.sampled_from(["mm@0", "add@1"])), "name": field(st.just("mm")),
        "input_shapes": field(st.just([[2, 3]])), "dtype": field(st.just("float32")),
        "module": field(st.just("")), "calls": field(st.integers(1, 3)),
        "time_s": field(numbers), "flops": field(st.none() | st.integers(0, 10**9)),
        "bytes": field(st.just({})),
    }, optional={
        "bound": field(st.sampled_from(["memory", "compute"])),
        "flags": field(st.just([])),
    })
    batches = st.fixed_dictionaries(
        {"batch_size": field(sizes), "status": field(st.sampled_from(["ok", "oom"]))},
        optional={"throughput_per_s": field(numbers), "latency_s": field(latencies),
                  "ops": field(st.lists(ops, max_size=2))},
    )
    rules = st.fixed_dictionaries({
        "kind": field(st.sampled_from(["near_best", "only_one"])), "share": field(st.just(0.9)),
        "best_batch_size": field(sizes), "best_value": field(numbers),
    })  # schema 1's sentence is read as this rule
    recommendations = st.fixed_dictionaries({
        "batch_size": field(sizes), "rule": field(rules),
        "speedup_from_batching": field(st.none() | numbers),
        "speedup_baseline_batch": field(st.none() | sizes),
        "predicted_critical_batch": field(st.none() | numbers),
        "measured_knee_batch": field(st.none() | numbers),
        "measured_knee_within_sweep": field(st.booleans()),
    })
    hardware = st.fixed_dictionaries({
        "device": field(st.just("cpu")), "name": field(report_text),
        "peak_flops_per_s": field(st.just({"float32": 1e11})),
        "bandwidth_bytes_per_s": field(st.floats(1, 1e12)), "overhead_s": field(numbers)})
    documents = st.fixed_dictionaries(
        {"schema": field(st.sampled_from([SCHEMA, SCHEMA_1])),
         "model": field(st.fixed_dictionaries({"target": field(report_text)}, optional={
             "unit": field(report_text),
             "mode": field(st.sampled_from(["inference", "train"]))})),
         "run": field(st.just({})),
         "batches": field(st.lists(batches, max_size=4)),
         "recommendation": field(recommendations | recommendations | st.none()),
         "hardware": field(st.none() | hardware)},
        optional={"partial": field(st.booleans()), "flags": field(st.just([]))},
    )
    return st.tuples(documents, st.floats(1e-3, 1e12)).map(_with_gate)


def _with_gate(drawn: tuple[Any, float]) -> Any:
    """The document with its recommended batch size measured (a gate to compare at), where
    it has a recommendation and its shape lets one be added."""
    doc, throughput = drawn
    rec, batches = doc.get("recommendation"), doc.get("batches")
    if isinstance(rec, dict) and rec.get("batch_size") in (1, 2, 4, 8) and \
            isinstance(batches, list):
        doc = {**doc, "batches": [*batches, {
            "batch_size": rec["batch_size"], "status": "ok", "throughput_per_s": throughput,
            "latency_s": {"median": 1 / throughput, "p25": 0.9 / throughput,
                          "p75": 1.1 / throughput, "n": 10}}]}
    return doc


report_like = report_shaped(_hostile)
plausible_reports = report_shaped(_plausible)


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


REAL_1_PATHS = [p for p in _paths(REAL_1) if p and _worth_mutating(p)]
# What a Python caller may hand decode_report that no JSON file holds.
python_only = st.sampled_from([
    float("nan"), float("inf"), -float("inf"), 10**400, -(10**5000), "\ud800", b"bytes",
    {1, 2}, (1, "a"), {(1, 2): 3}, {None: 1}, object(), 1j,
])


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
        verdicts = ("regression", "inconclusive")  # "no regression" holds the first
        assert any(v in result.stdout for v in verdicts) and result.stderr == ""


@pytest.mark.slow
@settings(SETTINGS, max_examples=RANDOM_EXAMPLES)
@given(doc=json_values)
def test_any_json_is_compared_or_refused(folder: Path, doc: Any) -> None:
    assert_clean(compare(folder, MLP, dump(doc)))
    assert_clean(compare(folder, dump(doc), MLP))


@pytest.mark.slow
@settings(SETTINGS, max_examples=RANDOM_EXAMPLES)
@given(base=report_like, head=report_like)
def test_report_shaped_json_is_compared_or_refused(folder: Path, base: Any, head: Any) -> None:
    assert_clean(compare(folder, dump(base), dump(head)))


@pytest.mark.slow
@settings(SETTINGS, max_examples=RANDOM_EXAMPLES)
@given(base=plausible_reports, head=plausible_reports)
def test_plausible_reports_of_either_schema_are_compared(folder: Path, base: Any,
                                                         head: Any) -> None:
    # The loader takes every report of the right shape; the only refusal left is a base
    # whose recommended batch size was not measured (nothing to hold the head to).
    result = compare(folder, dump(base), dump(head))
    assert_clean(result)
    assert result.exit_code in COMPARED or "no recommended batch size" in result.stderr, \
        result.stderr


@settings(SETTINGS, max_examples=MUTATION_EXAMPLES)
@given(path=st.sampled_from(REAL_PATHS), value=hostile_values, as_head=st.booleans())
# What the properties found in the reader before it checked the shape (kept as regressions):
@pytest.mark.slow
@example(path=("batches", GATE_INDEX, "ops", 0), value=None, as_head=False)  # AttributeError
@example(path=("batches", GATE_INDEX, "throughput_per_s"), value=10**309, as_head=False)
@example(path=("batches", GATE_INDEX, "latency_s", "p25"), value=10**309, as_head=True)
@example(path=("model", "target"), value="\ud800", as_head=True)  # UnicodeEncodeError
@example(path=("recommendation", "batch_size"), value=True, as_head=False)  # read as batch 1
def test_a_real_report_with_one_hostile_field(folder: Path, path: tuple[Any, ...], value: Any,
                                              as_head: bool) -> None:
    text = dump(mutated(path, value))
    assert_clean(compare(folder, MLP, text) if as_head else compare(folder, text, MLP))


@pytest.mark.slow
@settings(SETTINGS, max_examples=SCHEMA_1_MUTATION_EXAMPLES)
@given(path=st.sampled_from(REAL_1_PATHS), value=hostile_values, as_head=st.booleans())
@example(path=("recommendation", "rule"), value=None, as_head=False)
@example(path=("batches", GATE_INDEX, "ops", 0, "flags"), value=5, as_head=True)
@example(path=("flags",), value="not a list", as_head=False)
def test_a_schema_1_report_with_one_hostile_field(folder: Path, path: tuple[Any, ...],
                                                  value: Any, as_head: bool) -> None:
    text = dump(mutated(path, value, REAL_1))
    assert_clean(compare(folder, MLP, text) if as_head else compare(folder, text, MLP))


@settings(SETTINGS, max_examples=DICT_EXAMPLES)
@given(path=st.sampled_from(REAL_PATHS), value=hostile_values | python_only,
       schema_1=st.booleans())
@pytest.mark.slow
@example(path=("model", "target"), value=float("nan"), schema_1=False)
@example(path=("hardware", "name"), value={1, 2}, schema_1=False)
@example(path=("batches",), value=[{"batch_size": 10**5000, "status": "ok"}], schema_1=True)
def test_decode_report_takes_a_dict_or_says_one_sentence(path: tuple[Any, ...], value: Any,
                                                         schema_1: bool) -> None:
    # A dict from the Python API, never through JSON text: NaN, sets, huge ints reach the
    # loader as they are. It returns a typed report or raises UsageError, nothing else.
    doc = mutated(path, DELETE, REAL) if value is DELETE else json.loads(json.dumps(REAL))
    if value is not DELETE:
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value  # as it is: no JSON round trip
    if schema_1:
        doc["schema"] = SCHEMA_1
    try:
        assert isinstance(decode_report(doc, "r"), Report)
    except UsageError as error:
        message = str(error)
        assert message.startswith("r is not a batchscope report: ") and message.endswith(".")
        assert "\n" not in message and len(message) < 400, message


# A report with nothing measured, valid at schema 2: each file below breaks one thing.
EMPTY = (f'"schema": "{SCHEMA}", "model": {{"target": "m.py"}}, "hardware": null, '
         '"recommendation": null, "run": {}')


@pytest.mark.parametrize(("text", "said"), [
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),  # deeper than the parser's recursion
    (f'{{{EMPTY}, "batches": [], "deep": {"[" * 40 + "]" * 40}}}', "nests deeper than"),
    (f'{{{EMPTY}, "batches": [], "n": {"7" * 5000}}}', "5,000 digits"),
    (f'{{{EMPTY}, "batches": [], "n": {"7" * 310}}}', "integer too large"),
    (f'{{{EMPTY}, "batches": [], "x": 1e400}}', "1e400 is too large"),
    (f'{{{EMPTY}, "batches": [], "x": -Infinity}}', "-Infinity is not a finite number"),
    (f'{{{EMPTY}, "batches": [], "x": {{"\\ud800": 1}}}}', "a key in x holds a lone surrogate"),
    (f'{{{EMPTY}, "batches": [], "model": {{"target": "\\ud800"}}}}',
     "model.target holds a lone surrogate"),
    (f'{{"schema": ["{SCHEMA}"], "batches": []}}', "schema ['batchscope.report/2']"),
    (f'{{{EMPTY}, "batches": []}}\n\n{{}}', "not valid JSON"),
    (f'{{{EMPTY}, "batches": [{{"batch_size": 1, "status": "ok", "throughput_per_s": '
     f'{"9" * 309}}}]}}', "integer too large"),
    ('{"schema": "batchscope.report/1", "model": {"target": "m"}, "run": {}, "batches": [], '
     '"flags": 5, "recommendation": {"batch_size": 1, "rule": 3}}', "flags is an integer"),
    ("", "not valid JSON"),
])
def test_hand_picked_hostile_files_exit_4(folder: Path, text: str, said: str) -> None:
    result = compare(folder, MLP, text)
    assert result.exit_code == USAGE, result.output
    assert_clean(result)
    assert said in result.stderr


def test_a_file_that_is_not_utf8_exits_4(folder: Path) -> None:
    bad = folder / "latin1.json"
    bad.write_bytes(f'{{{EMPTY}, "batches": [], "x": "é"}}'.encode("latin-1"))
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
