"""vLLM's batch sweep of Llama-2-7B on an H100 64GB, predicted with ``--target-gpu`` and
served with ``diagnose serve --paged`` (docs/benchmarks.md, "vLLM on an H100 64GB").

The published runs ("Mind the Memory Gap", benchmarks/data/published/vllm_memory_gap_llama2.csv;
PROVENANCE.md says where from): vLLM 0.5.2 in fp16 with CUDA graphs, 2000 ShareGPT requests
all at once, ``--max-num-seqs`` N from 1 to 512. Here, on any machine and timing nothing:

1. ``diagnose hf:LLAMA --task causal-lm-decode --contexts 1,256,512 --target-gpu "H100 SXM5
   64GB" --dtype fp16 --cuda-graphs --fused`` at the published N (Llama-2-7B's config, written
   below: the published architecture, no weights);
2. a seeded stand-in for the requests: the published runs give only their totals (225,574
   prompt and about 646,000 output tokens for 2000 requests), so prompts are uniform on
   4-222 tokens and outputs on 4-642 (the same means), all arriving at once;
3. ``diagnose serve REPORT --trace STREAM --caps N... --paged`` (continuous batching; its
   band is every run again on the prediction's low and high steps).

Output tokens/s and the median time per output token against the published ones, per N.

    python benchmarks/target_vllm.py [--json docs/data/target_vllm_memory_gap.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from batchscope.classifiers.critical_batch import fit_knee

HERE = Path(__file__).parent
GPU = "H100 SXM5 64GB"
# meta-llama/Llama-2-7b-hf's config.json (the architecture; no weights are read).
LLAMA_2_7B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
    "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "torch_dtype": "float16",
}
REQUESTS, PROMPT, OUTPUT = 2000, (4, 222), (4, 642)
CONTEXTS = "1,256,512"
# N at and below this ran without preemption in the published runs (PROVENANCE.md): the
# knee is compared over them.
NO_PREEMPTION_MAX = 192


def _run(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "batchscope", *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"diagnose {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")


def _continuous(serving: Path) -> dict[int, dict[str, Any]]:
    runs = json.loads(serving.read_text())["runs"]
    return {r["cap"]: r for r in runs if r["policy"] == "continuous"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path, help="write the table's figures here")
    args = parser.parse_args()
    with open(HERE / "data/published/vllm_memory_gap_llama2.csv") as f:
        published = {int(r["max_num_seqs"]): r for r in csv.DictReader(f)
                     if r["model"] == "llama-2-7b" and "definitive_results" in r["source_path"]}
    caps = sorted(published)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "llama").mkdir()
        (work / "llama" / "config.json").write_text(json.dumps(LLAMA_2_7B))
        rng = random.Random(0)
        stream = work / "stream.csv"
        stream.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
            f"0,{rng.randint(*PROMPT)},{rng.randint(*OUTPUT)}\n" for _ in range(REQUESTS)))
        out = work / "predicted"
        _run(f"hf:{work / 'llama'}", "--task", "causal-lm-decode", "--contexts", CONTEXTS,
             "--target-gpu", GPU, "--dtype", "fp16", "--cuda-graphs", "--fused",
             "--batch-sizes", ",".join(map(str, caps)), "--out", str(out))
        _run("serve", str(out / "report.json"), "--trace", str(stream), "--paged", "--rate",
             "1000", "--caps", ",".join(map(str, caps)), "--out", str(work / "served"))
        served = _continuous(work / "served" / "serving.json")
        what_if = json.loads((work / "served" / "serving.json").read_text())
    rows = []
    print(f"Llama-2-7B on the {GPU}, vLLM 0.5.2 (published) against diagnose serve --paged "
          f"(predicted; prefill {what_if['prefill']['fixed_s'] * 1e3:.1f} ms + "
          f"{what_if['prefill']['per_token_s'] * 1e6:.1f} us a prompt token, KV room "
          f"{what_if['kv_capacity_tokens']:,} tokens)")
    print("| N | published tokens/s | predicted | band | error | in band | published TPOT "
          "p50 (ms) | predicted | error | mean batch | preempted |")
    print("|---:|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|")
    for n in caps:
        pub, point = published[n], served[n]
        tok_pub = float(pub["output_tokens_per_s"])
        tpot_pub = float(pub["median_tpot_ms"]) / 1e3
        tok = point["throughput_tokens_per_s"]
        low, high = point["throughput_band_tokens_per_s"]
        row = {"max_num_seqs": n, "published_tokens_per_s": tok_pub,
               "predicted_tokens_per_s": tok, "band_tokens_per_s": [low, high],
               "error": tok / tok_pub - 1, "in_band": low <= tok_pub <= high,
               "published_tpot_p50_s": tpot_pub, "predicted_tpot_p50_s": point["tpot_p50_s"],
               "tpot_error": point["tpot_p50_s"] / tpot_pub - 1,
               "mean_batch": point["mean_batch"], "preemptions": point["preemptions"]}
        rows.append(row)
        print(f"| {n} | {tok_pub:,.0f} | {tok:,.0f} | {low:,.0f}–{high:,.0f} | "
              f"{row['error']:+.0%} | {'yes' if row['in_band'] else 'no'} | "
              f"{tpot_pub * 1e3:.1f} | {point['tpot_p50_s'] * 1e3:.1f} | "
              f"{row['tpot_error']:+.0%} | {point['mean_batch']:.0f} | "
              f"{point['preemptions']:,} |")
    inside = sum(r["in_band"] for r in rows)
    within = sum(abs(r["error"]) <= 0.35 for r in rows)
    knees = [n for n in caps if n <= NO_PREEMPTION_MAX]
    knee_pub, _ = fit_knee([float(n) for n in knees],
                           [float(published[n]["median_tpot_ms"]) for n in knees])
    knee_pred, _ = fit_knee([float(n) for n in knees],
                            [served[n]["tpot_p50_s"] for n in knees])
    print(f"\nwithin 35%: {within}/{len(rows)}; in band: {inside}/{len(rows)}; worst "
          f"throughput error {max(abs(r['error']) for r in rows):.0%}")
    if knee_pub and knee_pred:
        print(f"knee of the TPOT curve (N <= {NO_PREEMPTION_MAX}): published {knee_pub:.0f}, "
              f"predicted {knee_pred:.0f} ({knee_pred / knee_pub:.2f}x)")
    if args.json is not None:
        args.json.write_text(json.dumps({
            "gpu": GPU, "contexts": CONTEXTS, "stream": {
                "requests": REQUESTS, "prompt_tokens": list(PROMPT),
                "output_tokens": list(OUTPUT), "seed": 0},
            "prefill": what_if["prefill"], "kv_capacity_tokens": what_if["kv_capacity_tokens"],
            "knee": {"published": knee_pub, "predicted": knee_pred}, "rows": rows},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
