"""`diagnose serve --engine transformers` against transformers' own serving, side by side.

For each of two Llama-style configs (random weights, nothing downloaded), one run:

1. the decode sweep a user runs: ``diagnose hf:DIR --task causal-lm-decode`` with a context
   grid and batch sizes 1-16;
2. two seeded streams of the issue's shape (prompts 48-80 tokens, outputs 16-48): *offline*
   (every request at 0) and *Poisson* (arrivals at 60% of what the sweep's batch of 16
   serves: past what caps 4 and 8 serve, near cap 16);
3. the engine's calibration for ``--caps 4,8,16`` exactly as ``diagnose serve --engine
   transformers`` runs it (``measure_engine``: caps 1, 4, 8 and 16, two rounds, then the
   runs not yet settled, up to four), and after each of its rounds one round of the
   *check*: transformers itself serving the whole stream under each policy and cap, on the
   wall clock (``generate()`` on batches of up to ``cap`` arrived requests, and the
   continuous-batching manager with ``max_requests_per_batch=cap``). Interleaved so the
   machine's drift over minutes weighs on both alike; the fastest run of each is kept;
4. ``diagnose serve report.json --trace STREAM --caps 4,8,16 --engine-runs RUNS``: the
   simulation of both policies on the calibration's runs; again with cap 8's runs left out
   (a cap never calibrated); and without the engine (the sweep's step times and the timed
   prefill).

Beside the error: whether the simulated figure lies within the calibration's own noise
(the factor by which a run's second-fastest repeat was slower than its fastest, at most),
the control (the offline stream at the largest cap is the very requests the calibration
served there), the machine's speed during the check's run against the calibration's run
of the same policy and cap (read off the model's forward calls) and the error with it
held, and the policies ranked where the measured repeats rank them.

Printed and written (``--json``): measured and simulated tokens/s per model, stream, policy
and cap, the error, and continuous over static measured against simulated. With
``--default-cache`` also one ``generate_batch()`` call with transformers' default cache
sizing (90% of free memory), the issue's setting, for its start-up cost.

    python benchmarks/serving_engine.py --json docs/data/serving_engine_epyc_run6.json
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from batchscope.engine.policies import two_fastest_spread
from batchscope.records.engine import Engine, EngineStep
from batchscope.records.policy import Policy
from batchscope.reports.engine_runs import read_engine_runs, write_engine_runs
from batchscope.serving.engine_cost import fastest_runs
from batchscope.serving.engines import transformers_engine as te
from batchscope.serving.engines.calibrate import measure_engine
from batchscope.serving.requests import Request, trace_rate_per_s
from batchscope.typed_json import decode
from benchmarks._common import PYTHON, run_timed

MODELS = {  # name: (layers, hidden, heads)
    "llama-4x512": (4, 512, 8),
    "llama-8x768": (8, 768, 12),
}
CAPS = (4, 8, 16)
PROMPT, OUTPUT = (48, 80), (16, 48)
REQUESTS = {"offline": 32, "poisson": 48}
# The Poisson stream's rate, as a share of what the sweep's batch of 16 serves: past what
# caps 4 and 8 can serve, near cap 16's (a lighter load is served at its arrival rate by
# every cap and policy alike, which tells nothing).
LOAD = 0.6
# The cap left out of the calibration for the check of a cap never calibrated.
LEFT_OUT = 8


def write_config(folder: Path, layers: int, hidden: int, heads: int) -> None:
    from transformers import LlamaConfig

    LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                num_attention_heads=heads, num_key_value_heads=heads, vocab_size=32000,
                max_position_embeddings=2048).save_pretrained(folder)


def stream(kind: str, seed: int, rate_per_s: float) -> list[Request]:
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(REQUESTS[kind]):
        if kind == "poisson":
            t += rng.expovariate(rate_per_s)
        out.append(Request(t, rng.randint(*PROMPT), rng.randint(*OUTPUT)))
    return out


def write_trace(path: Path, requests: list[Request]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arrival_s", "prompt_tokens", "output_tokens"])
        for r in requests:
            w.writerow([f"{r.arrival_s:.6f}", r.prompt_tokens, r.output_tokens])


class Check:
    """transformers serving the whole stream under every policy and cap, round by round."""

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests
        self.plan = [(policy, cap) for cap in CAPS for policy in Policy]
        self.measured: dict[tuple[Policy, int], list[Any]] = {}
        self.rounds = 0

    def round(self, model: Any) -> None:
        """Every policy and cap once."""
        for policy, cap in self.plan:
            self.measured.setdefault((policy, cap), []).append(
                te.serve(model, policy, self.requests, cap))
        self.rounds += 1


def call_speed(run: Any, step: EngineStep | None) -> float | None:
    """The median, over ``run``'s decode calls, of each call's time over the engine's fitted
    step at its rows and KV read: how slow the machine ran the model's forward during
    ``run`` against the calibration's fastest runs (1: as fast)."""
    if step is None:
        return None
    ratios = sorted(c.duration_s / step.step_s(c.rows, c.kv_tokens / c.rows)
                    for c in run.forwards if c.decode)
    return ratios[len(ratios) // 2] if ratios else None


def serve_json(args: list[str], out: Path) -> dict[str, Any]:
    """``diagnose serve ARGS --out OUT``'s serving.json."""
    _, proc = run_timed([*args, "--out", str(out)])
    if proc.returncode:
        raise SystemExit(f"diagnose serve exited {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads((out / "serving.json").read_text())  # type: ignore[no-any-return]


def simulated(serving: dict[str, Any]) -> dict[tuple[str, int], float]:
    return {(r["policy"], r["cap"]): r["throughput_tokens_per_s"] for r in serving["runs"]}


def one_model(name: str, work: Path, default_cache: bool, runs_dir: Path | None
              ) -> list[dict[str, Any]]:
    layers, hidden, heads = MODELS[name]
    folder = work / name
    write_config(folder, layers, hidden, heads)
    report_dir = work / f"{name}-report"
    diagnose = str(Path(PYTHON).parent / "diagnose")
    wall, proc = run_timed([diagnose, f"hf:{folder}", "--task", "causal-lm-decode", "--context",
                         "96", "--contexts", "64,96,160", "--batch-sizes", "1,2,4,8,16",
                         "--device", "cpu", "--out", str(report_dir)])
    if proc.returncode:
        raise SystemExit(f"the sweep exited {proc.returncode}: {proc.stderr[-2000:]}")
    report = json.loads((report_dir / "report.json").read_text())
    print(f"{name}: sweep {wall:.0f} s", flush=True)
    b16 = next(b for b in report["batches"] if b["batch_size"] == 16)
    tokens_per_s_16 = 16 / b16["latency_s"]["median"]
    rate = LOAD * tokens_per_s_16 / ((OUTPUT[0] + OUTPUT[1]) / 2)
    target = report["model"]["target"]
    rows = []
    for kind in ("offline", "poisson"):
        requests = stream(kind, seed=7, rate_per_s=rate)
        own_rate = trace_rate_per_s(requests) or 1.0  # replayed at its own rate: unchanged
        trace = work / f"{name}-{kind}.csv"
        write_trace(trace, requests)
        # The check, interleaved with the calibration (as `diagnose serve --engine` runs
        # it: two rounds, then more of the runs not yet settled, up to four): after each
        # calibration round, one round of the check (every policy and cap on the whole
        # stream), so a machine that drifts over minutes weighs on both alike.
        check = Check(requests)
        started = time.perf_counter()
        measurement = measure_engine(Engine.TRANSFORMERS, target, requests, list(CAPS),
                                     after_round=check.round)
        measured = check.measured
        print(f"  {kind}: calibration and check {time.perf_counter() - started:.0f} s "
              f"(calibration {measurement.wall_s:.0f} s)", flush=True)
        runs_file = work / f"{name}-{kind}-engine_runs.json"
        write_engine_runs(runs_file, measurement, target)
        serve_args = [diagnose, "serve", str(report_dir / "report.json"), "--trace", str(trace),
                      "--caps", ",".join(map(str, CAPS)), "--rate", f"{own_rate:.12g}"]
        serving = serve_json([*serve_args, "--engine-runs", str(runs_file)],
                             work / f"{name}-{kind}-serve")
        sim = simulated(serving)
        # Cap 8 never calibrated (its runs left out): simulated between caps 4 and 16.
        kept = read_engine_runs(runs_file).measurement
        left_out = work / f"{name}-{kind}-without-{LEFT_OUT}.json"
        write_engine_runs(left_out, dataclasses.replace(kept, runs=[
            r for r in kept.runs if r.cap != LEFT_OUT]), target)
        between = simulated(serve_json([*serve_args, "--engine-runs", str(left_out)],
                                       work / f"{name}-{kind}-without-{LEFT_OUT}"))
        if runs_dir is not None:
            runs_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(runs_file, runs_dir / runs_file.name)
        # The same what-if without the engine: the sweep's step times and the timed prefill.
        plain = simulated(serve_json(serve_args, work / f"{name}-{kind}-plain"))
        if abs(serving["rates_per_s"][0] / own_rate - 1) > 1e-6:
            raise SystemExit("the Poisson trace was not replayed at its own rate")
        points = serving["engine"]["points"]
        noise = max((p["repeat_spread"] for p in points if p.get("repeat_spread") is not None),
                    default=None)
        steps = {Policy(s["policy"]): decode(s, EngineStep) for s in serving["engine"]["steps"]}
        calibration_runs = {(r.policy, r.cap): r for r in fastest_runs(measurement.runs)}
        for policy in Policy:
            for cap in CAPS:
                runs = measured[(policy, cap)]
                fastest = max(runs, key=lambda r: r.tokens_per_s)
                best = fastest.tokens_per_s
                # The machine's speed during the check's run against the calibration's run
                # of the same policy and cap, both read off the model's forward calls.
                check_speed = call_speed(fastest, steps.get(policy))
                calibration_speed = call_speed(calibration_runs[(policy, cap)],
                                               steps.get(policy))
                drift = check_speed / calibration_speed \
                    if check_speed and calibration_speed else None
                simulated_tps = sim[(policy.value, cap)]
                calibrated = next((p for p in points if p["policy"] == policy.value
                                   and p["cap"] == cap), None)
                rows.append({"model": name, "stream": kind, "policy": policy.value, "cap": cap,
                             "rate_per_s": own_rate if kind == "poisson" else None,
                             "measured_tokens_per_s": best,
                             "measured_runs": [r.tokens_per_s for r in runs],
                             "simulated_tokens_per_s": simulated_tps,
                             "model_only_tokens_per_s": plain[(policy.value, cap)],
                             "error": simulated_tps / best - 1,
                             "drift": drift,
                             "uncalibrated_tokens_per_s": between[(policy.value, cap)]
                             if cap == LEFT_OUT else None,
                             "error_drift_held": simulated_tps / drift / best - 1
                             if drift else None,
                             "calibration_noise": noise,
                             # The calibration's own run at this cap: for the offline stream
                             # at the largest cap, the very same requests (the control).
                             "calibration_measured_tokens_per_s":
                                 calibrated["measured_tokens_per_s"] if calibrated else None,
                             "calibration_requests": calibrated["requests"] if calibrated
                             else None,
                             "calibration": points,
                             "engine_steps": serving["engine"]["steps"]})
                print(f"  {kind} {policy.value:10s} cap {cap:2d}: measured {best:6.1f} "
                      f"({', '.join(f'{r.tokens_per_s:.1f}' for r in runs)}), simulated "
                      f"{simulated_tps:6.1f} ({simulated_tps / best - 1:+.0%}); model only "
                      f"{plain[(policy.value, cap)]:6.1f}; machine {drift or 0:.2f}x the "
                      f"calibration's", flush=True)
    if default_cache:
        rows.append(default_cache_run(te.load_engine_model(target), name))
    return rows


def default_cache_run(model: Any, name: str) -> dict[str, Any]:
    """generate_batch() as the issue ran it: transformers' own cache sizing, cap 8."""
    import resource

    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    requests = stream("offline", seed=7, rate_per_s=1.0)
    prompts = [te._prompt(i, r.prompt_tokens) for i, r in enumerate(requests)]
    tokens = sum(r.output_tokens for r in requests)
    started = time.perf_counter()
    model.generate_batch(prompts, generation_config=te._generation_config(model, 48),
                         continuous_batching_config=ContinuousBatchingConfig(
                             max_requests_per_batch=8), warmup=False)
    wall = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"  generate_batch, default cache, cap 8: {tokens / wall:.1f} tokens/s "
          f"(max resident {rss / 2**30:.1f} GiB)", flush=True)
    return {"model": name, "stream": "offline", "policy": "generate_batch default cache",
            "cap": 8, "measured_tokens_per_s": tokens / wall, "max_rss_bytes": rss}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--default-cache", action="store_true")
    parser.add_argument("--runs-dir", type=Path,
                        help="keep each stream's engine_runs.json here")
    args = parser.parse_args()
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            rows += one_model(name, Path(tmp), args.default_cache, args.runs_dir)
    print()
    print("| model | stream | policy | cap | measured tok/s | simulated | error | model only |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        if "simulated_tokens_per_s" in r:
            print(f"| {r['model']} | {r['stream']} | {r['policy']} | {r['cap']} | "
                  f"{r['measured_tokens_per_s']:.1f} | {r['simulated_tokens_per_s']:.1f} | "
                  f"{r['error']:+.0%} | {r['model_only_tokens_per_s']:.1f} |")
    checked = [r for r in rows if "error" in r]
    within = [abs(r["error"]) <= 0.15 for r in checked]
    print(f"\nwithin 15%: {sum(within)}/{len(within)}")
    held = [abs(r["error_drift_held"]) <= 0.15 for r in checked
            if r["error_drift_held"] is not None]
    print(f"within 15% with the machine's speed held (the model's forward calls in the check "
          f"against the calibration's): {sum(held)}/{len(held)}")
    errors = [r["uncalibrated_tokens_per_s"] / r["measured_tokens_per_s"] - 1
              for r in checked if r["uncalibrated_tokens_per_s"]]
    print(f"cap {LEFT_OUT} never calibrated: {', '.join(f'{e:+.0%}' for e in errors)}; "
          f"within 15%: {sum(abs(e) <= 0.15 for e in errors)}/{len(errors)}")
    # Inside the calibration's own noise: the simulated figure within the factor by which the
    # engine's repeats differed (1 + the largest repeat spread) of the measured one.
    banded = [r for r in checked if r["calibration_noise"] is not None]
    inside = [abs(math.log(1 + r["error"])) <= math.log(1 + r["calibration_noise"])
              for r in banded]
    print(f"inside the calibration's noise: {sum(inside)}/{len(inside)}")
    # The control: the calibration's run of the same requests (offline, 2 x cap requests all
    # at once) against the check's, minutes apart: no simulation can be closer than this.
    for r in checked:
        if r["stream"] == "offline" and r["calibration_requests"] == REQUESTS["offline"] \
                and r["calibration_measured_tokens_per_s"]:
            before, after = r["calibration_measured_tokens_per_s"], r["measured_tokens_per_s"]
            print(f"control {r['model']} {r['policy']} cap {r['cap']}: calibration "
                  f"{before:.1f}, check {after:.1f} tokens/s ({after / before - 1:+.0%})")
    ordered = agree = 0
    for model in sorted({r["model"] for r in checked}):
        for kind in REQUESTS:
            for cap in CAPS:
                mine = {r["policy"]: r for r in checked
                        if r["model"] == model and r["stream"] == kind and r["cap"] == cap}
                cont, stat = mine["continuous"], mine["static"]
                m = cont["measured_tokens_per_s"] / stat["measured_tokens_per_s"]
                s = cont["simulated_tokens_per_s"] / stat["simulated_tokens_per_s"]
                # A tie: the policies differ by less than either's two fastest runs did.
                spread = 1 + max(two_fastest_spread([1 / t for t in r["measured_runs"]]) or 0.0
                                 for r in (cont, stat))
                tie = 1 / spread <= m <= spread
                if not tie:
                    ordered += 1
                    agree += (m > 1) == (s > 1)
                print(f"{model} {kind} cap {cap}: continuous/static measured {m:.2f}"
                      f"{' (tie)' if tie else ''}, simulated {s:.2f}")
    print(f"ranked as measured where the measurements rank them: {agree}/{ordered}")
    print(f"wall {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
