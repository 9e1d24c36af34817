"""Measured ceilings, their per-machine cache, and the GPU datasheet table."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from batchscope.hardware import cache, gpu_specs, microbench
from batchscope.hardware.cache import cache_path, load_or_measure, machine_key
from batchscope.hardware.types import BF16, FP16, FP32, TF32, Ceilings

GFLOP = 1e9
TFLOP = 1e12
GB = 1e9


@pytest.fixture(scope="module")
def quick() -> Ceilings:
    """One real, quick measurement of this CPU, shared by the module (well under a second)."""
    return microbench.measure("cpu", quick=True)


# ------------------------------------------------------------------ a real measurement
def test_quick_cpu_measurement_is_plausible(quick: Ceilings) -> None:
    assert quick.device == "cpu" and quick.name and quick.source == "measured"
    assert 1 * GFLOP < quick.peak_flops_per_s[FP32] < 10 * TFLOP
    assert all(v > 0 for v in quick.peak_flops_per_s.values())
    assert TF32 not in quick.peak_flops_per_s  # TF32 is a CUDA mode only
    assert 1 * GB < quick.bandwidth_bytes_per_s < 1000 * GB
    assert 1e-7 < quick.overhead_s < 1e-3
    assert quick.threads == torch.get_num_threads()
    assert quick.torch_version == torch.__version__
    assert quick.spec is None


def test_bf16_beats_fp32_where_the_cpu_has_native_bf16(quick: Ceilings) -> None:
    if not microbench.cpu_has_native_bf16():
        pytest.skip("no AVX512-BF16/AMX-BF16 on this CPU: bf16 matmul may be emulated")
    assert quick.peak_flops_per_s[BF16] > quick.peak_flops_per_s[FP32]


def test_details_record_raw_figures(quick: Ceilings) -> None:
    mm = quick.details["matmul"][FP32]
    assert mm["sizes"], "at least one size measured"
    for row in mm["sizes"]:
        assert row["repeats"] >= 3 and row["best_s"] <= row["median_s"] <= row["worst_s"]
        assert row["flops_per_call"] == 2 * row["n"] ** 3  # n×n @ n×n
        assert row["spread"] >= 0
    assert quick.peak_flops_per_s[FP32] == max(r["best_flops_per_s"] for r in mm["sizes"])
    # fp16 on a CPU: measured, or the error recorded and the dtype left out
    assert FP16 in quick.peak_flops_per_s or "error" in quick.details["matmul"][FP16]
    cp = quick.details["copy"]
    assert cp["bytes_per_copy"] == 2 * cp["buffer_bytes"]  # read src + write dst
    assert quick.bandwidth_bytes_per_s == pytest.approx(cp["bytes_per_copy"] / cp["best_s"])
    per_op = [v["median_s"] for k, v in quick.details["overhead"].items() if k != "floor_s"]
    assert {"add", "addmm", "linear", "layer_norm"} <= set(quick.details["overhead"])
    assert quick.overhead_s == quick.details["overhead"]["floor_s"] == statistics.median(per_op)
    assert quick.details["quick"] is True
    json.dumps(quick.to_dict(), allow_nan=False)  # JSON-clean, no NaN/inf anywhere


def test_full_run_copy_buffers_are_past_the_cache() -> None:
    cpu, plan = torch.device("cpu"), microbench._CPU_FULL
    free = microbench._available_memory_bytes(cpu)
    if free is not None and free < 8 * plan.copy_max_bytes:
        pytest.skip("too little free memory here for full-size buffers")
    llc = microbench._llc_bytes() or 0
    # at least 256 MiB each, and each at least the reported last-level cache (up to the cap)
    assert microbench.copy_buffer_bytes(cpu, plan) >= max(256 * 2**20, min(llc, plan.copy_max_bytes))


def test_unknown_device_type_is_refused() -> None:
    with pytest.raises(ValueError):
        microbench.measure("meta", quick=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_quick_cuda_measurement_is_plausible() -> None:
    c = microbench.measure("cuda", quick=True)
    assert c.device == "cuda" and c.peak_flops_per_s[FP32] > 100 * GFLOP
    assert c.bandwidth_bytes_per_s > 50 * GB and 1e-7 < c.overhead_s < 1e-3


# ------------------------------------------------------------------ the cache
@pytest.fixture
def fake_measure(quick: Ceilings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Point the cache at tmp_path; measuring returns a copy of ``quick`` and is counted."""
    monkeypatch.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path))
    calls: list[str] = []
    sample = quick

    def measure(device: str = "cpu", *, quick: bool = False) -> Ceilings:
        calls.append(device)
        return dataclasses.replace(sample, details=copy.deepcopy(sample.details))

    monkeypatch.setattr(microbench, "measure", measure)
    return calls


