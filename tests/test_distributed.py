"""Data-parallel sweeps, for real: two gloo ranks under torch.distributed.run on the CPU.

Each test starts torch's own launcher (three Python processes importing torch), so they
are few and sweep two or three small batch sizes; what they assert holds on any machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchscope.classifiers.data_parallel import allreduce_time_s, data_parallel_summary
from batchscope.errors import ExitCode
from batchscope.profiler.launcher import DistributedConfig, launcher_command, root_cause
from batchscope.profiler.ranks import _ranks_missing, merge_ranks, timed_steps_for
from batchscope.records import BatchResult, LatencyStats, ModelInfo, RankResult, Status
from batchscope.records.report import BusBandwidth, DistributedInfo, WrappedBy
from tests.conftest import MODELS, ROOT

TINY = str(MODELS / "ddp_tiny.py")


@pytest.fixture(scope="module", autouse=True)
def _one_thread_ceilings():
    """torch's launcher gives each rank OMP_NUM_THREADS=1, a ceilings cache key of its own:
    quick ceilings measured here under it spare the first sweep the full measurement
    (~30 s here), as the session's other tests share theirs."""
    import torch

    from batchscope.hardware import cache, microbench

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        key = cache.machine_key("cpu")
        path = cache.cache_path("cpu")
        if not path.exists():
            ceilings = microbench.measure("cpu", quick=True)
            ceilings.key, ceilings.source = key, "measured"
            cache._write(path, ceilings)
    finally:
        torch.set_num_threads(before)


def diagnose(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
             timeout_s: float = 240) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "batchscope", TINY, "--out", str(out), "--device", "cpu",
         *args], cwd=ROOT, env={**os.environ, **(env or {})}, text=True,
        capture_output=True, timeout=timeout_s)
    report = out / "report.json"
    return proc, json.loads(report.read_text()) if report.exists() else {}


