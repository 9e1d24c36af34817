"""A real serving loop against batchscope's serving simulator, side by side from one run.

The loop serves a seeded Poisson request stream with the decode sample (samples/llm_decode.py)
on this CPU: real KV cache slots (one preallocated buffer per layer, a row per slot), real
greedy decoding (each step's argmax is the next step's input), and real static or continuous
batching. Requests arrive on the wall clock; the loop sleeps when it has nothing to run.

- **static**: an idle server takes up to ``cap`` waiting requests and steps until the
  longest is done; finished rows stay in the batch (they rewrite their last slot).
- **continuous**: before every step, waiting requests fill free slots; after it, finished
  rows leave (the last row's cache is copied into the freed slot, so the batch stays one
  contiguous block of rows).

A request's prompt is copied into its slot on admission (prefill is not run; the simulator
assumes the same), and its first token comes with its first decode step. The step is the
sample's own forward, the one the sweep measured: every row at its own position, the cache
viewed up to the longest context in the batch, later slots masked.

The simulator gets the step-time model fitted from a batchscope sweep of the same sample with
a context grid (``--contexts``), and the same stream. Printed: throughput and p50/p99 TPOT,
p99 TTFT, simulated against real, per policy and rate, and continuous over static in each.

    python benchmarks/serving_loop.py                   # sweeps first (about 2 minutes)
    python benchmarks/serving_loop.py --report R.json   # reuse a sweep with a context grid
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from batchscope.records.codec import decode_report, to_builtins
from batchscope.records.serving import ServingMetrics
from batchscope.serving.metrics import summarize, summarize_simulation
from batchscope.serving.requests import Request, TokenRange, poisson_stream
from batchscope.serving.simulator import Policy, Served, simulate
from batchscope.serving.step_time import fit_step_time
from benchmarks._common import ROOT, diagnose_cli

SAMPLE = "samples/llm_decode.py"
CONTEXTS = "128,256,512"
WARMUP_STEPS = 3
DRIFT_STEPS = 7


def load_sample() -> Any:
    sys.path.insert(0, str(ROOT / "samples"))
    import llm_decode

    return llm_decode


class _Row:
    def __init__(self, served: Served, cached: int, token: int) -> None:
        self.served, self.cached, self.token, self.generated = served, cached, token, 0

    @property
    def done(self) -> bool:
        return self.generated >= self.served.request.output_tokens


class RealServer:
    """The decode sample served for real, one policy at a time."""

    def __init__(self, cap: int, max_tokens: int, seed: int = 0) -> None:
        self.m = load_sample()
        self.model = self.m.build_model()
        self.cap, self.slots = cap, max_tokens + 1
        shape = (cap, self.m.N_HEAD, self.slots, self.m.HEAD_DIM)
        self.k = [torch.zeros(shape) for _ in range(self.m.N_LAYER)]
        self.v = [torch.zeros(shape) for _ in range(self.m.N_LAYER)]
        gen = torch.Generator().manual_seed(seed)
        one = (self.m.N_HEAD, self.slots, self.m.HEAD_DIM)
        # A prompt's keys and values stand in for its prefill, as in make_inputs.
        self.prompt_k = [torch.randn(one, generator=gen) for _ in range(self.m.N_LAYER)]
        self.prompt_v = [torch.randn(one, generator=gen) for _ in range(self.m.N_LAYER)]
        self.rng = random.Random(seed)

    def _admit(self, rows: list[_Row], served: Served, now: float) -> None:
        slot, prompt = len(rows), served.request.prompt_tokens
        for layer in range(self.m.N_LAYER):
            self.k[layer][slot, :, :prompt] = self.prompt_k[layer][:, :prompt]
            self.v[layer][slot, :, :prompt] = self.prompt_v[layer][:, :prompt]
        served.admitted_s = now
        rows.append(_Row(served, prompt, self.rng.randrange(self.m.VOCAB)))

    def _step(self, rows: list[_Row]) -> None:
        n = len(rows)
        length = max(r.cached for r in rows) + 1
        ids = torch.tensor([[r.token] for r in rows])
        positions = torch.tensor([[r.cached] for r in rows])
        logits = self.model(ids, positions, [k[:n, :, :length] for k in self.k],
                            [v[:n, :, :length] for v in self.v])
        for row, token in zip(rows, logits.argmax(-1).tolist()):
            if not row.done:  # a static batch's finished row is held, not advanced
                row.token, row.cached, row.generated = token, row.cached + 1, row.generated + 1

    def _leave(self, rows: list[_Row], i: int) -> None:
        """Row i's request is done: the last row moves into its slot."""
        last = len(rows) - 1
        if i != last:
            held = rows[last].cached
            for layer in range(self.m.N_LAYER):
                self.k[layer][i, :, :held] = self.k[layer][last, :, :held]
                self.v[layer][i, :, :held] = self.v[layer][last, :, :held]
            rows[i] = rows[last]
        rows.pop()

    def warm_up(self) -> None:
        rows = [_Row(Served(Request(0.0, self.slots - 2, 1)), self.slots - 2, 0)
                for _ in range(self.cap)]
        for _ in range(WARMUP_STEPS):
            self._step(rows)
            for r in rows:
                r.generated, r.cached = 0, self.slots - 2

    def serve(self, stream: list[Request], policy: Policy) -> list[Served]:
        served = [Served(r) for r in stream]
        waiting = deque(served)
        rows: list[_Row] = []
        start = time.perf_counter()
        with torch.inference_mode():
            while waiting or rows:
                now = time.perf_counter() - start
                if not rows or policy == Policy.CONTINUOUS:
                    while waiting and waiting[0].request.arrival_s <= now \
                            and len(rows) < self.cap:
                        self._admit(rows, waiting.popleft(), now)
                if not rows:
                    time.sleep(max(waiting[0].request.arrival_s - now, 0.0))
                    continue
                self._step(rows)
                now = time.perf_counter() - start
                for row in rows:
                    if row.generated == 1 and row.served.first_token_s is None:
                        row.served.first_token_s = now
                    if row.done and row.served.finished_s is None:
                        row.served.finished_s = now
                if policy == Policy.CONTINUOUS:
                    for i in range(len(rows) - 1, -1, -1):
                        if rows[i].done:
                            self._leave(rows, i)
                elif all(r.done for r in rows):
                    rows = []
        return served


