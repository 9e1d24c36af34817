"""Predicted B* against the measured knee, on the samples, on this machine.

How close the roofline's predicted critical batch size comes to the knee of the measured
throughput curve depends on the machine (its BLAS paths, how far below the roofs its kernels
run), so it is a benchmark, not a test: on the project's Xeon the decode sample's ratio was
0.80 (17.7 vs 22.2), on an EPYC 0.24-0.38 (5.0-8.2 vs 21.2). Runs each sample's sweep
``--rounds`` times and prints predicted, measured and their ratio per round.

    python benchmarks/critical_batch.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import diagnose_cli

# The batch sizes of the acceptance test in tests/test_samples_roofline.py, and the default
# sweep of the decode sample, whose knee lies inside them on both CPUs seen so far.
GRIDS = {
    "samples/llm_decode.py": "1,4,16,64,128",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    print(f"{'sample':26} {'round':>5} {'predicted B*':>13} {'measured knee':>14} {'ratio':>6}")
    for sample, grid in GRIDS.items():
        ratios = []
        for r in range(args.rounds):
            with tempfile.TemporaryDirectory() as out:
                _, doc = diagnose_cli(sample, out, "--batch-sizes", grid)
            rec = doc["recommendation"] or {}
            predicted, knee = rec.get("predicted_critical_batch"), rec.get("measured_knee_batch")
            ratio = predicted / knee if predicted and knee else None
            if ratio is not None:
                ratios.append(ratio)
            print(f"{sample:26} {r + 1:>5} {predicted or float('nan'):>13.1f} "
                  f"{knee or float('nan'):>14.1f} {ratio or float('nan'):>6.2f}")
        if ratios:
            print(f"{sample:26} median ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
