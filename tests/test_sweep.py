"""The real sweep on tiny models that raise, die, hang or run out of memory on cue."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from batchscope import api
from batchscope.api import Options, diagnose_file, exit_code, validate_options
from batchscope.cli import diagnose_app
from batchscope.errors import ExitCode, ModelFileError, UsageError
from batchscope.hardware.types import Ceilings
from batchscope.profiler import supervisor
from batchscope.profiler.protocol import ProbesTimed, RunProbes
from batchscope.profiler.supervisor import Sweep, SweepConfig
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import BatchResult, PeakMemoryMethod, Status, Stop, StopKind
from batchscope.records.probe import ProbeSpec
from batchscope.reports import view
from batchscope.reports.flag_text import stop_text
from tests.conftest import MODELS, ROOT

FAST = {"min_time_s": 0.05, "measure_ceilings": False, "op_breakdown": False}


def statuses(report):
    return [(b.batch_size, b.status) for b in report.batches]


@pytest.mark.slow
@pytest.mark.rounds
def test_no_rounds_decides_on_sequential_timings_and_says_so(tmp_path):
    """--no-rounds (here with the rounds otherwise on): no fresh worker at the end, no drift
    measured, every interval at the drift floor; the option is in the report, and its
    evidence says the pick reads sequential timings."""
    from batchscope.reports.html_rows import cards

    assert os.environ.get("BATCHSCOPE_NO_ROUNDS") is None
    report = diagnose_file(MODELS / "tiny.py", Options(out_dir=str(tmp_path), max_batch=4,
                                                       min_time_s=0.05, op_breakdown=False,
                                                       rounds=False))
    assert [s for _, s in statuses(report)] == [Status.OK] * 3
    assert report.run.drift is None and report.run.drift_allowance == pytest.approx(0.05)
    assert report.run.rounds is None
    assert report.run.options is not None and report.run.options.rounds is False
    assert any(c.label == "drift allowance" and "no rounds ran" in c.sub
               for c in cards(report))
    assert report.evidence is not None
    assert "no_rounds" in {r.kind.value for r in report.evidence.reasons}


@pytest.mark.slow
@pytest.mark.rounds
def test_tiny_sweep_writes_a_complete_report(tmp_path):
    report = diagnose_file(MODELS / "tiny.py", Options(out_dir=str(tmp_path), max_batch=4,
                                                       min_time_s=0.1))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK), (4, Status.OK)]
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["schema"] == "batchscope.report/2" and data["partial"] is False
    assert set(data["model"]) >= {"target", "parameters", "parameter_bytes", "dtype", "mode",
                                  "unit"}
    assert data["model"]["parameters"] == 16 * 32 + 32 + 32 * 4 + 4  # two Linear layers
    assert set(data["hardware"]) >= {"device", "name", "peak_flops_per_s",
                                     "bandwidth_bytes_per_s", "overhead_s",
                                     "ridge_flops_per_byte", "source"}
    batch = data["batches"][0]
    assert set(batch["latency_s"]) >= {"median", "p25", "p75", "n"}
    assert batch["latency_s"]["p25"] <= batch["latency_s"]["median"] <= batch["latency_s"]["p75"]
    assert batch["peak_memory_bytes"] > 0
    # the worker's resident set on the CPU: what the machine must hold
    method = report.batches[0].peak_memory_method
    assert method in (PeakMemoryMethod.WORKER_PEAK_RSS, PeakMemoryMethod.LIFETIME_PEAK_RSS,
                      PeakMemoryMethod.LIFETIME_MAXRSS)
    assert batch["peak_memory_method"] == method.value
    assert "resident" in view.memory_method_label(method)
    assert {op["name"] for op in batch["ops"]} >= {"addmm", "relu"}
    assert set(batch["time_share"]) >= {"memory", "compute", "overhead", "uncounted"}
    rec = data["recommendation"]
    assert rec["batch_size"] in (1, 2, 4) and rec["speedup_from_batching"] > 0
    assert rec["rule"] and rec["rule_text"] and rec["explanation"]
    assert exit_code(report) == ExitCode.OK
    # The decision rounds timed every size side by side, each once a round, in the sweep's
    # worker and a fresh one; the pick read their paired shares. Their timings against the
    # plan's are the drift (the first size first); every interval holds its figure, and
    # the pick is among the equivalent sizes. Nothing here depends on this machine's speed.
    rounds = report.run.rounds
    assert rounds is not None and set(rounds.candidates) <= {1, 2, 4}
    assert 1 in rounds.candidates and rec["batch_size"] in rounds.candidates
    assert rounds.workers == 2 and {b.worker for b in rounds.blocks} == {0, 1}
    final = [r for r in {b.round for b in rounds.blocks}
             if sorted(b.batch_size for b in rounds.blocks if b.round == r)
             == rounds.candidates]  # the final rounds: every candidate once a round
    for worker in (0, 1):
        assert len({b.round for b in rounds.blocks if b.worker == worker and b.round in final}
                   ) >= 5
    assert {s.batch_size for s in rounds.shares} >= set(rounds.candidates)
    assert rounds.share(rounds.reference).share == 1.0
    assert rec["rule"]["paired_rounds"] >= 10
    assert data["run"]["rounds"]["blocks"] and data["evidence"]["grade"] in (
        "good", "noisy", "unreliable")
    assert data["evidence"]["reasons"]
    drift = report.run.drift
    assert drift is not None and drift.timings[0].batch_size == 1 and drift.drift >= 0
    assert {t.batch_size for t in drift.timings} == {s.batch_size for s in rounds.shares}
    assert report.run.drift_allowance is not None and report.run.drift_allowance >= 0.05
    for b in report.batches:
        assert b.latency_interval_s is not None and b.throughput_interval_per_s is not None
        assert b.latency_interval_s.contains(b.latency_s.median)
        assert b.throughput_interval_per_s.contains(b.throughput_per_s)
    assert rec["batch_size"] in rec["equivalent_batch_sizes"]
    # The step-time model: three sizes fit it; none is left to forecast from the ones
    # before it, and nothing above --max-batch is predicted.
    pred = data["prediction"]
    assert pred["fitted_on"] == [1, 2, 4] and pred["points"] == []
    assert pred["knee_batch"] is not None
    # Its two matmuls were timed alone at each size by the worker (kernel probes).
    assert {k for k in pred["probes_s"] if k.startswith("addmm")} >= {
        f"addmm[[32],[{b},16],[16,32]]@float32" for b in (1, 2, 4)}
    assert all(t > 0 for t in pred["probes_s"].values())


@pytest.mark.slow
def test_sizes_are_forecast_from_the_ones_before_with_kernel_probes(tmp_path):
    report = diagnose_file(MODELS / "tiny.py", Options(out_dir=str(tmp_path), min_time_s=0.05,
                                                       batch_sizes=[1, 2, 4, 8, 16, 64]))
    data = json.loads((tmp_path / "report.json").read_text())
    pred = data["prediction"]
    measured = {b["batch_size"]: b["latency_s"]["median"] for b in data["batches"]}
    points = {p["batch_size"]: p for p in pred["points"]}
    # 8, 16 and 64 forecast from the three sizes before each; 32 (a gap in the list)
    # predicted from the largest three; nothing above the list's largest.
    assert sorted(points) == [8, 16, 32, 64]
    assert points[16]["predicted_from"] == [2, 4, 8] and pred["fitted_on"] == [8, 16, 64]
    for b in (8, 16, 64):
        assert points[b]["error"] == pytest.approx(
            points[b]["predicted_latency_s"] / measured[b] - 1)
    assert points[32]["measured_latency_s"] is None
    # The worker timed both matmuls of the model alone at every size (kernel probes).
    assert {f"addmm[[32],[{b},16],[16,32]]@float32" for b in (1, 2, 4, 8, 16, 32, 64)} <= set(
        pred["probes_s"])
    summary = (tmp_path / "summary.md").read_text()
    assert "#### Predicted against measured" in summary and "| 32 | not measured |" in summary
    assert report.prediction is not None


@pytest.mark.slow
def test_model_error_keeps_smaller_batches(tmp_path):
    report = diagnose_file(MODELS / "raises_at_4.py", Options(out_dir=str(tmp_path), **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK), (4, Status.MODEL_ERROR)]
    assert "batch 4 is too big" in report.batches[2].error
    assert exit_code(report) == ExitCode.SOME_FAILED
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert [b["status"] for b in on_disk["batches"]] == ["ok", "ok", "model_error"]


@pytest.mark.slow
def test_killed_worker_costs_one_batch(tmp_path):
    report = diagnose_file(MODELS / "killed_at_4.py", Options(out_dir=str(tmp_path), **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK), (4, Status.KILLED)]
    assert "SIGKILL" in report.batches[2].error and "probable host OOM" in report.batches[2].error
    assert report.stop == Stop(StopKind.FAILED, 4, {"status": "killed"})
    assert "killed" in stop_text(report.stop, report.model.unit)
    assert exit_code(report) == ExitCode.SOME_FAILED


@pytest.mark.slow
def test_host_oom_stops_going_up_and_is_a_normal_stop(tmp_path):
    report = diagnose_file(MODELS / "oom_at_4.py", Options(out_dir=str(tmp_path), **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK), (4, Status.OOM)]
    assert "can't allocate memory" in report.batches[2].error
    assert exit_code(report) == ExitCode.OK


@pytest.mark.slow
def test_hanging_step_times_out(tmp_path):
    started = time.monotonic()
    report = diagnose_file(MODELS / "hangs_at_2.py",
                           Options(out_dir=str(tmp_path), batch_timeout_s=4, **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.TIMEOUT)]
    assert time.monotonic() - started < 60
    assert exit_code(report) == ExitCode.SOME_FAILED


@pytest.mark.slow
def test_contract_error_is_raised_before_any_sweep(tmp_path):
    with pytest.raises(ModelFileError, match="shape"):
        diagnose_file(MODELS / "wrong_batch_dim.py", Options(out_dir=str(tmp_path), **FAST))


@pytest.mark.slow
def test_ctrl_c_writes_a_partial_report_and_exits_2(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchscope", str(MODELS / "tiny.py"), "--out", str(out),
         "--batch-sizes", ",".join(str(2**i) for i in range(12)), "--min-time", "0.3",
         "--no-ops"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        # the session's cached ceilings (conftest): measuring them afresh took 30 s a test
        env=dict(os.environ),
    )
    report = out / "report.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        report.exists() and json.loads(report.read_text())["batches"]
    ):
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    data = json.loads(report.read_text())
    assert data["partial"] is True and "interrupted" in data["stop_reason"]
    assert data["batches"][0]["status"] == "ok"
    assert len(data["batches"]) < 12


@pytest.mark.slow
def test_predict_to_predicts_past_the_measured_sizes_and_says_any_pick_they_would_make(
        tmp_path):
    # A model too slow to sweep far: measure 1-8, predict to 64, never measure it. Whether
    # the predictions move the pick rests on this run's timing noise (the tiny model's
    # step is tens of microseconds), so this checks what the sweep owes either way: the
    # predicted sizes, their probes, and a pick (if any) held whole in the report and said.
    # The rule's picks are checked against picks computed by hand on set numbers in
    # tests/classifiers/test_recommend.py, and on recorded real data in
    # tests/reports/test_prediction_render.py.
    report = diagnose_file(MODELS / "tiny.py", Options(out_dir=str(tmp_path), min_time_s=0.05,
                                                       batch_sizes=[1, 2, 4, 8],
                                                       predict_to=64))
    data = json.loads((tmp_path / "report.json").read_text())
    pred = data["prediction"]
    unmeasured = [p["batch_size"] for p in pred["points"] if p["measured_latency_s"] is None]
    assert unmeasured == [16, 32, 64] and pred["fitted_on"] == [2, 4, 8]
    assert {f"addmm[[32],[{b},16],[16,32]]@float32" for b in (16, 32, 64)} <= set(
        pred["probes_s"])  # the worker timed its matmuls at the predicted sizes too
    assert [b["batch_size"] for b in data["batches"]] == [1, 2, 4, 8]
    assert report.prediction is not None and report.recommendation is not None
    assert pred["max_abs_error"] is not None  # batch 8 was forecast from 1, 2, 4: a band
    summary = (tmp_path / "summary.md").read_text()
    pick = pred["pick"]
    if pick is None:
        assert "Not measured, predicted" not in summary
        return
    measured = {b["batch_size"]: b["throughput_per_s"] for b in data["batches"]}
    predicted = {p["batch_size"]: p["predicted_throughput_per_s"] for p in pred["points"]
                 if p["batch_size"] in unmeasured}
    rec = data["recommendation"]
    # It replaces the report's own pick, with that pick's measured throughput.
    assert pick["instead_of"] == rec["batch_size"] != pick["batch_size"]
    assert pick["instead_of_throughput_per_s"] == measured[rec["batch_size"]]
    # Its band is the forecasts' largest miss, at least 10%.
    assert pick["margin"] == max(pred["max_abs_error"], 0.10)
    # The best predicted size is one never measured, at its predicted throughput.
    assert pick["best_throughput_per_s"] == predicted[pick["best_batch_size"]]
    # The pick is a measured size at its measured figure, or a predicted one at its own.
    figures = measured if pick["measured"] else predicted
    assert pick["throughput_per_s"] == figures[pick["batch_size"]]
    shown = pick["best_batch_size"] if pick["measured"] else pick["batch_size"]
    assert f"Not measured, predicted: batch {shown} at" in summary


def test_predict_to_below_one_or_without_ops_is_refused_before_anything_runs():
    with pytest.raises(UsageError, match="--predict-to must be at least 1"):
        validate_options(Options(predict_to=0))
    with pytest.raises(UsageError, match="drop --no-ops"):
        validate_options(Options(predict_to=64, op_breakdown=False, out_dir=None))


@dataclasses.dataclass
class StopAfter:
    """An early-stop policy (the sweep's EarlyStopPolicy) that stops once ``n`` batch sizes
    are measured, and records what the sweep asked it."""

    n: int
    asked: list[tuple[str, list[int], list[int]]] = dataclasses.field(default_factory=list)

    def probes(self, results: list[BatchResult], remaining: list[int],
               ceilings: Ceilings) -> list[dict]:
        assert ceilings is not None
        self.asked.append(("probes", [r.batch_size for r in results], list(remaining)))
        return []

    def decide(self, results: list[BatchResult], remaining: list[int], ceilings: Ceilings,
               probes_s: dict[str, float]) -> Stop | None:
        self.asked.append(("decide", [r.batch_size for r in results], list(remaining)))
        if len(results) < self.n:
            return None
        return Stop(StopKind.PREDICTED, values={"remaining": list(remaining)})


@pytest.mark.slow
def test_the_early_stop_policy_is_asked_before_each_size_and_obeyed(monkeypatch):
    # The sweep's predicted-stop phase: before each batch size (once one is measured and
    # the ceilings are known) the policy's probes, then its decision; a stop ends the plan.
    policy = StopAfter(2)
    monkeypatch.setattr(api, "EarlyStop", lambda limits, objective: policy)
    options = Options(out_dir=None, max_batch=8, min_time_s=0.05, op_breakdown=False)
    report = diagnose_file(MODELS / "tiny.py", options)
    assert [b.batch_size for b in report.batches] == [1, 2]  # nothing larger was measured
    assert report.stop == Stop(StopKind.PREDICTED, values={"remaining": [4, 8]})
    assert policy.asked == [("probes", [1], [2, 4, 8]), ("decide", [1], [2, 4, 8]),
                            ("probes", [1, 2], [4, 8]), ("decide", [1, 2], [4, 8])]
    # --measure-all: the policy is never asked, every size is measured
    policy.asked.clear()
    every = diagnose_file(MODELS / "tiny.py", dataclasses.replace(options, measure_all=True))
    assert [b.batch_size for b in every.batches] == [1, 2, 4, 8]
    assert policy.asked == [] and every.stop == Stop(StopKind.CAP, values={"largest": 8})


class ProbingWorker:
    """A worker handle (supervisor.WorkerHandle) that answers probe rounds: it times the
    first spec of each round and says it skipped the rest."""

    def __init__(self) -> None:
        self.sent: list[RunProbes] = []

    def alive(self) -> bool:
        return True

    def send(self, request: RunProbes) -> None:
        self.sent.append(request)

    def recv(self, deadline: float) -> ProbesTimed:
        specs = self.sent[-1].specs
        return ProbesTimed({specs[0].key: 1e-3}, skipped=[s.key for s in specs[1:]])

    def stop(self, graceful: bool = True) -> None: ...


def test_a_probe_round_gets_a_share_of_the_sweeps_time_and_loses_the_largest_sizes_first():
    # Unbounded, a round of a 2-layer GPT-2 training step's matmuls at every size to 1024
    # ran past the 120 s a round may take after 42 s of sweep: the round was lost with the
    # worker (a T5's batch 16 took 134 s so). Now each round gets what is left of a quarter
    # of the sweep's measuring time (at least PROBE_ROUND_MIN_S, at most PROBE_ROUND_MAX_S),
    # every op at the smallest size first, and what it skipped is asked for again later.
    sweep = Sweep(SweepConfig(WorkerConfig(str(MODELS / "tiny.py"))))
    sweep.handle = worker = ProbingWorker()
    sweep.results = [BatchResult(1, Status.OK, wall_s=10.0), BatchResult(2, Status.OK, wall_s=20.0)]
    head = [ProbeSpec.of("mm", [[b, 8], [8, 50]], op_id="head", batch=b) for b in (1, 64, 1024)]
    fc = [ProbeSpec.of("mm", [[b, 8], [8, 8]], op_id="fc", batch=b) for b in (1, 64, 1024)]
    conv = dataclasses.replace(ProbeSpec.of("mm", [[4, 8], [8, 4]]), budget_s=3.0)
    times = sweep.probe([*head, conv, *fc])
    first = worker.sent[0]
    assert first.round_s == supervisor.PROBE_ROUND_SHARE * 30.0  # 0.25 * (10 + 20) s
    assert [s.key for s in first.specs] == [s.key for s in (head[0], fc[0], head[1], fc[1],
                                                            head[2], fc[2], conv)]
    assert times == {head[0].key: 1e-3}
    sweep.probe([*head, conv, *fc])  # the skipped ones, again; the timed one is known
    assert [s.key for s in worker.sent[1].specs][:2] == [fc[0].key, head[1].key]
    assert worker.sent[1].round_s <= first.round_s  # the first round's time is spent
    sweep.probe_rounds_s = 1e3
    assert sweep.probe_round_s() == supervisor.PROBE_ROUND_MIN_S
    sweep.probe_rounds_s = 0.0
    sweep.results[0] = dataclasses.replace(sweep.results[0], wall_s=1e4)
    assert sweep.probe_round_s() == supervisor.PROBE_ROUND_MAX_S


@pytest.mark.slow
def test_a_budget_ends_the_plan_before_a_size_it_cannot_afford_and_says_what_was_left(
        tmp_path):
    # Issue 47: a default-plan sweep of a training step ran most of an hour on 2 cores.
    # --budget bounds the whole sweep: the first size is always measured; the next would
    # need more than is left (with the rounds' least time), so the plan stops there.
    report = diagnose_file(MODELS / "tiny.py", Options(out_dir=str(tmp_path), max_batch=64,
                                                       min_time_s=0.05, op_breakdown=False,
                                                       budget_s=0.5))
    assert report.stop is not None and report.stop.kind == StopKind.BUDGET
    assert [b.batch_size for b in report.batches] == [1]
    assert report.stop.values["unmeasured"] == [2, 4, 8, 16, 32, 64]
    assert exit_code(report) == ExitCode.OK
    text = stop_text(report.stop)
    assert "--budget of 500 ms would have run out" in text and "2, 4, 8, 16, 32 and 64" in text
    assert report.evidence is not None
    assert "budget" in {r.kind.value for r in report.evidence.reasons}
    result = CliRunner().invoke(diagnose_app, [str(MODELS / "tiny.py"), "--budget", "0"])
    assert result.exit_code == 4 and "--budget must be positive" in result.output
