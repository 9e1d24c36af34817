"""`diagnose trace` against Holistic Trace Analysis (HTA) on the same recorded GPU traces.

HTA (facebookresearch/HolisticTraceAnalysis) is the reference tool for Kineto traces; its
temporal breakdown splits a rank's GPU time over its ProfilerStep iterations into idle,
compute and non-compute (communication, memory) kernel time. This script prints HTA's idle
share beside batchscope's, per trace, from one run.

HTA needs pandas and is not a batchscope dependency. Install it in a venv of its own:
    python -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis
    python benchmarks/trace_crosscheck.py --hta-python /tmp/htavenv/bin/python

The two tools define the step window differently. HTA spans each iteration's kernels and
drops the first iteration when there are several; batchscope runs from the step's host start
to its last kernel, averaged over all steps. The idle shares should agree within a few
points, and the script prints the difference.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from batchscope.traces.diagnose import diagnose_traces  # noqa: E402

TRACES = ["h100-vit-nsfw-inference", "a100-ddp8-train-rank3", "a100-ddp2-nccl-rank0"]
HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
out = {}
for name, folder in json.loads(sys.argv[1]).items():
    row = TraceAnalysis(trace_dir=folder).get_temporal_breakdown(visualize=False).iloc[0]
    out[name] = {k: float(row[k]) for k in ("idle_time_pctg", "compute_time_pctg",
                                             "non_compute_time_pctg")}
print("RESULT" + json.dumps(out))
"""


def hta_breakdown(hta_python: str, traces: dict[str, Path]) -> dict[str, dict[str, float]]:
    """HTA's temporal breakdown per trace, run in HTA's own interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for name, path in traces.items():
            folder = Path(tmp) / name
            folder.mkdir()
            shutil.copy(path, folder / path.name)
            folders[name] = str(folder)
        proc = subprocess.run([hta_python, "-c", HTA_SCRIPT, json.dumps(folders)],
                              capture_output=True, text=True, check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hta-python", required=True, help="python of a venv with HTA")
    args = parser.parse_args()
    traces = {name: ROOT / "tests" / "data" / "gpu-traces" / f"{name}.json.gz" for name in TRACES}
    hta = hta_breakdown(args.hta_python, traces)
    print("| trace | HTA idle | batchscope idle | difference | HTA non-compute | "
          "batchscope communication + copies |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, path in traces.items():
        share = diagnose_traces([path]).batches[0].time_share
        ours_idle = 100 * share.idle
        theirs = hta[name]
        print(f"| {name} | {theirs['idle_time_pctg']:.1f}% | {ours_idle:.1f}% | "
              f"{ours_idle - theirs['idle_time_pctg']:+.1f} | "
              f"{theirs['non_compute_time_pctg']:.1f}% | "
              f"{100 * (share.communication + share.transfer):.1f}% |")


if __name__ == "__main__":
    main()
