"""The GPU evidence run: every GPU path of batchscope on a real NVIDIA GPU, in ~5 minutes.

    python scripts/gpu_check.py --out "$OUT"

Writes under OUT: for each sample and dtype a report folder (report.json, report.html,
summary.md, Perfetto traces), the raw NVML samples of a steady window (``nvml/*.jsonl``,
replayable by ``batchscope.hardware.nvml_sampler.ReplaySampler``), the measured ceilings and
``summary.json`` with the numbers docs/validation.md needs, and two profiler traces of a
training step (``traces/``) read back by ``diagnose trace`` (``trace_report/``). Run it where a
GPU is lent; its output becomes recorded test data under tests/data/gpu/.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNS = [  # (sample, dtype, options): what docs/validation.md reports
    ("llm_decode.py", "bf16", {"max_batch": 512, "trace": True}),
    ("llm_decode.py", "fp32", {"max_batch": 256}),
    ("cnn.py", "bf16", {"max_batch": 256, "trace": True}),
    ("cnn.py", "fp32", {"max_batch": 128}),
    ("mlp.py", "fp32", {"max_batch": 4096}),
]


def driver_version() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def record_nvml(out: Path) -> dict:
    """A steady bf16 matmul loop for 2 s under the live sampler; raw samples kept."""
    import torch

    from batchscope.hardware.nvml_sampler import make_sampler

    props = torch.cuda.get_device_properties(0)
    sampler = make_sampler("cuda", 0, torch_uuid=str(props.uuid))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    sampler.start()
    started = time.perf_counter()
    while time.perf_counter() - started < 2.0:
        a @ a
    torch.cuda.synchronize()
    window = sampler.stop()
    (out / "nvml").mkdir(parents=True, exist_ok=True)
    if hasattr(sampler, "write_samples"):
        sampler.write_samples(out / "nvml" / "bf16_matmul.jsonl")
    sampler.close()
    return window.to_dict()


def record_and_analyse_traces(out: Path, device: str = "cuda") -> dict:
    """A small training step profiled the way users do (schedule, prof.step(), record_shapes)
    at two batch sizes, exported as .json.gz, then read back by ``diagnose trace``: the live
    trace format, the autograd thread and the TF32 roofs on this GPU."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from batchscope.reports.flag_text import flag_text
    from batchscope.traces.diagnose import diagnose_traces

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024)).to(device)
    opt = torch.optim.AdamW(model.parameters())
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    paths = []
    for batch in (8, 64):
        x = torch.randn(batch, 1024, device=device)
        path = out / "traces" / f"train_mlp_b{batch}.json.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with profile(activities=activities, record_shapes=True,
                     schedule=schedule(wait=1, warmup=2, active=3),
                     on_trace_ready=lambda p, path=path: p.export_chrome_trace(str(path))) as prof:
            for _ in range(6):
                opt.zero_grad()
                model(x).square().mean().backward()
                opt.step()
                prof.step()
        paths.append(path)
    report = diagnose_traces(paths, [8, 64], out_dir=str(out / "trace_report"))
    return {"batches": [{"b": b.batch_size, "step_s": b.latency_s.median if b.latency_s else None,
                         "coverage": b.coverage, "time_share": b.time_share.__dict__
                         if b.time_share else None,
                         "tf32_ops": [op.name for op in b.ops if op.roof_dtype == "tfloat32"],
                         "backward_ops": sorted({op.name for op in b.ops if "backward" in op.name
                                                 or op.name == "mm"}),
                         "flags": [flag_text(f) for f in b.flags]} for b in report.batches],
            "hardware": report.hardware.name if report.hardware else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--min-time", type=float, default=1.0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from batchscope.api import Options, diagnose_file
    from batchscope.hardware import load_or_measure

    summary: dict = {"python": platform.python_version(), "driver": driver_version(),
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": []}
    import torch

    summary["torch"] = torch.__version__
    for sample, dtype, extra in RUNS:
        folder = out / f"{sample.removesuffix('.py')}_{dtype}"
        started = time.perf_counter()
        report = diagnose_file(ROOT / "samples" / sample, Options(
            out_dir=str(folder), device="cuda", dtype=dtype, min_time_s=args.min_time, **extra))
        rec = report.recommendation
        summary["runs"].append({
            "sample": sample, "dtype": dtype, "wall_s": time.perf_counter() - started,
            "batches": [{"b": b.batch_size, "status": b.status.value,
                         "throughput_per_s": b.throughput_per_s,
                         "energy_per_unit_j": b.energy_per_unit_j,
                         "time_share": b.time_share.__dict__ if b.time_share else None}
                        for b in report.batches],
            "speedup": rec.speedup_from_batching if rec else None,
            "predicted_b_star": rec.predicted_critical_batch if rec else None,
            "measured_knee": rec.measured_knee_batch if rec else None,
            "recommended": rec.batch_size if rec else None,
            "explanation": rec.explanation if rec else None,
        })
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    # This process touches CUDA only now, after the sweeps (whose workers own the device).
    summary["nvml_window"] = record_nvml(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "ceilings.json").write_text(json.dumps(load_or_measure("cuda").to_dict(), indent=1))
    summary["traces"] = record_and_analyse_traces(out)
    summary["gpu"] = torch.cuda.get_device_name(0)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({r["sample"] + "/" + r["dtype"]: [r["speedup"], r["predicted_b_star"],
                                                       r["measured_knee"]]
                      for r in summary["runs"]}, indent=1))


if __name__ == "__main__":
    main()
