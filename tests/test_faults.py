"""The fault list (issue 'Fault tolerance and hostile input'), each on the real sweep."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from batchscope.api import Options, diagnose_file, exit_code, nothing_measured_message
from batchscope.errors import ExitCode, ModelFileError, NothingMeasuredError
from batchscope.plan import predicted_not_to_fit, repeated_errors
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import BatchResult, FlagKind, LatencyStats, Status, Stop, StopKind
from batchscope.reports.flag_text import flag_text, stop_text
from batchscope.reports.narrative import explanation
from tests.conftest import MODELS, ROOT

FAST = {"min_time_s": 0.05, "measure_ceilings": False, "op_breakdown": False}


def on_cue(monkeypatch, tmp_path, kind: str, at: str, **options):
    monkeypatch.setenv("BATCHSCOPE_TEST_RAISE", kind)
    monkeypatch.setenv("BATCHSCOPE_TEST_AT", at)
    return diagnose_file(MODELS / "raises_on_cue.py",
                         Options(out_dir=str(tmp_path), **{**FAST, **options}))


def statuses(report):
    return [(b.batch_size, b.status) for b in report.batches]


def stop_reason(report) -> str:
    """The stop in words, as report.json's ``stop_reason`` says it."""
    return stop_text(report.stop, report.model.unit)


@pytest.mark.parametrize("kind,label", [
    ("cuda_oom", "CUDA out of memory"),
    ("cublas", "OOM-like (cuBLAS"),
    ("cudnn", "OOM-like (cuDNN"),
])
@pytest.mark.slow
def test_cuda_oom_and_oom_like_errors_stop_the_sweep(monkeypatch, tmp_path, kind, label):
    report = on_cue(monkeypatch, tmp_path, kind, "2,4")
    assert statuses(report) == [(1, Status.OK), (2, Status.OOM)]
    assert label in report.batches[1].error
    assert exit_code(report) == ExitCode.OK  # an OOM at the top is a normal stop


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["illegal", "launch"])
def test_device_errors_get_their_own_status_and_a_fresh_worker(monkeypatch, tmp_path, kind):
    report = on_cue(monkeypatch, tmp_path, kind, "2")
    assert statuses(report) == [(1, Status.OK), (2, Status.DEVICE_ERROR), (4, Status.OK)]
    first, failed, after = report.batches
    assert failed.bytes is None and not failed.ops  # never classified, never memory-bound
    assert after.worker_pid != first.worker_pid  # the next batch size got a fresh worker
    assert exit_code(report) == ExitCode.SOME_FAILED


REPEATED = "in a row ended as model_error; larger batch sizes were not tried"


def final_report(out) -> dict:
    """report.json as the end of the run left it, after checking all three files are there."""
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["stop_reason"] != "sweep in progress" and on_disk["partial"] is False
    assert (out / "report.html").is_file() and (out / "summary.md").is_file()
    return on_disk


@pytest.mark.slow
def test_inputs_failing_in_a_replacement_worker_are_model_errors(tmp_path):
    # Batch 4 fails, so batch 8 gets a fresh worker that has measured nothing itself; the
    # run has, so make_inputs(8) raising is batch 8's model_error, not a contract error.
    report = diagnose_file(MODELS / "inputs_fail_from_4.py",
                           Options(out_dir=str(tmp_path), **FAST))
    assert exit_code(report) == ExitCode.SOME_FAILED  # what the CLI exits with
    assert statuses(report) == [(1, Status.OK), (2, Status.OK), (4, Status.MODEL_ERROR),
                                (8, Status.MODEL_ERROR)]
    assert "make_inputs(8) raised ValueError: no inputs for batch 8" in report.batches[3].error
    assert report.stop == Stop(StopKind.REPEATED_ERRORS, values={
        "batch_sizes": [4, 8], "statuses": ["model_error"]})
    assert stop_reason(report) == f"batches 4 and 8 {REPEATED}"
    on_disk = final_report(tmp_path)
    assert on_disk["stop_reason"] == stop_reason(report)
    assert [b["status"] for b in on_disk["batches"]] == ["ok", "ok", "model_error", "model_error"]


