"""`diagnose trace` on the real GPU traces in tests/data/gpu-traces (see its README)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from batchscope.cli import main
from batchscope.records import Bound, FlagKind, TimeBasis
from batchscope.records.report import Mode
from batchscope.reports.flag_text import flag_text
from batchscope.traces.analysis import MISSING_KERNELS, MISSING_SHAPES
from batchscope.traces.diagnose import diagnose_traces
from batchscope.traces.kineto import load_trace
from batchscope.traces.recorded_ops import Recorded, count_recorded
from batchscope.traces.timeline import build_timeline

DATA = Path(__file__).parent.parent / "data" / "gpu-traces"
TRACES = {
    "vit": DATA / "h100-vit-nsfw-inference.json.gz",
    "timesformer": DATA / "h100-timesformer-inference.json.gz",
    "b200": DATA / "b200-eager-rank.json.gz",
    "ddp_train": DATA / "a100-ddp8-train-rank3.json.gz",
    "nccl": DATA / "a100-ddp2-nccl-rank0.json.gz",
}
FILES = ("report.json", "report.html", "summary.md")


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, Path]]:
    """Each shared trace analysed once, its three files written."""
    out = {}
    for key, path in TRACES.items():
        folder = tmp_path_factory.mktemp(key)
        out[key] = (diagnose_traces([path], out_dir=str(folder)), folder)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("key", list(TRACES))
def test_each_trace_writes_the_three_files(reports, key: str) -> None:
    _, folder = reports[key]
    for name in FILES:
        assert (folder / name).stat().st_size > 0
    doc = json.loads((folder / "report.json").read_text())
    assert doc["run"]["source"] == "trace" and doc["run"]["batch_size_known"] is False
    assert doc["batches"][0]["status"] == "ok" and doc["batches"][0]["ops"]
    assert "size unknown" in (folder / "summary.md").read_text()


def _device_time_in_span_s(path: Path) -> float:
    """Kernel/memcpy/memset time overlapping each step's device span, read straight from the
    file (not through the timeline code): what attribution must account for."""
    trace = load_trace(path)
    total = 0.0
    for step in build_timeline(trace).steps:
        for e in trace.device_events:
            lo, hi = max(e["ts"], step.start_us), min(e["ts"] + e["dur"], step.end_us)
            total += max(hi - lo, 0.0) * 1e-6
    return total


@pytest.mark.slow
@pytest.mark.parametrize("key", list(TRACES))
def test_kernel_time_is_attributed_to_ops(reports, key: str) -> None:
    report, _ = reports[key]
    batch = report.batches[0]
    n_steps = batch.latency_s.n
    attributed = sum(op.time_s for op in batch.ops) * n_steps
    assert attributed >= 0.95 * _device_time_in_span_s(TRACES[key])


def _gemm_flops(dims: list[list[int]], name: str) -> int:
    if name == "aten::addmm":  # bias, (M, K), (K, N)
        (m, k), (_, n) = dims[1], dims[2]
        return 2 * m * n * k
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * n * k
    (b, m, k), (_, _, n) = dims[0], dims[1]  # aten::bmm
    return 2 * b * m * n * k


@pytest.mark.parametrize("key", ["vit", "timesformer"])
def test_h100_gemm_flops_are_2mnk_from_recorded_shapes(key: str) -> None:
    # Worked by hand, the ViT's first attention projection: aten::addmm with Input Dims
    # [[768], [788, 768], [768, 768], [], []] (bias, mat1, mat2, beta, alpha) is
    # bias + (788 x 768) @ (768 x 768), 788 = 4 images x
    # 197 tokens: 2 x 788 x 768 x 768 = 929,562,624 FLOPs.
    trace = load_trace(TRACES[key])
    gemms = [e for e in trace.ops if e["name"] in ("aten::addmm", "aten::mm", "aten::bmm")]
    assert gemms
    for event in gemms:
        counted = count_recorded(Recorded.from_event(event))
        assert counted is not None
        assert counted.flops == _gemm_flops(event["args"]["Input Dims"], event["name"])
    if key == "vit":
        first = next(e for e in gemms
                     if e["args"]["Input Dims"][:3] == [[768], [788, 768], [768, 768]])
        assert count_recorded(Recorded.from_event(first)).flops == 929_562_624


@pytest.mark.slow
def test_ddp_training_shows_backward_ops_and_nccl_as_communication(reports) -> None:
    report, folder = reports["ddp_train"]
    batch = report.batches[0]
    assert report.model.mode == Mode.TRAIN
    backward = [op for op in batch.ops if op.name.endswith("_backward") and op.kernels]
    assert {op.name for op in backward} >= {"tanh_backward", "native_layer_norm_backward"}
    # backward ops run on the autograd thread, not the ProfilerStep thread
    trace = load_trace(TRACES["ddp_train"])
    threads = {e["tid"] for e in trace.ops if e["name"] == "aten::tanh_backward"}
    step_thread = {e["tid"] for e in trace.ops if e["name"].startswith("ProfilerStep#")}
    assert threads and not threads & step_thread
    comm = [op for op in batch.ops if op.bound == Bound.COMMUNICATION]
    assert comm and all(op.name.startswith("nccl:") for op in comm)
    assert all(k.name.lower().startswith("nccl") for op in comm for k in op.kernels)
    assert batch.time_share.communication > 0
    # fp32 GEMMs whose kernels are TF32 tensor-op kernels get the TF32 roof
    tf32 = [op for op in batch.ops if op.roof_dtype == "tfloat32"]
    assert tf32 and all(op.dtype == "float32" for op in tf32)
    assert "communication" in (folder / "summary.md").read_text()


def test_nccl_kernels_match_across_nccl_versions(reports) -> None:
    for key in ("nccl", "b200"):  # ncclKernel_* (NCCL 2.17) and ncclDevKernel_* (newer)
        batch = reports[key][0].batches[0]
        assert any(op.bound == Bound.COMMUNICATION for op in batch.ops), key


def test_datasheet_roofs_from_device_properties(reports) -> None:
    h100 = reports["vit"][0].hardware
    assert h100.source == "datasheet" and h100.name == "NVIDIA H100 80GB HBM3"
    assert h100.peak_flops_per_s["bfloat16"] == pytest.approx(989.5e12)
    # deviceProperties stored as a Python repr string (the B200 and A100 traces)
    assert reports["b200"][0].hardware.name == "NVIDIA B200"
    a100 = reports["ddp_train"][0].hardware
    assert a100 is not None and a100.peak_flops_per_s["tfloat32"] == pytest.approx(156e12)


def test_launch_bound_inference_says_so(reports) -> None:
    report, folder = reports["vit"]
    share = report.batches[0].time_share
    assert share.idle > 0.5  # 1.2 ms of kernels in a 7.8 ms step (batch 4 on an H100)
    assert "launch-bound" in (folder / "summary.md").read_text()


def test_trace_without_shapes_says_what_is_missing(reports) -> None:
    report, _ = reports["nccl"]
    batch = report.batches[0]
    assert any("no input shapes recorded" in flag_text(f) for f in batch.flags)
    assert any(f.kind == FlagKind.TRACE_INCOMPLETE and f.values["missing"] == MISSING_SHAPES
               for f in batch.flags)
    assert all(op.flops is None for op in batch.ops)
    assert sum(op.time_s for op in batch.ops) > 0


def test_cpu_only_trace_shows_its_ops(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU())
    x = torch.randn(8, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        model(x)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    report = diagnose_traces([path], out_dir=str(tmp_path / "out"))
    batch = report.batches[0]
    assert any("no GPU kernels" in flag_text(f) for f in batch.flags)
    assert any(f.values.get("missing") == MISSING_KERNELS for f in batch.flags)
    assert report.hardware is None and batch.time_basis == TimeBasis.CPU
    linear = next(op for op in batch.ops if op.name == "linear")
    # linear = t + addmm; addmm counts 2mnk as torch.utils.flop_counter does (bias not added)
    assert linear.flops == 2 * 8 * 64 * 128


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return int(exit_info.value.code or 0)


def test_truncated_trace_is_read_up_to_the_cut(tmp_path: Path) -> None:
    text = gzip.decompress(TRACES["vit"].read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: int(len(text) * 0.7)])
    assert _cli(["trace", str(cut), "--out", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert any("truncated" in f["text"] for f in doc["batches"][0]["flags"])


def test_unreadable_traces_exit_4_with_one_sentence(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("this is not a trace")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": [1, 2]}))
    assert _cli(["trace", str(junk), "--out", str(tmp_path / "a")]) == 4
    assert "not a profiler trace" in capsys.readouterr().err
    assert _cli(["trace", str(other), "--out", str(tmp_path / "b")]) == 4
    assert "no traceEvents" in capsys.readouterr().err
    assert _cli(["trace", str(tmp_path / "missing.json"), "--out", str(tmp_path / "c")]) == 4


def test_an_unreadable_trace_among_readable_ones_is_a_warning(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.json"
    junk.write_text("this is not a trace")
    assert _cli(["trace", str(TRACES["nccl"]), str(junk), "--out", str(tmp_path / "out")]) == 0
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "warning: not read: " in err and "is not a profiler trace" in err
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    first = doc["flags"][0]  # the front end's flags come first, as before
    assert first["kind"] == "trace_not_read" and first["text"].startswith("not read: ")


def test_batch_sizes_must_fit_the_traces(tmp_path: Path, capsys) -> None:
    code = _cli(["trace", str(TRACES["vit"]), "--batch-sizes", "4,8", "--out", str(tmp_path)])
    assert code == 4 and "one batch size per trace" in capsys.readouterr().err


def test_given_batch_sizes_give_throughput(tmp_path: Path) -> None:
    report = diagnose_traces([TRACES["vit"], TRACES["vit"]], [4, 8], out_dir=str(tmp_path))
    assert [b.batch_size for b in report.batches] == [4, 8]
    b4 = report.batches[0]
    assert b4.throughput_per_s == pytest.approx(4 / b4.latency_s.median)


def _slower_rank(path: Path, rank: int, stretch: float, out: Path) -> Path:
    """A faithful fake of another rank: the same trace, every time stretched, its rank set."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc["distributedInfo"]["rank"] = rank
    t0 = min(e["ts"] for e in doc["traceEvents"] if isinstance(e.get("ts"), (int, float)))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = t0 + (e["ts"] - t0) * stretch
        if isinstance(e.get("dur"), (int, float)):
            e["dur"] = e["dur"] * stretch
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.slow
def test_ranks_are_shown_per_rank_with_the_slowest_named(tmp_path: Path) -> None:
    rank1 = _slower_rank(TRACES["nccl"], 1, 1.3, tmp_path / "rank1.json")
    report = diagnose_traces([TRACES["nccl"], rank1], out_dir=str(tmp_path / "out"))
    rows = report.run.ranks[1]
    assert sorted(r.rank for r in rows) == [0, 1]
    assert [r.rank for r in rows if r.slowest] == [1]
    assert any("rank 1 is the slowest of 2 ranks" in flag_text(f)
               for f in report.batches[0].flags)
    assert "Ranks" in (tmp_path / "out" / "summary.md").read_text()