def ranks_left(grace_s: float = 5.0) -> list[str]:
    """Processes still running a rank, given ``grace_s`` to finish exiting."""
    deadline = time.monotonic() + grace_s
    while True:
        out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True,
                             text=True).stdout
        left = [line for line in out.splitlines() if "batchscope.profiler.ranks" in line
                and "ps -eo" not in line and " Z" not in line]  # zombies have ended
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.rounds
def test_a_two_rank_sweep_reports_every_rank_and_the_global_batch(tmp_path):
    proc, doc = diagnose(tmp_path, "--nproc-per-node", "2", "--batch-sizes", "2,16",
                         "--global-batch", "100")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for batch in doc["batches"]:
        assert batch["status"] == "ok" and batch["world_size"] == 2
        assert [r["rank"] for r in batch["ranks"]] == [0, 1]
        assert all(r["latency_s"] > 0 for r in batch["ranks"])
        # DDP's communication hook, in the timed steps: one sample per timed step
        n = batch["latency_s"]["n"]
        for key in ("exposed", "in_flight", "step"):
            samples = batch[f"communication_{key}_samples_s"]
            assert len(samples) == n and all(x >= 0 for x in samples)
        assert batch["communication_exposed_s"] >= 0
        assert batch["time_share"]["communication"] >= 0
        assert abs(sum(batch["time_share"].values()) - 1) < 1e-6
    dp = doc["distributed"]
    assert dp["world_size"] == 2 and dp["backend"] == "gloo" and dp["wrapped_by"] == "batchscope"
    # 64x256 + 256 + 256x64 + 64 fp32 parameters, and the unused head's 64x8 + 8: DDP
    # all-reduces every trainable parameter's bucket each step
    assert dp["allreduce_bytes_per_step"] == (64 * 256 + 256 + 256 * 64 + 64 + 64 * 8 + 8) * 4
    # the head gets no gradient: without find_unused_parameters DDP fails at step two
    assert doc["model"]["distributed"]["parameters_without_gradient"] == 2
    assert doc["model"]["distributed"]["find_unused_parameters"] is True
    collectives = [op for b in doc["batches"] for op in b["ops"]
                   if op["name"] == "c10d::allreduce_"]
    assert collectives and {op["bound"] for op in collectives} == {"communication"}
    assert all(sum(op["bytes"].values()) == 0 for op in collectives)  # not step bytes
    assert dp["bus_bandwidth_bytes_per_s"] > 0
    bus = doc["model"]["distributed"]["bus_bandwidth"]
    assert bus["source"] in ("measured", "cache")
    assert bus["busbw_bytes_per_s"] == dp["bus_bandwidth_bytes_per_s"]
    assert [r["rank"] for r in doc["model"]["distributed"]["ranks"]] == [0, 1]
    from batchscope.hardware.interconnect import cached_bus_bandwidths

    cached = [g for g in cached_bus_bandwidths() if g["group"]["world_size"] == 2]
    assert cached and cached[0]["group"]["backend"] == "gloo"  # diagnose hardware lists it
    for row in dp["batches"]:  # one communication figure per size, with its intervals
        exposed, band = row["communication_exposed_s"], row["communication_exposed_interval_s"]
        assert exposed >= 0 and band["low"] <= exposed <= band["high"] and band["high"] > 0
        share, band = row["communication_share"], row["communication_share_interval"]
        assert 0 <= band["low"] <= share <= band["high"] <= 1
        assert row["communication_in_flight_s"] >= exposed
        assert 0 <= row["hidden_share"] <= 1
    assert dp["communication_trend"] in ("falls", "rises", "within_noise")
    # The decision rounds: the ranks' own launch, then a fresh launch of both, timed the
    # sizes side by side, with their communication shares; each share's interval spans
    # the fresh launch's share there.
    control = doc["run"]["drift"]
    assert control is not None and control["batch_size"] == 2
    ref = control["timings"][0]
    assert ref["first_communication_share"] == dp["batches"][0]["communication_share"]
    assert 0 <= ref["control_communication_share"] <= 1
    timed_again = {t["batch_size"]: t for t in control["timings"]}
    for row in dp["batches"]:
        again = timed_again.get(row["batch_size"])
        if again is not None:
            band = row["communication_share_interval"]
            assert band["low"] <= again["control_communication_share"] <= band["high"]
    assert "in the first launch of the ranks" in (tmp_path / "out" / "report.html").read_text()
    rec = dp["recommendation"]
    per_step = rec["per_rank_batch"] * 2
    assert rec["global_batch"] == per_step
    assert rec["accumulation_steps"] == -(-100 // per_step)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "Data parallel: 2 ranks" in html and "Ranks at batch 16" in html
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert f"global batch of {per_step}" in summary
    assert not ranks_left()


@pytest.mark.slow
@pytest.mark.rounds
def test_two_nodes_on_one_machine_give_the_same_kind_of_report(tmp_path):
    # One process per "node", as a job scheduler would start them, rendezvous on 127.0.0.1.
    from batchscope.profiler.launcher import _free_port

    endpoint = f"127.0.0.1:{_free_port()}"
    common = ["--device", "cpu", "--nproc-per-node", "1", "--nnodes", "2",
              "--rdzv-endpoint", endpoint]
    node0 = subprocess.Popen(
        [sys.executable, "-m", "batchscope", TINY, *common, "--node-rank", "0",
         "--batch-sizes", "1,8", "--no-ops", "--out", str(tmp_path / "out")], cwd=ROOT,
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    node1 = subprocess.run(
        [sys.executable, "-m", "batchscope", TINY, *common, "--node-rank", "1",
         "--out", str(tmp_path / "node1")], cwd=ROOT, text=True, capture_output=True,
        timeout=240)
    _, err0 = node0.communicate(timeout=60)
    err1 = node1.stderr
    assert node0.returncode == 0, err0[-2000:]
    assert node1.returncode == 0, err1[-2000:]
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "node 0 writes the report" in err1
    assert not (tmp_path / "node1" / "report.json").exists()
    assert doc["distributed"]["world_size"] == 2
    assert [[r["rank"] for r in b["ranks"]] for b in doc["batches"]] == [[0, 1], [0, 1]]
    assert doc["distributed"]["recommendation"]["global_batch"] in (2, 16)
    # Node 1's launcher cannot start again: the rounds time in the same ranks.
    assert doc["run"]["drift"]["timings"][0]["batch_size"] == 1
    assert not ranks_left()


@pytest.mark.slow
def test_a_killed_rank_ends_the_sweep_as_rank_failed_and_leaves_no_process(tmp_path):
    proc, doc = diagnose(tmp_path, "--nproc-per-node", "2", "--batch-sizes", "1,4,8",
                         "--no-ops", env={"BATCHSCOPE_TEST_FAULT": "kill:1:4"})
    assert proc.returncode == ExitCode.SOME_FAILED, proc.stderr[-2000:]
    assert [(b["batch_size"], b["status"]) for b in doc["batches"]] == [
        (1, "ok"), (4, "rank_failed")]
    assert "rank 1 killed by SIGKILL" in doc["batches"][1]["error"]
    assert not ranks_left()


@pytest.mark.slow
def test_a_hung_rank_is_named_within_the_batch_timeout(tmp_path):
    started = time.monotonic()
    proc, doc = diagnose(tmp_path, "--nproc-per-node", "2", "--batch-sizes", "1,4",
                         "--no-ops", "--timeout", "9", env={"BATCHSCOPE_TEST_FAULT": "hang:1:4"})
    assert proc.returncode == ExitCode.SOME_FAILED, proc.stderr[-2000:]
    failed = doc["batches"][1]
    assert failed["status"] == "rank_failed" and "rank 1" in failed["error"]
    assert failed["wall_s"] < 9  # the ranks named it before the parent's own timeout
    assert time.monotonic() - started < 120
    assert not ranks_left()


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_keeps_the_partial_report(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchscope", TINY, "--out", str(out), "--device", "cpu",
         "--nproc-per-node", "2", "--batch-sizes", "1,2", "--no-ops"],
        cwd=ROOT, env={**os.environ, "BATCHSCOPE_TEST_FAULT": "hang:0:2"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    report = out / "report.json"
    while time.monotonic() < deadline:
        if report.exists() and json.loads(report.read_text())["batches"]:
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED
    doc = json.loads(report.read_text())
    assert doc["partial"] is True and doc["batches"][0]["status"] == "ok"
    assert not ranks_left()


@pytest.mark.slow
def test_a_rendezvous_that_cannot_form_gets_one_sentence(tmp_path):
    # Two nodes asked for, one started: node 0 waits for its peer, then says why.
    proc, _ = diagnose(tmp_path, "--nproc-per-node", "1", "--nnodes", "2",
                       "--rdzv-endpoint", "127.0.0.1:29591", "--timeout", "10",
                       timeout_s=180)
    assert proc.returncode == ExitCode.NOTHING_MEASURED
    assert "did not form" in proc.stderr and "--rdzv-endpoint" in proc.stderr
    assert not ranks_left()


@pytest.mark.parametrize("args,message", [
    (["--nproc-per-node", "0"], "--nproc-per-node must be at least 1"),
    (["--nproc-per-node", "2", "--nnodes", "2"], "needs --rdzv-endpoint"),
    (["--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2",
      "--rdzv-endpoint", "h:1"], "--node-rank must be between 0 and 1"),
    (["--nproc-per-node", "2", "--rdzv-endpoint", "nohost"], "is not HOST:PORT"),
    (["--nnodes", "2"], "need --nproc-per-node"),
    (["--nproc-per-node", "2", "--global-batch", "0"], "--global-batch must be at least 1"),
])
@pytest.mark.slow
def test_bad_distributed_options_get_one_sentence_and_exit_4(tmp_path, args, message):
    proc, _ = diagnose(tmp_path, *args, timeout_s=60)
    assert proc.returncode == ExitCode.USAGE
    assert message in " ".join(proc.stderr.split())


def test_the_launcher_is_torchs_own_with_torchruns_arguments():
    cmd = launcher_command(DistributedConfig(4, nnodes=2, node_rank=1,
                                             rdzv_endpoint="node0.example:29500"))
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    joined = " ".join(cmd)
    for part in ("--nproc-per-node 4", "--nnodes 2", "--node-rank 1",
                 "--master-addr node0.example", "--master-port 29500",
                 "-m batchscope.profiler.ranks"):
        assert part in joined


def test_the_launchers_root_cause_names_the_rank():
    # torch 2.13's summary when a rank is killed (abridged from a real run)
    output = """
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_04:40:02
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12345)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12345
"""
    assert root_cause(output) == (1, -9)
    assert root_cause("nothing failed") is None


def test_merging_ranks_names_the_one_that_failed_not_the_ones_that_waited_on_it():
    ok = BatchResult(4, Status.OK, ranks=[RankResult(
        0, Status.MODEL_ERROR, error="RuntimeError: [gloo] Timed out waiting")])
    culprit = BatchResult(4, Status.MODEL_ERROR, ranks=[
        RankResult(1, Status.MODEL_ERROR, error="ValueError: bad input")])
    merged = merge_ranks([ok, culprit], 2, 10)
    assert merged.status == Status.RANK_FAILED and merged.batch_size == 4
    assert merged.error.startswith("rank 1 failed: ValueError: bad input")
    assert "ranks 0 then failed waiting on it" in merged.error
    assert [r.rank for r in merged.ranks] == [0, 1]
    assert ok.status == Status.OK and ok.error == ""  # rank 0's own result is left alone
    hung = merge_ranks([BatchResult(4, Status.OK, ranks=[RankResult(0, Status.OK)]), None],
                       2, 10)
    assert (hung.status == Status.RANK_FAILED
            and "rank 1 failed: no result within 10 s" in hung.error)
    assert _ranks_missing("Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms") == [1, 3]
    assert _ranks_missing("Rank 2 failed to pass monitoredBarrier in 5000 ms") == [2]


def test_the_summary_amortizes_communication_and_counts_accumulation_steps():
    def batch(b: int, latency: float, no_sync: float) -> BatchResult:
        return BatchResult(b, Status.OK, latency_s=LatencyStats(latency, latency, latency, 5),
                           ranks=[RankResult(0, Status.OK, latency, no_sync),
                                  RankResult(1, Status.OK, latency * 1.1, no_sync)],
                           communication_exposed_s=latency - no_sync)

    model = ModelInfo(target="m", distributed=DistributedInfo(
        world_size=2, backend="gloo", wrapped_by=WrappedBy.BATCHSCOPE,
        allreduce_bytes_per_step=4_000_000, bus_bandwidth=BusBandwidth(1e9)))
    out = data_parallel_summary(model, [batch(1, 0.010, 0.006), batch(8, 0.050, 0.046)],
                                recommended=8, global_batch=100)
    first, last = out.batches
    assert first.communication_share == pytest.approx(0.4)
    assert last.communication_share == pytest.approx(0.08)
    assert last.global_batch == 16 and last.slowest_rank == 1
    assert last.straggler_lag_s == pytest.approx(0.005)
    rec = out.recommendation
    assert (rec.accumulation_steps, rec.global_batch_reached) == (7, 112)
    assert rec.communication_per_sample_with_accumulation_s == pytest.approx(0.004 / 112)
    assert allreduce_time_s(4_000_000, 2, 1e9) == pytest.approx(0.004)
    assert allreduce_time_s(4_000_000, 4, 1.5e9) == pytest.approx(0.004)  # algbw = 2 GB/s
    assert timed_steps_for(0.001) == 50 and timed_steps_for(10.0) == 5


def test_the_bus_bandwidth_cache_keeps_each_group_apart(tmp_path, monkeypatch):
    from batchscope.hardware import interconnect as ic

    monkeypatch.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path))
    two = ic.bus_bandwidth_key("gloo", "cpu", ["a", "a"], "2.13.0")
    four = ic.bus_bandwidth_key("gloo", "cpu", ["a", "a", "b", "b"], "2.13.0")
    assert ic.load_bus_bandwidth(two) is None
    ic.save_bus_bandwidth(two, {"busbw_bytes_per_s": 8.8e8, "sizes": []})
    assert ic.load_bus_bandwidth(two)["busbw_bytes_per_s"] == 8.8e8
    assert ic.load_bus_bandwidth(four) is None  # another group: measured afresh
    [listed] = ic.cached_bus_bandwidths()
    assert listed["group"]["ranks_per_host"] == [["a", 2]]
    next(tmp_path.glob("allreduce-*.json")).write_text("{not json")
    assert ic.load_bus_bandwidth(two) is None and ic.cached_bus_bandwidths() == []


def test_a_hostile_distributed_section_renders_without_breaking_the_page():
    from batchscope.errors import UsageError
    from batchscope.records.codec import decode_report
    from batchscope.reports.html import render_html
    from batchscope.reports.markdown import render_summary

    doc = json.loads((ROOT / "tests" / "data" / "reports" / "mlp.json").read_text())
    # A section of the wrong shape is refused with one sentence, before any renderer.
    hostile = {**doc, "distributed": {"world_size": "<b>2</b>", "batches": [{}, 3]}}
    with pytest.raises(UsageError, match="distributed"):
        decode_report(hostile, "hostile.json")
    # Text from the ranks (a host name) is the page's text, never its markup.
    size = doc["batches"][0]["batch_size"]
    doc["batches"][0]["ranks"] = [{"rank": 0, "status": "ok", "host": "<script>x</script>"}]
    doc["distributed"] = {
        "world_size": 2, "nodes": 1, "backend": "gloo", "wrapped_by": "batchscope",
        "allreduce_bytes_per_step": 0, "bus_bandwidth_bytes_per_s": None, "batches": [{
            "batch_size": size, "global_batch": 2 * size, "global_throughput_per_s": 1.0,
            "communication_exposed_s": None, "communication_share": None,
            "allreduce_at_bus_bandwidth_s": None, "hidden_share": None, "slowest_rank": None,
            "straggler_lag_s": None}]}
    report = decode_report(doc, "r")
    page = render_html(report)
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "<script>x</script>" not in render_summary(report)