@pytest.mark.slow
def test_a_contract_error_at_the_first_step_is_still_exit_4(tmp_path):
    with pytest.raises(ModelFileError, match=r"make_inputs\(4\) raised ValueError") as info:
        diagnose_file(MODELS / "inputs_fail_from_4.py",
                      Options(out_dir=str(tmp_path), batch_sizes=[4, 8], **FAST))
    assert info.value.exit_code == ExitCode.USAGE
    assert not (tmp_path / "report.json").exists()  # nothing was swept


@pytest.mark.slow
def test_inputs_failing_after_a_failed_first_step_are_model_errors(tmp_path):
    # The first step got past make_inputs and failed in the model: the contract was checked
    # there. make_inputs(2) raising is then batch 2's model_error; two in a row stop the sweep.
    report = diagnose_file(MODELS / "fails_then_inputs_fail.py",
                           Options(out_dir=str(tmp_path), **FAST))
    assert statuses(report) == [(1, Status.MODEL_ERROR), (2, Status.MODEL_ERROR)]
    assert stop_reason(report) == f"batches 1 and 2 {REPEATED}"
    assert exit_code(report) == ExitCode.NOTHING_MEASURED
    on_disk = final_report(tmp_path)
    assert on_disk["stop_reason"] == stop_reason(report)
    assert [b["status"] for b in on_disk["batches"]] == ["model_error", "model_error"]


def test_errors_a_fresh_worker_did_not_cure_stop_the_sweep_when_they_repeat():
    def failed(b, status):
        return BatchResult(b, status, error="x")
    ok = BatchResult(1, Status.OK)
    assert repeated_errors([ok, failed(2, Status.MODEL_ERROR)]) is None
    assert repeated_errors([failed(1, Status.MODEL_ERROR), ok,
                            failed(4, Status.DEVICE_ERROR)]) is None
    assert stop_text(repeated_errors([ok, failed(2, Status.DEVICE_ERROR),
                                      failed(4, Status.MODEL_ERROR)])) == (
        "batches 2 and 4 in a row ended as device_error and model_error; "
        "larger batch sizes were not tried")


def test_the_worker_keeps_its_own_timing():
    import torch

    from batchscope.profiler.measurement import NVML_WINDOW_MIN_S, timing_for

    given = TimingConfig.fixed(0.05)
    on_gpu = timing_for(torch.device("cuda"), given)
    # the NVML window is added apart; the fixed time the caller asked for stays as it was
    assert on_gpu.window_min_s == NVML_WINDOW_MIN_S
    assert on_gpu.measure_min_s == on_gpu.measure_max_s == 0.05
    assert given == TimingConfig.fixed(0.05)  # the caller's config is left alone
    assert timing_for(torch.device("cpu"), given) == given


@pytest.mark.gpu
def test_a_cuda_worker_leaves_its_config_alone():
    import torch

    from batchscope.hardware.nvml_sampler import NullSampler
    from batchscope.profiler.measurement import NVML_WINDOW_MIN_S
    from batchscope.profiler.worker import Worker

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    config = WorkerConfig(str(MODELS / "tiny.py"), device="cuda",
                          timing=TimingConfig.fixed(0.05))
    worker = Worker(config, send=lambda message: None)
    worker.sampler.close()
    assert config.timing == TimingConfig.fixed(0.05)
    nvml_on = not isinstance(worker.sampler, NullSampler)
    assert worker.timing.window_min_s == (NVML_WINDOW_MIN_S if nvml_on else 0.0)
    assert worker.timing.measure_min_s == 0.05


@pytest.mark.slow
def test_model_that_does_not_fit_at_batch_one_exits_5(monkeypatch, tmp_path):
    report = on_cue(monkeypatch, tmp_path, "cuda_oom", "1,2,4")
    assert statuses(report) == [(1, Status.OOM)]
    assert exit_code(report) == ExitCode.NOTHING_MEASURED
    message = nothing_measured_message(report)
    assert "parameters and buffers take 0 MiB" in message and "MiB was free" in message


