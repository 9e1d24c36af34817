"""The fitted step-time model against measured latencies, from small batch sizes only.

For each sample, a full sweep (``--measure-all`` over powers of two; or the report.json of
one, ``--from DIR`` holding ``<sample>/report.json``) is refitted on the batch sizes <=
``--fit-max`` (8: issue 14's "from measurements at batch sizes <= 8") and the model
predicts every other measured size, with its kernel probes (matmuls, convolutions and the
replayed per-row ops, no budget) timed here, in this process, at every size, and without
them, side by side. A report recorded before an op's call args were (or a sweep run with
an older batchscope) leaves that op unprobed. Prints predicted/measured - 1 per
size, the predicted knee against the measured one, and the largest error beyond the fit.

    python benchmarks/prediction.py                      # sweeps each sample (slow: minutes)
    python benchmarks/prediction.py --from /tmp/sweeps   # refit recorded full sweeps
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.classifiers.critical_batch import measured_knee
from batchscope.classifiers.roofline import classify_batch
from batchscope.classifiers.step_model import fit_step_model
from batchscope.hardware.types import Ceilings
from batchscope.probe_plan import probe_specs
from batchscope.records import BatchResult
from batchscope.records.codec import decode
from benchmarks._common import SAMPLES, diagnose_cli


def report_of(sample: str, source: Path | None, max_batch: int) -> dict:
    name = Path(sample).stem
    if source is not None:
        return json.loads((source / name / "report.json").read_text())
    with tempfile.TemporaryDirectory() as out:
        _, doc = diagnose_cli(sample, out, "--measure-all", "--max-batch", str(max_batch))
    return doc


def _probes(small: list, sizes: list[int], ceilings: Ceilings, doc: dict) -> dict[str, float]:
    """The kernel probes the worker would time, timed here (the CPU; each in its op's dtype,
    else the model's)."""
    import torch

    from batchscope.profiler.probe import run_probes

    params = doc["model"].get("parameter_bytes") or 0
    cold = ceilings.cache_bytes if params > (ceilings.cache_bytes or 0) else None
    dtype = getattr(torch, doc["model"].get("dtype") or "float32")
    return run_probes(probe_specs(small, sizes, budget_s=float("inf")), dtype,
                      torch.device("cpu"), lambda: None, cold).times_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, default=None)
    parser.add_argument("--fit-max", type=int, default=8)
    parser.add_argument("--max-batch", type=int, default=1024)
    parser.add_argument("samples", nargs="*", default=SAMPLES)
    args = parser.parse_args()
    for sample in args.samples:
        try:
            doc = report_of(sample, args.source, args.max_batch)
        except FileNotFoundError:
            print(f"{sample}: no recorded sweep")
            continue
        ceilings = Ceilings.from_dict(doc["hardware"])
        results = [classify_batch(decode(b, BatchResult), ceilings) for b in doc["batches"]]
        results = [r for r in results if r.latency_s is not None]
        fit = [r.batch_size for r in results if r.batch_size <= args.fit_max]
        small = [r for r in results if r.batch_size in fit]
        probes = _probes(small, [r.batch_size for r in results], ceilings, doc)
        knee, _ = measured_knee(results)
        print(f"{sample}: fitted on {fit}; measured knee {knee or float('nan'):.1f}")
        for label, timed in (("probed", probes), ("formula only", None)):
            model = fit_step_model(results, ceilings, fit, timed)
            if model is None:
                print("  too few batch sizes to fit")
                break
            errors = {r.batch_size: model.latency_s(r.batch_size) / r.latency_s.median - 1
                      for r in results}
            beyond = [abs(e) for b, e in errors.items() if b > args.fit_max]
            predicted_knee, _ = model.knee([r.batch_size for r in results])
            print(f"  {label:13} " + "  ".join(f"{b}:{e:+.0%}" for b, e in errors.items()))
            print(f"  {'':13} largest |error| beyond {args.fit_max}: "
                  f"{max(beyond) if beyond else float('nan'):.0%}; knee predicted "
                  f"{predicted_knee or float('nan'):.1f}")


if __name__ == "__main__":
    main()