def test_trace_report_page_draws_offline(reports, tmp_path: Path) -> None:
    from tests.reports.browser import find_chromium, open_page

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no chromium on PATH")
    _, folder = reports["ddp_train"]
    run = open_page(chromium, folder / "report.html", tmp_path, 1400, 1600)
    assert run.body.get("data-charts-drawn") == run.body.get("data-charts-expected") != "0"
    assert run.body.get("data-csp-violations") == "0" and not run.page_requests
    assert "datasheet roofs" in run.dom and "GPU idle" in run.dom


def test_ops_served_from_cache_are_not_called_accounting_errors(reports) -> None:
    # issue 13, finding 8: an op whose bytes fit in the L2 (40 MiB on this A100) is faster
    # than the DRAM roof by design, not by an accounting error
    from batchscope.reports import view

    report, folder = reports["ddp_train"]
    raw = [flag_text(f) for _, _, f in view.op_flags(report)]
    cached = [text for text in raw if text.startswith("served from cache")]
    assert cached and all("cache 40 MiB" in text for text in cached)
    assert not any(text.startswith("accounting error") and "fit in cache" in text
                   for text in raw)
    assert "accounting error" not in (folder / "summary.md").read_text()


def test_an_addmm_far_above_the_kernel_floor_is_not_overhead_bound(reports) -> None:
    # issue 32: 13 calls of 39 µs a step on the A100, against a 3 µs kernel floor, were
    # called overhead-bound because the roof of a call (1.7 µs) is under the floor. Its
    # kernels' floors are a small part of its time: it is placed by its intensity.
    report, _ = reports["ddp_train"]
    floor_s = report.hardware.overhead_s
    batch = report.batches[0]
    addmm = next(op for op in batch.ops if op.name == "addmm"
                 and op.input_shapes == [[96], [1024, 512], [512, 96]])
    assert addmm.roof_time_s / addmm.calls < floor_s < addmm.time_s / addmm.calls / 10
    assert addmm.bound == Bound.MEMORY
    for op in batch.ops:  # every op left overhead-bound spends half its time on floors
        if op.bound == Bound.OVERHEAD:  # (at least one kernel a call)
            launches = max(sum(k.calls for k in op.kernels), op.calls)
            assert launches * floor_s >= 0.5 * op.time_s, op.name


def test_a_trace_headline_says_most_only_of_a_majority(reports) -> None:
    # issue 32: 28% of the step in ops without a FLOP formula is its largest share, not
    # "mostly" the step
    from batchscope.reports import narrative

    report, _ = reports["ddp_train"]
    share = report.batches[0].time_share
    assert max(vars(share).values()) < 0.5
    headline = narrative.trace_headline(report) or ""
    assert "mostly" not in headline and "less than half" in headline
    page = (reports["ddp_train"][1] / "report.html").read_text()
    assert "Roofline of this machine" not in page
    assert "Roofline of the NVIDIA A100-PG509-200 datasheet" in page