@pytest.mark.slow
def test_model_that_cannot_even_be_built_exits_5(tmp_path):
    with pytest.raises(NothingMeasuredError, match=r"does not fit on cpu.*MiB was free") as info:
        diagnose_file(MODELS / "build_oom.py", Options(out_dir=str(tmp_path), **FAST))
    assert info.value.exit_code == ExitCode.NOTHING_MEASURED


@pytest.mark.slow
def test_worker_volunteers_for_the_oom_killer(monkeypatch, tmp_path):
    out = tmp_path / "score"
    monkeypatch.setenv("BATCHSCOPE_TEST_OUT", str(out))
    diagnose_file(MODELS / "reports_oom_score.py", Options(out_dir=str(tmp_path), **FAST))
    assert out.read_text().strip() == "1000"


@pytest.mark.slow
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
    (why,) = report.batches[2].flags
    assert why.kind == FlagKind.PREDICTED_NOT_TO_FIT and why.values["budget_bytes"] == budget
    assert "over the budget" in flag_text(why)
    assert report.stop is not None and report.stop.kind == StopKind.SKIPPED
    assert stop_text(report.stop).startswith("batch 4 skipped: its peak memory, extrapolated "
                                             "from batches 1 and 2, would be")
    assert exit_code(report) == ExitCode.OK


def test_extrapolation_against_free_memory():
    def ok(b, peak, free):
        return BatchResult(b, Status.OK, latency_s=LatencyStats(1, 1, 1, 5), throughput_per_s=b,
                           peak_memory_bytes=peak, available_memory_bytes=free)
    gib = 2**30
    # 1 GiB per row: batch 8 would need 4 GiB more than batch 4; with 3 GiB free it is skipped.
    results = [ok(2, 2 * gib, 3 * gib), ok(4, 4 * gib, 3 * gib)]
    skip = predicted_not_to_fit(results, 8)
    assert skip is not None and skip.kind == FlagKind.PREDICTED_NOT_TO_FIT
    assert skip.values == {"predicted_bytes": 8 * gib, "from_batches": [2, 4],
                           "more_bytes": 4 * gib, "free_bytes": 3 * gib}
    assert flag_text(skip) == ("batch 8: skipped: its peak memory, extrapolated from batches "
                               "2 and 4, would be 8,192 MiB, 4,096 MiB more than batch 4 "
                               "needed, and only 3,072 MiB was free")
    results[-1] = dataclasses.replace(results[-1], available_memory_bytes=10 * gib)
    assert predicted_not_to_fit(results, 8) is None


@pytest.mark.slow
def test_dtype_mismatch_is_a_contract_error_with_a_hint(tmp_path):
    with pytest.raises(ModelFileError, match="disagree on device or dtype") as info:
        diagnose_file(MODELS / "dtype_mismatch.py", Options(out_dir=str(tmp_path), **FAST))
    assert "same dtype" in str(info.value) and info.value.exit_code == ExitCode.USAGE


@pytest.mark.slow
def test_profiler_already_running_keeps_the_timings(tmp_path):
    report = diagnose_file(MODELS / "profiler_running.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 2], min_time_s=0.05,
                                   measure_ceilings=False))
    assert statuses(report) == [(1, Status.OK), (2, Status.OK)]
    batch = report.batches[0]
    assert batch.latency_s.n > 0 and not batch.ops
    assert any(f.kind == FlagKind.NO_BREAKDOWN and "already running" in flag_text(f)
               for f in report.flags)


@pytest.mark.slow
def test_nondeterministic_op_sequence_is_flagged(tmp_path):
    report = diagnose_file(MODELS / "nondeterministic.py",
                           Options(out_dir=str(tmp_path), min_time_s=0.05, measure_ceilings=False))
    assert any(f.kind == FlagKind.NON_DETERMINISTIC for f in report.flags)