def test_cache_folder_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_path("cpu").parent == tmp_path / "explicit"
    monkeypatch.delenv("BATCHSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path("cpu").parent == tmp_path / "xdg" / "batchscope"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_path("cpu").parent == tmp_path / "home" / ".cache" / "batchscope"


def test_cache_round_trips(fake_measure: list[str], quick: Ceilings, tmp_path: Path) -> None:
    first = load_or_measure("cpu")
    assert first.source == "measured" and first.key == machine_key("cpu")
    path = cache_path("cpu")
    assert path.parent == tmp_path and path.exists()
    assert json.loads(path.read_text())["key"] == machine_key("cpu")  # the full key inside
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    second = load_or_measure("cpu")
    assert second.source == "cache" and fake_measure == ["cpu"]
    assert second.peak_flops_per_s == quick.peak_flops_per_s
    assert second.bandwidth_bytes_per_s == quick.bandwidth_bytes_per_s
    assert second.overhead_s == quick.overhead_s
    assert second.details == json.loads(json.dumps(quick.details))


@pytest.mark.parametrize("change", ["torch_version", "threads", "cpu_model"])
def test_a_changed_machine_key_remeasures(
    change: str, fake_measure: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    load_or_measure("cpu")
    old_key, old_path = machine_key("cpu"), cache_path("cpu")
    if change == "torch_version":
        monkeypatch.setattr(torch, "__version__", "99.0.0+other")
    elif change == "threads":
        other_threads = torch.get_num_threads() + 1
        monkeypatch.setattr(torch, "get_num_threads", lambda: other_threads)
    else:
        monkeypatch.setattr(microbench, "cpu_model_name", lambda: "Another CPU Model 9000")
    assert machine_key("cpu") != old_key and cache_path("cpu") != old_path
    assert load_or_measure("cpu").source == "measured"
    assert len(fake_measure) == 2
    assert load_or_measure("cpu").source == "cache" and len(fake_measure) == 2


def test_recalibrate_remeasures_and_overwrites(fake_measure: list[str]) -> None:
    load_or_measure("cpu")
    again = load_or_measure("cpu", recalibrate=True)
    assert again.source == "measured" and len(fake_measure) == 2
    assert load_or_measure("cpu").source == "cache" and len(fake_measure) == 2


def _valid_file_dict(key: str) -> dict:
    return {"device": "cpu", "name": "x", "peak_flops_per_s": {FP32: 1e11}, "bandwidth_bytes_per_s": 3e10,
            "overhead_s": 1e-6, "key": key}


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[1, 2, 3]",
        "\x00\xff garbage",
        "NAN_IN_OVERHEAD",
        "INFINITY_IN_BANDWIDTH",
        "HUGE_FLOAT",
        "NEGATIVE_PEAK",
        "NO_FP32",
        "MISSING_FIELD",
        "FOREIGN_KEY",
    ],
)
def test_a_corrupt_or_foreign_cache_file_is_ignored(content: str, fake_measure: list[str]) -> None:
    key = machine_key("cpu")
    good = _valid_file_dict(key)
    variants = {
        "NAN_IN_OVERHEAD": json.dumps({**good, "overhead_s": math.nan}),  # writes bare NaN
        "INFINITY_IN_BANDWIDTH": json.dumps({**good, "bandwidth_bytes_per_s": math.inf}),
        "HUGE_FLOAT": json.dumps(good).replace("30000000000.0", "1e999"),  # parses to inf
        "NEGATIVE_PEAK": json.dumps({**good, "peak_flops_per_s": {FP32: -1.0}}),
        "NO_FP32": json.dumps({**good, "peak_flops_per_s": {BF16: 1e11}}),
        "MISSING_FIELD": json.dumps({k: v for k, v in good.items() if k != "overhead_s"}),
        "FOREIGN_KEY": json.dumps({**good, "key": "another machine"}),
    }
    path = cache_path("cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(variants.get(content, content))
    c = load_or_measure("cpu")
    assert c.source == "measured" and len(fake_measure) == 1
    assert json.loads(path.read_text())["key"] == key  # replaced by a sound file
    assert load_or_measure("cpu").source == "cache"


def test_a_sound_hand_written_file_is_read(fake_measure: list[str]) -> None:
    path = cache_path("cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_valid_file_dict(machine_key("cpu"))))
    c = load_or_measure("cpu")
    assert c.source == "cache" and c.peak_flops_per_s == {FP32: 1e11} and not fake_measure


def test_an_unwritable_cache_still_returns_the_measurement(
    fake_measure: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("BATCHSCOPE_CACHE_DIR", str(blocker / "sub"))
    assert load_or_measure("cpu").source == "measured"
    assert load_or_measure("cpu").source == "measured" and len(fake_measure) == 2


def test_machine_key_names_what_invalidates_it() -> None:
    key = json.loads(machine_key("cpu"))
    assert key["device"] == "cpu" and key["threads"] == torch.get_num_threads()
    assert key["torch"] == torch.__version__ and key["cpu"] == microbench.cpu_model_name()
    assert key["format"] == cache.CALIBRATION_FORMAT


# ------------------------------------------------------------------ the datasheet table
@pytest.mark.parametrize(
    ("device_name", "product"),
    [
        ("NVIDIA H200", "H200 SXM 141GB"),
        ("NVIDIA H200 NVL", "H200 NVL 141GB"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
        ("NVIDIA H100 PCIe", "H100 PCIe 80GB"),
        ("NVIDIA H100 NVL", "H100 NVL 94GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A10", "A10 24GB"),
        ("NVIDIA L4", "L4 24GB"),
        ("NVIDIA L40S", "L40S 48GB"),
        ("NVIDIA L40", "L40 48GB"),
        ("NVIDIA B200", "B200 (HGX) 180GB"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090"),
        ("Tesla T4", "T4 16GB"),
    ],
)
def test_lookup_matches_names_as_torch_prints_them(device_name: str, product: str) -> None:
    spec = gpu_specs.lookup(device_name)
    assert spec is not None and spec["product"] == product


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "NVIDIA A10G",
        "AMD Instinct MI300X",
        "",
    ],
)
def test_lookup_refuses_parts_it_does_not_know(device_name: str) -> None:
    assert gpu_specs.lookup(device_name) is None


def test_dense_figures_not_sparse() -> None:
    h100 = gpu_specs.lookup("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100["peak_flops_per_s"][BF16] == pytest.approx(989.5 * TFLOP)  # 1979* sparse / 2
    assert h100["peak_flops_per_s"][TF32] == pytest.approx(494.5 * TFLOP)  # 989* sparse / 2
    assert h100["peak_flops_per_s"][FP32] == pytest.approx(67 * TFLOP)
    a100 = gpu_specs.lookup("NVIDIA A100-SXM4-80GB")
    assert a100 is not None and a100["peak_flops_per_s"][BF16] == pytest.approx(312 * TFLOP)


@pytest.mark.parametrize("spec", gpu_specs.SPECS, ids=lambda s: s.product)
def test_every_row_is_sourced_and_sane(spec: gpu_specs.GpuSpec) -> None:
    assert spec.source.strip() and "http" in spec.source
    dense = spec.peak_flops_per_s
    assert FP32 in dense and all(v > 0 for v in dense.values())
    for dtype, sparse in spec.sparse_flops_per_s.items():
        assert dense[dtype] <= sparse and dense[dtype] == pytest.approx(sparse / 2)
    for dtype in (BF16, FP16, TF32):  # tensor cores never lose to plain fp32 FMA
        if dtype in dense:
            assert dense[dtype] >= dense[FP32]
    assert 100 * GB < spec.bandwidth_bytes_per_s < 20_000 * GB
    assert 8 * 2**30 <= spec.memory_bytes <= 512 * 2**30


def test_lookup_returns_a_fresh_copy() -> None:
    spec = gpu_specs.lookup("NVIDIA L4")
    assert spec is not None
    spec["peak_flops_per_s"][BF16] = 0.0
    assert gpu_specs.lookup("NVIDIA L4")["peak_flops_per_s"][BF16] == pytest.approx(121 * TFLOP)


# ------------------------------------------------------------------ a busy machine
class _Busy:
    """Stands in for OtherLoad: other processes took ``share`` of the CPU."""

    def __init__(self, share: float) -> None:
        self.share = share

    def __enter__(self) -> _Busy:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_ceilings_measured_on_a_busy_machine_are_not_cached_and_are_flagged(
    fake_measure: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchscope.classifiers.analyze import ceiling_flags
    from batchscope.hardware.busy import BUSY_SHARE, OTHER_CPU_SHARE

    monkeypatch.setattr(cache, "OtherLoad", lambda: _Busy(BUSY_SHARE + 0.2))
    busy = load_or_measure("cpu")
    assert busy.source == "measured on a busy machine, not cached"
    assert busy.details[OTHER_CPU_SHARE] == BUSY_SHARE + 0.2
    assert not cache_path("cpu").exists()
    assert "took 45% of the CPU" in ceiling_flags(busy)[0]  # 0.25 + 0.2
    monkeypatch.setattr(cache, "OtherLoad", lambda: _Busy(0.01))
    quiet = load_or_measure("cpu")  # measured again, on a quiet machine this time
    assert quiet.source == "measured" and cache_path("cpu").exists() and len(fake_measure) == 2
    assert not any("other processes" in flag for flag in ceiling_flags(quiet))
    assert load_or_measure("cpu").source == "cache" and len(fake_measure) == 2


def test_other_load_sees_a_busy_neighbour() -> None:
    from batchscope.hardware.busy import MIN_JUDGED_S, OtherLoad

    spin = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\n"
    neighbour = subprocess.Popen([sys.executable, "-c", spin])  # not ours: never waited for
    try:
        with OtherLoad() as load:
            time.sleep(MIN_JUDGED_S + 0.2)
    finally:
        neighbour.kill()
        neighbour.wait()
    # One spinning process takes one core of os.cpu_count(); it shares with whatever else.
    assert load.share >= 0.5 / (os.cpu_count() or 1)
    with OtherLoad() as short:
        pass
    assert math.isnan(short.share)  # too short for /proc/stat's 10 ms ticks to judge


def test_a_peak_matmul_that_spread_widely_between_repeats_is_flagged(quick: Ceilings) -> None:
    from batchscope.classifiers.analyze import CEILING_SPREAD_FLAG, ceiling_flags

    # Issue 14's EPYC: fp32 best 215 GFLOP/s, median 114, spread 0.63 between repeats.
    wide = {"n": 1024, "spread": 0.63, "best_flops_per_s": 215e9, "median_flops_per_s": 114e9}
    ceilings = dataclasses.replace(quick, details={"matmul": {FP32: {
        "peak_size": 1024, "peak_flops_per_s": 215e9, "sizes": [wide]}}})
    (flag,) = ceiling_flags(ceilings, FP32)
    assert "varied by 63% between repeats (best 215, median 114 GFLOP/s)" in flag
    assert ceiling_flags(ceilings, BF16) == []  # not the model's dtype
    narrow = dict(wide, spread=CEILING_SPREAD_FLAG / 2)
    ceilings.details["matmul"][FP32]["sizes"] = [narrow]
    assert ceiling_flags(ceilings, FP32) == []
    ceilings.details["matmul"][FP32]["sizes"] = [dict(wide, best_flops_per_s="fast")]
    assert ceiling_flags(ceilings, FP32) == []  # a hand-edited cache: no flag, no crash
    # A real (quick) measurement reads through the same code.
    assert isinstance(ceiling_flags(quick, FP32), list)
