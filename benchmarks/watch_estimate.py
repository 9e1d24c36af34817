"""watch's estimate of a larger batch against a sweep that measures it, on this machine.

``watch`` profiles a few steps of a real loop at one batch size and estimates larger ones
from the roofline (classifiers/estimate.py). How close an estimate comes depends on the
machine (how far its kernels run from their roofs at each size), so it is a benchmark, not
a test. Runs the train_cnn sample's loop under watch at batch 8, then a sweep at the
estimated sizes, and prints estimate / measured throughput per size.

    python benchmarks/watch_estimate.py
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import batchscope
from batchscope.api import Options, diagnose_file
from benchmarks._common import ROOT, table

WATCHED_BATCH = 8
LOOP_STEPS = 20


def main() -> None:
    path = ROOT / "samples" / "train_cnn.py"
    spec = importlib.util.spec_from_file_location("train_cnn", path)
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    model = sample.build_model().train()
    optimizer = sample.make_optimizer(model)
    with batchscope.watch(model, optimizer=optimizer, out_dir=None) as w:
        for step in range(LOOP_STEPS):
            batch = sample.make_inputs(WATCHED_BATCH, seed=step)
            sample.loss(sample.run(model, batch), batch).backward()
            optimizer.step()
            optimizer.zero_grad()
            w.step()
    estimates = {e.batch_size: e.throughput_per_s for e in w.report.estimates}
    with tempfile.TemporaryDirectory() as out:
        swept = diagnose_file(path, Options(out_dir=out, batch_sizes=sorted(estimates),
                                            min_time_s=0.5))
    rows = []
    for b in swept.batches:
        if b.throughput_per_s:
            ratio = estimates[b.batch_size] / b.throughput_per_s
            rows.append([str(b.batch_size), f"{estimates[b.batch_size]:.1f}",
                         f"{b.throughput_per_s:.1f}", f"{ratio:.2f}"])
    print(table(["batch", "watch estimate /s", "sweep measured /s", "estimate / measured"], rows))


if __name__ == "__main__":
    main()