@pytest.mark.slow
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
        # the session's cached ceilings (conftest): measuring them afresh took 30 s a test
        env=dict(os.environ),
    )
    return proc, out / "report.json"


def wait_for_first_batch(report, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if report.exists() and json.loads(report.read_text())["batches"]:
            return
        time.sleep(0.05)
    raise AssertionError("no batch size finished")


@pytest.mark.slow
def test_sigterm_writes_a_partial_report_and_exits_2(tmp_path):
    proc, report = run_cli(tmp_path, "--batch-sizes", ",".join(str(2**i) for i in range(12)),
                           "--min-time", "0.3", "--no-ops")
    wait_for_first_batch(report)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    data = json.loads(report.read_text())
    assert data["partial"] is True and data["batches"][0]["status"] == "ok"


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_replacement_worker_that_cannot_start_costs_one_batch(monkeypatch, tmp_path):
    monkeypatch.setenv("BATCHSCOPE_TEST_COUNTER", str(tmp_path / "loads"))
    report = diagnose_file(MODELS / "second_load_fails.py",
                           Options(out_dir=str(tmp_path / "out"), **FAST))
    assert statuses(report) == [(1, Status.OK), (2, Status.MODEL_ERROR), (4, Status.KILLED)]
    assert "does not fit" in report.batches[2].error
    assert exit_code(report) == ExitCode.SOME_FAILED
    on_disk = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [b["status"] for b in on_disk["batches"]] == ["ok", "model_error", "killed"]


@pytest.mark.slow
def test_work_that_varies_with_the_inputs_is_not_explained_as_batching(tmp_path):
    # issue 13, finding 5: an early-exit model read 8.4, 50.4 and 42 MB of weights at
    # batches 1, 2 and 4, and the report still said what each row adds
    report = diagnose_file(MODELS / "early_exit.py", Options(
        out_dir=str(tmp_path), batch_sizes=[1, 2, 4], min_time_s=0.05, device="cpu"))
    weights = [b.bytes.weights for b in report.batches]
    assert weights[1] > 3 * weights[0]  # 4 blocks against 1: the data decided
    rec = report.recommendation
    assert rec.work_varies_with_inputs and rec.predicted_critical_batch is None
    assert any(f.kind == FlagKind.WORK_VARIES and "changes with the inputs" in flag_text(f)
               for f in report.flags)
    words = explanation(report)
    assert "each row adds" not in words and "B* ≈" not in words
    assert "changed with the inputs" in words


@pytest.mark.slow
def test_the_same_work_at_every_batch_size_is_not_flagged(tmp_path):
    report = diagnose_file(MODELS / "tiny.py", Options(
        out_dir=None, batch_sizes=[1, 2, 4], min_time_s=0.05, device="cpu"))
    assert not report.recommendation.work_varies_with_inputs
    assert not any(f.kind == FlagKind.WORK_VARIES for f in report.flags)


# The CLI with a SIGTERM sent to itself at a cue (argv[1]) once every phase of the sweep has
# ended: "stop", as the sweep stops its worker (gracefully: only the last stop of a
# one-size run is); "assemble", as the final report is assembled (not a partial one).
SIGTERM_ON_CUE = """
import os, signal, sys
import batchscope.api as api
from batchscope.profiler import supervisor
from batchscope.records import StopKind

cue = sys.argv[1]
real_assemble, real_stop = api.assemble, supervisor.ProcessHandle.stop

def assemble(measured):
    if cue == "assemble" and (measured.stop is None
                              or measured.stop.kind != StopKind.IN_PROGRESS):
        os.kill(os.getpid(), signal.SIGTERM)
    return real_assemble(measured)

def stop(self, graceful=True):
    if cue == "stop" and graceful:
        os.kill(os.getpid(), signal.SIGTERM)
    return real_stop(self, graceful)

api.assemble, supervisor.ProcessHandle.stop = assemble, stop
from batchscope.cli import main
main(sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("cue", ["stop", "assemble"])
def test_sigterm_once_everything_is_measured_waits_for_the_report(tmp_path, cue):
    # A SIGTERM near the end of a long run (the worker's stop, the report's assembly) left
    # report.json "sweep in progress", printed no table and exited 130: the
    # KeyboardInterrupt it raised there escaped the sweep and the command.
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", SIGTERM_ON_CUE, cue, str(MODELS / "tiny.py"), "--out", str(out),
         "--batch-sizes", "1", "--min-time", "0.05", "--no-ops", "--no-allocator-check"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert done.returncode == ExitCode.OK, done.stderr
    final_report(out)  # complete, all three files written
    assert "batchscope sweep" in done.stdout  # the summary table was printed


# Runs argv (JSON, argv[1]) in a process group of its own as a child subreaper, so that
# every process the command leaves behind, running or exited (a zombie nobody reaped),
# becomes this script's to see; the cue (argv[3]) is what happens once report.json
# (argv[2]) holds a batch size: "none", "term" (SIGTERM to the group, as `timeout` and CI
# runners send it) or "int-twice" (two Ctrl-C to the group). Prints the command's exit
# code and what of its group was left after it exited (pid, state, command line), then
# kills and reaps that.
GROUP_LEFT_BEHIND = r"""
import ctypes, json, os, signal, subprocess, sys, time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed")
argv, report, cue = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
if cue != "none":
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(report.read_text())["batches"]:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    for _ in range(2 if cue == "int-twice" else 1):
        os.killpg(proc.pid, signal.SIGINT if cue == "int-twice" else signal.SIGTERM)
        time.sleep(0.05)
code = proc.wait(timeout=120)

def group(pgid):
    left = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError):
            continue
        state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
        if int(pgrp) == pgid:
            left.append([int(entry), state, cmd.decode(errors="replace")[:120]])
    return left

