"""The second sweep axis: batch size × sequence length (SEQ_LENS), for real on a tiny
encoder in training mode, and the section, the prose and the renderings on set numbers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from batchscope.api import Options, diagnose_file, validate_options
from batchscope.assemble import Measured, assemble
from batchscope.classifiers.sequence_grid import memory_limit, sequence_grid_section
from batchscope.contract import PER_TOKEN, load_model_file
from batchscope.errors import ModelFileError, UsageError
from batchscope.plan import grid_batch_sizes
from batchscope.records import (
    BatchResult,
    GridPoint,
    LatencyStats,
    ModelInfo,
    Report,
    RunInfo,
    Status,
)
from batchscope.records.report import SequencePoint
from batchscope.reports.json_report import load_report
from batchscope.reports.markdown import render_summary
from batchscope.reports.narrative import explanation, sequence
from tests.conftest import MODELS

SEQ_MODEL = MODELS / "seq_model.py"


@pytest.fixture(scope="module")
def seq_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("seq-grid")
    report = diagnose_file(SEQ_MODEL, Options(out_dir=str(out), min_time_s=0.02,
                                              measure_ceilings=False))
    return out, report


@pytest.mark.slow
def test_sweep_times_every_length_at_the_measured_batch_sizes(seq_report):
    _, report = seq_report
    assert report.model.seq_lens == [16, 32, 64]
    assert report.model.units_per_row == 16  # UNITS_PER_ROW = "seq_len", at the first
    grid = report.sequence_grid
    assert grid is not None
    assert grid.base_seq_len == 16 and grid.units_per_row_per_token is True
    cells = {(p.batch_size, p.seq_len): p for p in grid.points}
    # The sweep's own length comes from its measurements; each other length is timed at
    # the measured sizes whose step stays short (all of them here, on any machine: the
    # encoder's step is milliseconds).
    assert {b for b, n in cells if n == 16} == {1, 2, 4}
    assert all(cells[(b, 16)].source == "sweep" for b in (1, 2, 4))
    for (b, n), p in cells.items():
        assert p.status == Status.OK, p
        assert p.units_per_row == n and p.tokens_per_step == b * n
        # Tokens a second are the point's own rows × tokens over its own step.
        assert p.throughput_per_s == pytest.approx(b * n / p.latency_s)
        assert p.peak_memory_bytes > 0
        if n != 16:
            assert p.source == "grid"
    assert {n for _, n in cells} == {16, 32, 64}
    best = max(grid.points, key=lambda p: p.throughput_per_s)
    assert grid.best is not None
    assert grid.best.batch_size == best.batch_size
    assert grid.best.seq_len == best.seq_len
    assert [row.seq_len for row in grid.lengths] == [16, 32, 64]


def test_grid_reaches_every_format(seq_report):
    out, report = seq_report
    doc = load_report(out / "report.json")  # the schema check passes with the section
    assert doc.sequence_grid is not None and doc.sequence_grid.seq_lens == [16, 32, 64]
    html = (out / "report.html").read_text()
    assert 'id="fig-sequence_grid"' in html and "tokens a row" in html
    summary = (out / "summary.md").read_text()
    assert "#### Batch size × sequence length (tokens/s)" in summary
    assert "Batch size × sequence length" in explanation(report)
    assert "The sweep ran at 16 tokens a row" in explanation(report)


SEQ_MODEL_INFO = ModelInfo(target="m", unit="token", units_per_row=8, seq_lens=[8, 16],
                           units_per_row_per_token=True)


def _batches(latency: dict[tuple[int, int], float], peaks: dict[tuple[int, int], int],
             free_bytes: int = 10_000) -> list[BatchResult]:
    """The sweep's batch sizes, run at length 8, steps as given."""
    return [BatchResult(b, Status.OK, latency_s=LatencyStats(latency[(b, 8)], 0, 0, 3),
                        throughput_per_s=b * 8 / latency[(b, 8)],
                        peak_memory_bytes=peaks[(b, 8)], available_memory_bytes=free_bytes)
            for b in sorted({b for b, n in latency if n == 8})]


def _grid(latency, peaks) -> list[GridPoint]:
    return [GridPoint(b, None, Status.OK, LatencyStats(t, t, t, 3), seq_len=n,
                      units_per_row=n, peak_memory_bytes=peaks[(b, n)])
            for (b, n), t in latency.items() if n != 8]


def _seq_report(latency: dict[tuple[int, int], float],
                peaks: dict[tuple[int, int], int]) -> Report:
    """A report whose sweep ran at length 8 with a grid at 16, steps as given."""
    return assemble(Measured(SEQ_MODEL_INFO, RunInfo(), None, _batches(latency, peaks),
                             grid=_grid(latency, peaks)))


def test_section_on_set_numbers_finds_the_limit_and_what_the_tokens_explain():
    # Step time proportional to tokens per step: the split into rows does not matter.
    latency = {(b, n): 1e-3 * b * n for b in (1, 2, 4) for n in (8, 16)}
    # Peak: 1000 bytes fixed, 100 per token.
    peaks = {(b, n): 1000 + 100 * b * n for b in (1, 2, 4) for n in (8, 16)}
    section = sequence_grid_section(SEQ_MODEL_INFO, _batches(latency, peaks),
                                    _grid(latency, peaks), None)
    limits = {row.seq_len: row.memory_limit for row in section.lengths}
    # Capacity: the largest peak plus what was free then: 1000 + 3200 + 10000.
    assert limits[8].capacity_bytes == 14_200
    assert limits[8].batch_size == (14_200 - 1000) // 800  # 16
    assert limits[16].batch_size == (14_200 - 1000) // 1600  # 8
    assert limits[16].bytes_per_row == pytest.approx(1600)
    report = _seq_report(latency, peaks)
    assert report.sequence_grid == section
    prose = "\n".join(sequence(report).paragraphs)
    assert "The tokens per step set the throughput" in prose
    assert "about batch 8" in prose and "about batch 16" in prose


