"""How often the pull-request workflow's time gate passes identical code and fails a slower head.

Runs ``diagnose compare --ab`` with the ``AB`` options of docs/batchscope-pr.yml (and its
``THRESHOLD``) on the models of tests/reports/test_workflow_gate.py at one batch size: base
against an identical copy, and base against a head whose step spins 30% of its forward's time
after it (the same counted work). Prints one JSON line a trial (verdict, median ratio, 95%
interval, each pair of processes' median, the machine's load) and the rates at the end.

    python benchmarks/workflow_gate.py --trials 6 [--spin] [--batch-size 64]

``--spin`` keeps one core busy beside the trials (``while True: pass``), as another job on a
shared 2-core runner would. docs/github-actions.md, "What it measured", has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from batchscope.hardware.busy import OtherLoad  # noqa: E402
from tests.reports.test_workflow_gate import model_source  # noqa: E402


def round_medians(ab: dict) -> list[float]:
    by: dict[int, list[float]] = {}
    for p in ab["measurement"]["pairs"]:
        by.setdefault(p["round"], []).append(p["head_latency_s"] / p["base_latency_s"])
    return [round(statistics.median(v), 3) for _, v in sorted(by.items())]


def trial(folder: Path, extra: float, batch: int, options: list[str]) -> dict:
    (folder / "base").mkdir(parents=True, exist_ok=True)
    (folder / "head").mkdir(parents=True, exist_ok=True)
    (folder / "base" / "m.py").write_text(model_source(), encoding="utf-8")
    (folder / "head" / "m.py").write_text(model_source(extra=extra), encoding="utf-8")
    started = time.monotonic()
    with OtherLoad() as load:
        proc = subprocess.run(["diagnose", "compare", "--ab", str(folder / "base" / "m.py"),
                               str(folder / "head" / "m.py"), "--batch-size", str(batch),
                               "--out", str(folder / "ab"), *options],
                              capture_output=True, text=True, check=False)
    ab = json.loads((folder / "ab" / "ab.json").read_text(encoding="utf-8"))
    return {"extra": extra, "exit": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
            "other_cpu_share": round(load.share, 2), "load1": round(os.getloadavg()[0], 2),
            "ratio": round(ab["ratio"], 3), "low": round(ab["ratio_interval"]["low"], 3),
            "high": round(ab["ratio_interval"]["high"], 3), "regression": ab["regression"],
            "inconclusive": ab["inconclusive"], "round_medians": round_medians(ab)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--spin", action="store_true", help="keep one core busy beside them")
    args = parser.parse_args()
    workflow = yaml.safe_load((ROOT / "docs" / "batchscope-pr.yml").read_text(encoding="utf-8"))
    options = [*shlex.split(workflow["env"]["AB"]), "--threshold", workflow["env"]["THRESHOLD"]]
    spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.spin
               else None)
    results: dict[float, list[dict]] = {0.0: [], 0.30: []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.trials):
                for extra in results:
                    line = trial(Path(tmp) / f"{i}-{extra}", extra, args.batch_size, options)
                    results[extra].append(line)
                    print(json.dumps(line), flush=True)
    finally:
        if spinner is not None:
            spinner.kill()
    same, slower = results[0.0], results[0.30]
    print(f"AB options: {' '.join(options)}; batch {args.batch_size}; spin: {args.spin}")
    print(f"identical: exit 0 in {sum(r['exit'] == 0 for r in same)} of {len(same)} "
          f"({sum(r['inconclusive'] for r in same)} inconclusive)")
    print(f"30% slower: exit 1 in {sum(r['exit'] == 1 for r in slower)} of {len(slower)}; "
          f"median ratios {sorted(r['ratio'] for r in slower)}")


if __name__ == "__main__":
    main()
