"""Predicted on a named GPU against published measurements (docs/benchmarks.md, table 11).

ResNet-50 v1.5 (benchmarks/target_models/resnet50.py) predicted with ``--target-gpu`` on
V100 and T4 in fp32 and fp16, against NVIDIA DeepLearningExamples' inference tables
(benchmarks/data/published/resnet50_dle_inference.csv; PROVENANCE.md says where from).
Nothing is timed: the figures are the same on every machine.

    python benchmarks/target_gpu.py
"""

from __future__ import annotations

import csv
from pathlib import Path

from batchscope.classifiers.critical_batch import fit_knee
from batchscope.contract import load_model_file
from batchscope.target.predict import predict

HERE = Path(__file__).parent
CASES = (("V100 16GB", "FP32", "V100 SXM2 16GB", "fp32"),
         ("V100 16GB", "Mixed Precision", "V100 SXM2 16GB", "fp16"),
         ("T4", "FP32", "T4", "fp32"),
         ("T4", "Mixed Precision", "T4", "fp16"))


def main() -> None:
    with open(HERE / "data/published/resnet50_dle_inference.csv") as f:
        rows = list(csv.DictReader(f))
    spec = load_model_file(HERE / "target_models/resnet50.py")
    inside = total = 0
    worst = 0.0
    for gpu, precision, target, dtype in CASES:
        published = {int(r["batch_size"]): float(r["throughput_img_per_s"]) for r in rows
                     if r["gpu"] == gpu and r["precision"] == precision}
        section = predict(spec, target, dtype, sorted(published))
        print(f"\n{gpu} {precision} (predicted as {target}, {dtype}); pick {section.pick}, "
              f"knee {section.knee_batch:.1f}" if section.knee_batch else "")
        print("| batch | published step (ms) | predicted (ms) | band (ms) | error | in band |")
        print("|---:|---:|---:|---:|---:|:-:|")
        for b in section.batches:
            step_pub = b.batch_size / published[b.batch_size]
            err = b.predicted_step_s / step_pub - 1
            ok = b.low_s <= step_pub <= b.high_s
            inside += ok
            total += 1
            worst = max(worst, abs(err))
            print(f"| {b.batch_size} | {step_pub * 1e3:.2f} | {b.predicted_step_s * 1e3:.2f} | "
                  f"{b.low_s * 1e3:.1f}–{b.high_s * 1e3:.1f} | {err:+.0%} | "
                  f"{'yes' if ok else 'no'} |")
        knee, _ = fit_knee([float(b) for b in sorted(published)],
                           [b / published[b] for b in sorted(published)])
        print(f"published knee {knee:.1f}, predicted {section.knee_batch:.1f} "
              f"({section.knee_batch / knee:.2f}x)")
    print(f"\nin band: {inside}/{total} ({inside / total:.0%}); worst step error "
          f"{worst:.0%}")


if __name__ == "__main__":
    main()
