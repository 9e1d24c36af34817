"""``batchscope.watch`` around a plain training loop fed by a DataLoader (issue 32, H2).

The loop's step begins with fetching its batch: a ``TensorDataset`` row is a ``select`` of
the whole table, and a batch of 64 rows is 128 of them and two ``stack``s. That is data
loading, not the model's step: the op breakdown starts at the model's first call, and the
time before it is its own figure.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import batchscope
from batchscope.records import FlagKind
from batchscope.reports import narrative
from batchscope.reports.flag_text import flag_text

pytestmark = pytest.mark.usefixtures("use_quick_ceilings")

ROWS, BATCH, WIDTH = 8192, 64, 256
# The DataLoader's ops on a TensorDataset: a row per select, the batch by stack (its
# unsqueezes and cat under the counting mode, which runs stack's composite kernel).
LOADER_OPS = {"select", "stack", "unsqueeze", "cat"}
# What the op breakdown must attribute of a plain MLP's training step: every matmul,
# elementwise op and AdamW update has a formula (a sweep of the same model: 0.9998).
MIN_COVERAGE = 0.9


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.ReLU(), nn.Linear(4 * WIDTH, WIDTH))


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(ROWS, WIDTH, generator=g),
                         torch.randn(ROWS, WIDTH, generator=g))
    return DataLoader(data, batch_size=BATCH, shuffle=True, generator=g)


def watch_loop(model: nn.Module, call, **watch_args) -> batchscope.watch:
    """Train ``model`` on :func:`loader` under ``watch`` until it is done; ``call(model,
    x)`` runs the forward."""
    optimizer = torch.optim.AdamW(model.parameters())
    with batchscope.watch(model, optimizer=optimizer, out_dir=None, **watch_args) as w:
        for x, y in loader():  # 128 batches: more than the watch's steps, even in blocks
            nn.functional.mse_loss(call(model, x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            w.step()
            if not w.active:
                break
    assert not w.active and not w.report.partial
    return w


def test_a_watched_loop_reports_its_models_step_and_its_data_loading_apart():
    w = watch_loop(mlp(), lambda model, x: model(x))
    (batch,) = w.report.batches
    assert batch.batch_size == BATCH
    names = {op.name for op in batch.ops}
    # The step's ops are the model's: no row of the dataset, no stack of the batch.
    assert not names & LOADER_OPS, names & LOADER_OPS
    assert not set(batch.unmatched_ops_s) & LOADER_OPS, batch.unmatched_ops_s
    # Joined op by op: every matmul has its profiled time (they had 0 while the DataLoader
    # was in the step), and the breakdown covers the step (3-12% before).
    matmuls = [op for op in batch.ops if op.name in ("addmm", "mm")]
    assert matmuls and all(op.time_s > 0 and op.flops for op in matmuls)
    assert batch.coverage is not None and batch.coverage >= MIN_COVERAGE, batch.coverage
    # Data loading is its own figure: measured in the timed steps, part of their latency.
    loading_s = w.report.run.watch.data_loading_s
    assert loading_s is not None and 0 < loading_s < batch.latency_s.max
    said = [f for f in w.report.flags if f.kind == FlagKind.WATCH_DATA_LOADING]
    for flag in said:  # whether it is notable depends on this machine: its words if it is
        assert flag.values["seconds"] == loading_s
        assert "before the model was called" in flag_text(flag)
    # The loop has no make_inputs: the explanation does not send its user to one.
    text = " ".join(p for s in narrative.sections(w.report) for p in s.paragraphs)
    assert "make_inputs" not in text and "the step was given" in text


def test_a_loop_that_never_calls_the_watched_module_keeps_its_whole_step():
    # watch is given the inner module, the loop calls a wrapper's forward that calls it
    # through another path (its forward, not __call__): the model's start is never seen,
    # so the step is the loop's as before, data loading included, and not said apart.
    model = mlp()
    w = watch_loop(model, lambda m, x: m.forward(x), batch_size=BATCH)
    (batch,) = w.report.batches
    assert w.report.run.watch.data_loading_s is None
    assert "select" in {op.name for op in batch.ops}  # the loader is in the step
    assert not [f for f in w.report.flags if f.kind == FlagKind.WATCH_DATA_LOADING]
    assert batch.coverage is not None


def test_data_loading_is_said_where_it_is_a_notable_share_of_the_step():
    from batchscope.records import BatchResult, LatencyStats, Status

    w = batchscope.watch(nn.Linear(2, 2), out_dir=None)  # not entered: nothing watched
    result = BatchResult(64, Status.OK, latency_s=LatencyStats(0.010, 0.009, 0.011, n=8))
    (flag,) = w._data_loading_flags(result, 0.003)  # 3 ms of a 10 ms step
    assert flag.batch_size == 64 and flag.values["share"] == pytest.approx(0.3)
    assert flag_text(flag) == (
        "batch 64: each watched step spent 3 ms (30% of the median step) before the model "
        "was called: loading its batch, and whatever else the loop runs first. It is in the "
        "step time and the throughput, not in the op breakdown and the roofline, which start "
        "at the model's first call.")
    assert w._data_loading_flags(result, 0.0004) == []  # 4% < DATA_LOADING_NOTABLE_SHARE
    assert w._data_loading_flags(result, None) == []  # some step never reached the model


def test_a_disturbed_window_shows_as_drift_not_as_a_precise_figure():
    # Issue 47: a watched loop read "208 ms (198-219 ms)" where the same loop ran 18 ms a
    # step a minute later. Here the loop is slowed by 40 ms a step while the first timed
    # steps run (a neighbour's burst, as a sleep), and runs at its own speed after: the
    # repeat at the end shows the drift, the interval spans both windows, and the evidence
    # says the figure cannot be trusted.
    import time

    model = nn.Linear(8, 8)
    x = torch.randn(4, 8)
    with batchscope.watch(model, out_dir=None, warmup_steps=1, timed_steps=4,
                          profiled_steps=1) as w:
        for i in range(100):
            model(x)
            if i < 5:  # the warm-up and the first timed steps: disturbed
                time.sleep(0.04)
            w.step()
            if not w.active:
                break
    report = w.report
    assert report is not None and not report.partial
    drift = report.run.drift
    assert drift is not None and drift.drift > 0.5  # 40 ms against well under 10 ms
    batch = report.batches[0]
    assert batch.latency_interval_s is not None
    assert batch.latency_interval_s.low <= drift.control_latency_s
    assert batch.latency_interval_s.high >= drift.first_latency_s
    assert report.evidence is not None and report.evidence.grade.value == "unreliable"
    assert report.evidence.reasons[0].kind.value == "drift"