def test_longer_rows_that_cost_more_per_token_are_said_so():
    # Attention-like: a row of n tokens costs n² (on top of a little per token).
    latency = {(b, n): 1e-4 * b * n * n for b in (1, 2, 4) for n in (8, 16)}
    peaks = {(b, n): 1000 for b in (1, 2, 4) for n in (8, 16)}
    report = _seq_report(latency, peaks)
    prose = "\n".join(sequence(report).paragraphs)
    assert "Longer rows cost more per token" in prose
    # Flat peaks: no growth per row to read a limit off.
    assert all(row.memory_limit is None for row in report.sequence_grid.lengths)
    assert "#### Batch size × sequence length" in render_summary(report)


def _point(batch_size: int, peak_memory_bytes: int) -> SequencePoint:
    return SequencePoint(batch_size, 8, Status.OK, 1e-3, 8, batch_size * 8, None,
                         peak_memory_bytes, "sweep")


def test_memory_limit_needs_two_points_and_a_capacity():
    one = [_point(1, 10)]
    assert memory_limit(one, 100) is None
    two = [*one, _point(2, 20)]
    assert memory_limit(two, None) is None
    assert memory_limit(two, 100).batch_size == 10
    # Not even one row fits: 0, said as such.
    assert memory_limit(two, 5).batch_size == 0


def test_grid_sizes_scale_the_activations_with_the_length():
    def result(b: int, peak: int) -> BatchResult:
        return BatchResult(b, Status.OK, latency_s=LatencyStats(0.01, 0.01, 0.01, 3),
                           peak_memory_bytes=peak, available_memory_bytes=100_000)

    results = [result(1, 2_000), result(2, 3_000), result(4, 5_000)]
    # 1000 bytes of weights; at 4x the length the rest is 4x: 1000 + 4 * 4000 = 17000 at
    # batch 4, over the 8000 budget; batch 2: 1000 + 4 * 2000 = 9000, over too.
    assert grid_batch_sizes(results, 16, 64, budget_bytes=8_000, axis="seq_len",
                            parameter_bytes=1_000) == [1]
    assert grid_batch_sizes(results, 16, 64, axis="seq_len", parameter_bytes=1_000) == [1, 2, 4]
    # With less free memory than batch 4's growth (12000 more bytes) it is left out.
    results[-1] = dataclasses.replace(results[-1], available_memory_bytes=10_000)
    assert grid_batch_sizes(results, 16, 64, axis="seq_len", parameter_bytes=1_000) == [1, 2]


def test_contract_takes_seq_lens_and_per_token_units(tmp_path):
    spec = load_model_file(SEQ_MODEL)
    assert spec.grid_axis == "seq_len" and spec.lengths == [16, 32, 64]
    assert spec.per_token and spec.units_per_row == 16 and spec.units_per_row_at(64) == 64
    assert spec.call_make_inputs(2, 32).shape == (2, 32)
    assert spec.call_make_inputs(2).shape == (2, 16)  # the sweep's own length
    replaced = load_model_file(SEQ_MODEL, seq_lens=[8, 24])
    assert replaced.lengths == [8, 24] and replaced.units_per_row == 8

    def write(body: str):
        path = tmp_path / "m.py"
        path.write_text("import torch\ndef build_model(): return torch.nn.Linear(2, 2)\n" + body)
        return path

    with pytest.raises(ModelFileError, match="CONTEXTS and SEQ_LENS are both set"):
        load_model_file(write("def make_inputs(b, n): return torch.ones(b, 2)\n"
                              "CONTEXTS = [4]\nSEQ_LENS = [4]\n"))
    with pytest.raises(ModelFileError, match=f"UNITS_PER_ROW = '{PER_TOKEN}' needs SEQ_LENS"):
        load_model_file(write("def make_inputs(b): return torch.ones(b, 2)\n"
                              "UNITS_PER_ROW = 'seq_len'\n"))
    with pytest.raises(ModelFileError, match=r"make_inputs\(batch_size, seq_len\).*SEQ_LENS"):
        load_model_file(write("def make_inputs(b): return torch.ones(b, 2)\nSEQ_LENS = [4, 8]\n"))
    with pytest.raises(ModelFileError, match="SEQ_LENS must hold token counts from 1"):
        load_model_file(write("def make_inputs(b, n): return torch.ones(b, 2)\nSEQ_LENS = [0]\n"))


def test_options_refuse_two_second_axes():
    with pytest.raises(UsageError, match="--contexts and --seq-lens"):
        validate_options(Options(contexts=[4], seq_lens=[8], out_dir=None))
    with pytest.raises(UsageError, match="--seq-lens must list distinct lengths"):
        validate_options(Options(seq_lens=[8, 8], out_dir=None))


def test_saved_grid_points_round_trip(seq_report):
    out, _ = seq_report
    saved = json.loads((out / "report.json").read_text())
    grid_points = [p for p in saved["sequence_grid"]["points"] if p["source"] == "grid"]
    assert grid_points and all(p["seq_len"] in (32, 64) for p in grid_points)