def machine_drift(server: RealServer, doc: dict[str, Any], cap: int) -> dict[int, float]:
    """This process's median step, timed here now, over the sweep's at each batch size up to
    ``cap`` at the sweep's context: 1.0 when the machine runs as it did during the sweep."""
    measured = {b["batch_size"]: b["latency_s"]["median"] for b in doc["batches"]
                if b.get("status") == "ok" and b["batch_size"] <= cap}
    context = doc["model"]["contexts"][0]
    out = {}
    with torch.inference_mode():
        for b, sweep_s in sorted(measured.items()):
            inputs = server.m.make_inputs(b, context)
            server.model(**inputs)
            times = []
            for _ in range(DRIFT_STEPS):
                started = time.perf_counter()
                server.model(**inputs)
                times.append(time.perf_counter() - started)
            out[b] = sorted(times)[DRIFT_STEPS // 2] / sweep_s
    return out


def _err(sim: float | None, real: float | None) -> str:
    if not sim or not real:
        return "–"
    return f"{sim / real - 1:+.0%}"


def _ms(x: float | None) -> str:
    return f"{x * 1e3:.0f}" if x is not None else "–"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="report.json of a sweep with a context grid")
    parser.add_argument("--rates", default="0.4,0.8,1.6", help="requests per second")
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--cap", type=int, default=8)
    parser.add_argument("--prompt-tokens", default="32:256")
    parser.add_argument("--output-tokens", default="16:96")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    prompt = TokenRange(*map(int, args.prompt_tokens.split(":")))
    output = TokenRange(*map(int, args.output_tokens.split(":")))
    rates = [float(r) for r in args.rates.split(",")]

    if args.report is None:
        out = tempfile.mkdtemp(prefix="serving-sweep-")
        # Every batch a continuous server can run, so no step time is interpolated (CPU BLAS
        # changes kernels between 2 and 8 rows; a line between 4 and 8 would miss it).
        sizes = ",".join(str(b) for b in range(1, args.cap + 1))
        wall, doc = diagnose_cli(SAMPLE, out, "--batch-sizes", sizes, "--contexts", CONTEXTS)
        print(f"sweep with a context grid: {wall:.0f} s, report in {out}/", flush=True)
    else:
        doc = json.loads(args.report.read_text())
    model = fit_step_time(decode_report(doc, "the sweep's report.json"))
    print(f"step-time model: {model.source}, worst error on the grid "
          f"{model.worst_error() or 0:.0%}", flush=True)

    server = RealServer(args.cap, prompt.high + output.high, args.seed)
    with torch.inference_mode():
        server.warm_up()
    before = machine_drift(server, doc, args.cap)
    rows: list[dict[str, Any]] = []
    for rate in rates:
        stream = poisson_stream(rate, args.requests, prompt, output, args.seed)
        for policy in Policy:
            sim = simulate(stream, policy, args.cap, model.step_s)
            sim_m = summarize_simulation(sim)
            started = time.perf_counter()
            real_m: ServingMetrics = summarize(server.serve(stream, policy))
            print(f"  {policy.value:10} at {rate:g}/s: "
                  f"real loop {time.perf_counter() - started:.0f} s", flush=True)
            rows.append({"rate_per_s": rate, "policy": policy.value,
                         "simulated": to_builtins(sim_m), "real": to_builtins(real_m)})

    after = machine_drift(server, doc, args.cap)
    print("\nthis process's step at the sweep's context over the sweep's own, per batch size "
          "(the machine's drift between the sweep and the loop):")
    for label, drift in (("before the loop", before), ("after the loop ", after)):
        print(f"  {label}: " + ", ".join(f"{b}: {r:.2f}" for b, r in drift.items()))
    print(f"\ncap {args.cap}, {args.requests} requests per run, prompts {prompt} tokens, "
          f"outputs {output}, seed {args.seed}\n")
    print("| rate/s | policy | tokens/s sim | real | err | p50 TPOT ms sim | real | err | "
          "p99 TPOT ms sim | real | p99 TTFT ms sim | real |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s, m = r["simulated"], r["real"]
        print(f"| {r['rate_per_s']:g} | {r['policy']} | {s['throughput_tokens_per_s']:.1f} | "
              f"{m['throughput_tokens_per_s']:.1f} | "
              f"{_err(s['throughput_tokens_per_s'], m['throughput_tokens_per_s'])} | "
              f"{_ms(s['tpot_p50_s'])} | {_ms(m['tpot_p50_s'])} | "
              f"{_err(s['tpot_p50_s'], m['tpot_p50_s'])} | {_ms(s['tpot_p99_s'])} | "
              f"{_ms(m['tpot_p99_s'])} | {_ms(s['ttft_p99_s'])} | {_ms(m['ttft_p99_s'])} |")
    print("\ncontinuous over static (throughput; p50 TPOT static/continuous):")
    for rate in rates:
        by = {r["policy"]: r for r in rows if r["rate_per_s"] == rate}
        c, st = by["continuous"], by["static"]
        for kind in ("simulated", "real"):
            thr = c[kind]["throughput_tokens_per_s"] / st[kind]["throughput_tokens_per_s"]
            tpot = st[kind]["tpot_p50_s"] / c[kind]["tpot_p50_s"]
            print(f"  {rate:g}/s {kind:9}: throughput {thr:.2f}x, p50 TPOT {tpot:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"report": str(args.report),
                                                               "json": str(args.json)},
                                         "step_time": to_builtins(model.record()),
                                         "runs": rows,
                                         "drift_before": before, "drift_after": after},
                                        indent=1))


if __name__ == "__main__":
    main()
