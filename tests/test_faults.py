"""The fault list (issue 'Fault tolerance and hostile input'), each on the real sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from batchscope.api import Options, diagnose_file, exit_code, nothing_measured_message
from batchscope.errors import ExitCode, ModelFileError, NothingMeasuredError
from batchscope.plan import predicted_not_to_fit
from batchscope.records import BatchResult, LatencyStats, Status
from tests.conftest import MODELS, ROOT

FAST = dict(min_time_s=0.05, measure_ceilings=False, op_breakdown=False)


def on_cue(monkeypatch, tmp_path, kind: str, at: str, **options):
    monkeypatch.setenv("BATCHSCOPE_TEST_RAISE", kind)
    monkeypatch.setenv("BATCHSCOPE_TEST_AT", at)
    return diagnose_file(MODELS / "raises_on_cue.py",
                         Options(out_dir=str(tmp_path), **{**FAST, **options}))


def statuses(report):
    return [(b.batch_size, b.status) for b in report.batches]


@pytest.mark.parametrize("kind,label", [
    ("cuda_oom", "CUDA out of memory"),
    ("cublas", "OOM-like (cuBLAS"),
    ("cudnn", "OOM-like (cuDNN"),
])
def test_cuda_oom_and_oom_like_errors_stop_the_sweep(monkeypatch, tmp_path, kind, label):
    report = on_cue(monkeypatch, tmp_path, kind, "2,4")
    assert statuses(report) == [(1, Status.OK), (2, Status.OOM)]
    assert label in report.batches[1].error
    assert exit_code(report) == ExitCode.OK  # an OOM at the top is a normal stop


@pytest.mark.parametrize("kind", ["illegal", "launch"])
def test_device_errors_get_their_own_status_and_a_fresh_worker(monkeypatch, tmp_path, kind):
    report = on_cue(monkeypatch, tmp_path, kind, "2")
    assert statuses(report) == [(1, Status.OK), (2, Status.DEVICE_ERROR), (4, Status.OK)]
    first, failed, after = report.batches
    assert failed.bytes is None and not failed.ops  # never classified, never memory-bound
    assert after.worker_pid != first.worker_pid  # the next batch size got a fresh worker
    assert exit_code(report) == ExitCode.SOME_FAILED


def test_model_that_does_not_fit_at_batch_one_exits_5(monkeypatch, tmp_path):
    report = on_cue(monkeypatch, tmp_path, "cuda_oom", "1,2,4")
    assert statuses(report) == [(1, Status.OOM)]
    assert exit_code(report) == ExitCode.NOTHING_MEASURED
    message = nothing_measured_message(report)
    assert "parameters and buffers take 0 MiB" in message and "MiB was free" in message


def test_model_that_cannot_even_be_built_exits_5(tmp_path):
    with pytest.raises(NothingMeasuredError, match=r"does not fit on cpu.*MiB was free") as info:
        diagnose_file(MODELS / "build_oom.py", Options(out_dir=str(tmp_path), **FAST))
    assert info.value.exit_code == ExitCode.NOTHING_MEASURED


def test_worker_volunteers_for_the_oom_killer(monkeypatch, tmp_path):
    out = tmp_path / "score"
    monkeypatch.setenv("BATCHSCOPE_TEST_OUT", str(out))
    diagnose_file(MODELS / "reports_oom_score.py", Options(out_dir=str(tmp_path), **FAST))
    assert out.read_text().strip() == "1000"


def test_batch_predicted_over_the_memory_budget_is_skipped(tmp_path):
    # ~64 MiB of state per row: batches 1 and 2 run; 4 is predicted at ~+128 MiB over 2.
    report = diagnose_file(MODELS / "memory_hungry.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 2, 4, 8],
                                   memory_budget_bytes=None, **FAST))
    peak2 = report.batches[1].peak_memory_bytes
    budget = peak2 + 64 * 2**20  # room for one more row, not for two more
    report = diagnose_file(MODELS / "memory_hungry.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 2, 4, 8],
                                   memory_budget_bytes=budget, **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK), (4, Status.SKIPPED)]
    assert "over the budget" in report.batches[2].error
    assert exit_code(report) == ExitCode.OK


def test_extrapolation_against_free_memory():
    def ok(b, peak, free):
        return BatchResult(b, Status.OK, latency_s=LatencyStats(1, 1, 1, 5), throughput_per_s=b,
                           peak_memory_bytes=peak, available_memory_bytes=free)
    gib = 2**30
    # 1 GiB per row: batch 8 would need 4 GiB more than batch 4; with 3 GiB free it is skipped.
    results = [ok(2, 2 * gib, 3 * gib), ok(4, 4 * gib, 3 * gib)]
    assert "only 3,072 MiB was free" in predicted_not_to_fit(results, 8)
    results[-1].available_memory_bytes = 10 * gib
    assert predicted_not_to_fit(results, 8) == ""


def test_dtype_mismatch_is_a_contract_error_with_a_hint(tmp_path):
    with pytest.raises(ModelFileError, match="disagree on device or dtype") as info:
        diagnose_file(MODELS / "dtype_mismatch.py", Options(out_dir=str(tmp_path), **FAST))
    assert "same dtype" in str(info.value) and info.value.exit_code == ExitCode.USAGE


def test_profiler_already_running_keeps_the_timings(tmp_path):
    report = diagnose_file(MODELS / "profiler_running.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 2], min_time_s=0.05,
                                   measure_ceilings=False))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK)]
    batch = report.batches[0]
    assert batch.latency_s.n > 0 and not batch.ops
    assert any("no op breakdown" in f and "already running" in f for f in report.flags)


def test_nondeterministic_op_sequence_is_flagged(tmp_path):
    report = diagnose_file(MODELS / "nondeterministic.py",
                           Options(out_dir=str(tmp_path), min_time_s=0.05, measure_ceilings=False))
    assert any("non-deterministic" in f for f in report.flags)


def test_very_long_exception_text_is_truncated(monkeypatch, tmp_path):
    report = on_cue(monkeypatch, tmp_path, "long", "2")
    error = report.batches[1].error
    assert report.batches[1].status == Status.MODEL_ERROR
    assert len(error) < 2500 and "more characters cut" in error


def run_cli(tmp_path, *args, model="tiny.py"):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchscope", str(MODELS / model), "--out", str(out), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "BATCHSCOPE_CACHE_DIR": str(tmp_path / "cache")},
    )
    return proc, out / "report.json"


def wait_for_first_batch(report, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if report.exists() and json.loads(report.read_text())["batches"]:
            return
        time.sleep(0.05)
    raise AssertionError("no batch size finished")


def test_sigterm_writes_a_partial_report_and_exits_2(tmp_path):
    proc, report = run_cli(tmp_path, "--batch-sizes", ",".join(str(2**i) for i in range(12)),
                           "--min-time", "0.3", "--no-ops")
    wait_for_first_batch(report)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    data = json.loads(report.read_text())
    assert data["partial"] is True and data["batches"][0]["status"] == "ok"


def test_second_ctrl_c_exits_at_once(tmp_path):
    # The worker hangs at batch 2 and ignores nothing; the first Ctrl-C starts the orderly
    # stop, the second must end the process right away with exit 2.
    proc, report = run_cli(tmp_path, "--min-time", "0.05", "--no-ops", model="hangs_at_2.py")
    wait_for_first_batch(report)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    started = time.monotonic()
    proc.communicate(timeout=30)
    assert proc.returncode == ExitCode.INTERRUPTED
    assert time.monotonic() - started < 5


def test_a_replacement_worker_that_cannot_start_costs_one_batch(monkeypatch, tmp_path):
    monkeypatch.setenv("BATCHSCOPE_TEST_COUNTER", str(tmp_path / "loads"))
    report = diagnose_file(MODELS / "second_load_fails.py",
                           Options(out_dir=str(tmp_path / "out"), **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.MODEL_ERROR), (4, Status.KILLED)]
    assert "does not fit" in report.batches[2].error
    assert exit_code(report) == ExitCode.SOME_FAILED
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [b["status"] for b in on_disk["batches"]] == ["ok", "model_error", "killed"]
