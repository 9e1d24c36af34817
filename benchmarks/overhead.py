"""Overhead: the time batchscope's whole run spends outside the model's own timed steps.

For each sample, ``diagnose SAMPLE --device cpu`` runs start to exit (the whole run, as a
user runs it), and its report.json gives, per batch size, the timed steps (count × median
step latency: the steps the latency comes from) and the worker's wall time for that batch
size. The run splits into:

- **timed steps**: the model's own steps that the timing pass measured;
- **per batch size, outside them**: building the inputs (the model file's ``make_inputs``,
  timed again here on its own), warm-up, the capture and counting passes, the join;
- **allocator check, timed**: the same model's steps timed again with glibc keeping its
  buffers (reported side by side in ``allocator``), when page faults were flagged;
- **fixed**: interpreter start, imports, starting the worker and building the model, the
  ceilings (cached), the kernel probes, the allocator check's warm-ups, the report files,
  exiting.

Overhead share = 1 - (timed steps + the allocator check's timed steps) / whole run: the
number to drive down. With
``--before-src`` an older batchscope tree runs in the same run, for before/after.

    python benchmarks/overhead.py samples/mlp.py
    python benchmarks/overhead.py --before-src /tmp/bs-before
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.hardware.busy import OtherLoad
from benchmarks._common import (
    SAMPLES,
    bench_env,
    diagnose_cli,
    load_spec,
    table,
)


def split(wall_s: float, report: dict[str, Any]) -> dict[str, float]:
    ok = [b for b in report["batches"] if b.get("latency_s")]
    timed = sum(b["latency_s"]["n"] * b["latency_s"]["median"] for b in ok)
    # The allocator check's own timed steps (the same model with glibc keeping its
    # buffers, reported side by side): measurement, not overhead.
    kept = sum((r.get("kept_timed_steps") or 0) * (r.get("kept_latency_s") or 0.0)
               for r in (report.get("allocator") or {}).get("batches") or [])
    per_batch = sum(b.get("wall_s") or 0.0 for b in report["batches"])
    return {"wall": wall_s, "timed": timed, "kept": kept, "per_batch_outside": per_batch - timed,
            "fixed": wall_s - per_batch - kept, "sizes": len(ok)}


def make_inputs_s(sample: str, sizes: list[int]) -> float:
    """Seconds the model file's make_inputs takes for these batch sizes (user code)."""
    spec = load_spec(sample)
    started = time.perf_counter()
    for b in sizes:
        spec.make_inputs(b)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=SAMPLES)
    parser.add_argument("--before-src", default=None,
                        help="an older batchscope tree to run the same way (its PYTHONPATH)")
    args = parser.parse_args()
    versions = {"after": None}
    if args.before_src:
        versions = {"before": args.before_src, "after": None}
    rows = []
    for sample in args.models:
        for label, src in versions.items():
            env = bench_env()
            if src:
                env["PYTHONPATH"] = src
            with tempfile.TemporaryDirectory() as out, OtherLoad() as load:
                wall, report = diagnose_cli(sample, out, env=env)
            parts = split(wall, report)
            sizes = [b["batch_size"] for b in report["batches"] if b.get("latency_s")]
            user = make_inputs_s(sample, sizes)
            rows.append([
                Path(sample).name, label, str(int(parts["sizes"])), f"{wall:.1f} s",
                f"{parts['timed']:.1f} s", f"{parts['kept']:.1f} s",
                f"{parts['per_batch_outside']:.1f} s", f"{user:.1f} s",
                f"{parts['fixed']:.1f} s",
                f"{1 - (parts['timed'] + parts['kept']) / wall:.0%}",
                f"{1 - (parts['timed'] + parts['kept'] + user) / wall:.0%}", load.note(),
            ])
            print(f"{sample} {label}: {wall:.1f} s", file=sys.stderr, flush=True)
    print(table(["sample", "batchscope", "batch sizes", "whole run", "timed steps",
                 "allocator check, timed", "per batch size, outside timed steps",
                 "of which make_inputs",
                 "fixed", "overhead share", "overhead share without make_inputs",
                 "other processes' CPU"], rows))


if __name__ == "__main__":
    main()