left = group(proc.pid)
print(json.dumps({"returncode": code, "left": left}))
for pid, *_ in left:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="reads /proc and adopts orphans with prctl(PR_SET_CHILD_SUBREAPER)")
@pytest.mark.parametrize("cue,args,model,code", [
    ("none", ["--batch-sizes", "1,2", "--min-time", "0.05"], "tiny.py", ExitCode.OK),
    ("term", ["--batch-sizes", ",".join(str(2**i) for i in range(12)), "--min-time", "0.3"],
     "tiny.py", ExitCode.INTERRUPTED),
    ("int-twice", ["--min-time", "0.05"], "hangs_at_2.py", ExitCode.INTERRUPTED),
])
def test_diagnose_leaves_no_process_of_its_group_behind(tmp_path, cue, args, model, code):
    # `diagnose` exited before everything it started was waited for: multiprocessing's
    # resource tracker outlived it (a defunct process under a PID 1 that reaps nothing),
    # and a second Ctrl-C left a hanging worker running. A CI step or `timeout` counts them.
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "batchscope", str(MODELS / model), "--out", str(out),
            "--no-ops", *args]
    done = subprocess.run(
        [sys.executable, "-c", GROUP_LEFT_BEHIND, json.dumps(argv), str(out / "report.json"),
         cue], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["returncode"] == code
    assert seen["left"] == []


def test_a_hold_keeps_the_first_interrupt_and_passes_on_the_second():
    # Once everything is measured the report must be finished: the first Ctrl-C or SIGTERM
    # is recorded, not raised; a second goes to the handler the hold replaced.
    from batchscope.profiler.supervisor import InterruptHold

    before = signal.getsignal(signal.SIGINT)
    with InterruptHold() as hold:
        signal.raise_signal(signal.SIGINT)  # no KeyboardInterrupt here
        assert hold.held == [signal.SIGINT]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before
    sigterm = signal.getsignal(signal.SIGTERM)
    if not callable(sigterm):  # left to its default, SIGTERM still ends the process
        with InterruptHold():
            assert signal.getsignal(signal.SIGTERM) == sigterm
