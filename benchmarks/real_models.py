"""Models nobody here wrote: batchscope on real model code, beside torch.utils.benchmark.Timer.

    pip install transformers        # the Hugging Face models are built from configs (random
    python benchmarks/real_models.py    # weights, nothing downloaded); ~5 min on 2 cores

Issue 13 tried batchscope as a new user would, on models it was not built with. This script
runs the same kinds of model through the CLI, in one run: Hugging Face BERT, ViT and GPT-2
prefill (inference), T5 training, a MobileNetV2-shaped net, an input-dependent early exit,
nested inputs, a torch.compile'd MLP, and `batchscope.watch` around a user's own T5
training loop (HF style, `model(input_ids=..., labels=...)`). Per model it prints one row: the
pick and the speedup from batching, the time shares at batch 1, the coverage, the worst op
against its roof (ops the report says its cache served apart: they may beat the DRAM roof),
and batchscope's median step latency at batch 1 (watch: the watched batch) over Timer's
median. Timer runs in a process of its own on the same model and inputs, with the same
threads, just before and just after the sweep; the two figures show how far the machine
drifted between them. No test asserts these figures: they depend on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCHES = "1,2,4,8,16"
MIN_TIME_S = "0.2"

HF_HEADER = """
import torch
import transformers
UNIT = "sample"
"""

MODELS = {
    "HF BERT (4 layers, seq 128)": HF_HEADER + """
def build_model():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                                  intermediate_size=1024)
    return transformers.BertModel(cfg)

def make_inputs(b):
    return {"input_ids": torch.randint(0, 30522, (b, 128),
                                       generator=torch.Generator().manual_seed(b))}

def run(model, inputs):
    return model(**inputs).last_hidden_state
""",
    "HF ViT (4 layers, 224 px)": HF_HEADER + """
UNIT = "image"
def build_model():
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(num_hidden_layers=4, hidden_size=384, num_attention_heads=6,
                                 intermediate_size=1536)
    return transformers.ViTModel(cfg)

def make_inputs(b):
    return torch.randn(b, 3, 224, 224)

def run(model, x):
    return model(pixel_values=x).last_hidden_state
""",
    "HF GPT-2 prefill (4 layers, seq 128)": HF_HEADER + """
UNIT = "sequence"
def build_model():
    torch.manual_seed(0)
    return transformers.GPT2Model(transformers.GPT2Config(n_layer=4, n_embd=384, n_head=6))

def make_inputs(b):
    return torch.randint(0, 50257, (b, 128), generator=torch.Generator().manual_seed(b))

def run(model, ids):
    return model(input_ids=ids).last_hidden_state
""",
    "HF T5 training (2+2 layers)": HF_HEADER + """
MODE = "train"
def build_model():
    torch.manual_seed(0)
    cfg = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=256, d_ff=1024,
                                num_heads=4, d_kv=64, decoder_start_token_id=0, pad_token_id=0)
    return transformers.T5ForConditionalGeneration(cfg)

def make_inputs(b):
    g = torch.Generator().manual_seed(b)
    return {"input_ids": torch.randint(0, 32128, (b, 64), generator=g),
            "labels": torch.randint(0, 32128, (b, 16), generator=g)}

def run(model, inputs):
    return model(**inputs).loss

def loss(outputs, inputs):
    return outputs
""",
    "MobileNetV2-shaped (inverted residuals)": """
import torch
from torch import nn
UNIT = "image"

def block(cin, cout, stride, expand=6):
    mid = cin * expand
    return nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                         nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                         nn.BatchNorm2d(mid), nn.ReLU6(), nn.Conv2d(mid, cout, 1, bias=False),
                         nn.BatchNorm2d(cout))

def build_model():
    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
    for cin, cout, stride in ((32, 16, 1), (16, 24, 2), (24, 32, 2), (32, 64, 2), (64, 96, 1),
                              (96, 160, 2)):
        layers.append(block(cin, cout, stride))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(160, 1000)]
    return nn.Sequential(*layers)

def make_inputs(b):
    return torch.randn(b, 3, 160, 160)
""",
    "early exit (depth chosen by the inputs)": (
        ROOT / "tests" / "models" / "early_exit.py").read_text(),
    "nested inputs (dict of lists)": """
import torch
from torch import nn
UNIT = "sample"

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(64, 256), nn.Linear(32, 256)
        self.head = nn.Linear(256, 10)

    def forward(self, batch):
        x = self.a(batch["features"][0]) + self.b(batch["features"][1])
        return self.head(torch.relu(x) * batch["mask"].unsqueeze(-1))

def build_model():
    torch.manual_seed(0)
    return Net()

def make_inputs(b):
    return {"features": [torch.randn(b, 64), torch.randn(b, 32)], "mask": torch.ones(b)}

def run(model, batch):
    return model(batch)
""",
    "torch.compile'd MLP": (ROOT / "tests" / "models" / "compiled_mlp.py").read_text(),
}

# watch around a user's own T5 training loop (HF style: model(input_ids=..., labels=...)).
# Run as `python script watch OUT` (under batchscope.watch) or `python script timer` (the
# same loop step under torch.utils.benchmark.Timer).
WATCHED_BATCH = 4
WATCH_T5 = f"""
import json, sys, torch, transformers
import batchscope

torch.manual_seed(0)
cfg = transformers.T5Config(num_layers=2, num_decoder_layers=2, d_model=256, d_ff=1024,
                            num_heads=4, d_kv=64, decoder_start_token_id=0, pad_token_id=0)
model = transformers.T5ForConditionalGeneration(cfg).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
g = torch.Generator().manual_seed(0)
batch = {{"input_ids": torch.randint(0, 32128, ({WATCHED_BATCH}, 64), generator=g),
         "labels": torch.randint(0, 32128, ({WATCHED_BATCH}, 16), generator=g)}}

def step():
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad()

if sys.argv[1] == "watch":
    with batchscope.watch(model, optimizer=opt, out_dir=sys.argv[2]) as w:
        while w.active:
            step()
            w.step()
else:
    from torch.utils.benchmark import Timer
    for _ in range(3):
        step()
    t = Timer(stmt="step()", globals={{"step": step}},
              num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=1.0)
    print(json.dumps({{"median_s": t.median}}))
"""

TIMER_SNIPPET = """
import importlib.util, json, sys, torch
from torch.utils.benchmark import Timer
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.build_model()
train = getattr(m, "MODE", "inference") == "train"
model.train() if train else model.eval()
inputs = m.make_inputs(int(sys.argv[2]))
run = getattr(m, "run", None) or (lambda model, x: model(x))
if train:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    def step():
        out = run(model, inputs)
        loss = m.loss(out, inputs) if hasattr(m, "loss") else out.float().square().mean()
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=False)
    ctx = torch.enable_grad()
else:
    step = lambda: run(model, inputs)
    ctx = torch.inference_mode()
with ctx:
    for _ in range(3):
        step()
    # Timer defaults to one thread; batchscope's worker uses torch's default (all cores)
    t = Timer(stmt="step()", globals={"step": step},
              num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=1.0)
print(json.dumps({"median_s": t.median}))
"""


def timer_median_s(path: Path, batch: int, watched: bool = False) -> float | None:
    command = ([sys.executable, str(path), "timer"] if watched else
               [sys.executable, "-c", TIMER_SNIPPET, str(path), str(batch)])
    proc = subprocess.run(command, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1])["median_s"] if lines else None


def _cache_served(op: dict) -> bool:
    """The report flagged the op as served from cache: its bytes fit in the LLC, so it may
    beat the DRAM roof without any accounting error."""
    return any("served from cache" in f for f in op.get("flags") or [])


def _allocator_cell(doc: dict) -> str:
    """Both allocators side by side, where the sweep timed them: the pick with glibc keeping
    its buffers and the largest speedup that gave, else "–" (no page faults flagged)."""
    section = doc.get("allocator") or {}
    rows = [r for r in section.get("batches") or [] if r.get("speedup")]
    if not rows:
        return "–"
    best = max(rows, key=lambda r: r["speedup"])
    return (f"pick {section.get('batch_size')}; {best['speedup']:.1f}x at batch "
            f"{best['batch_size']}")


def row(name: str, path: Path, out: Path, watched: bool = False) -> str:
    """One table row: a sweep of the model file at ``path`` through the CLI, or (``watched``)
    the loop script at ``path`` under batchscope.watch at WATCHED_BATCH."""
    first = WATCHED_BATCH if watched else 1
    before = timer_median_s(path, first, watched)  # Timer on each side of the run: the drift
    command = ([sys.executable, str(path), "watch", str(out)] if watched else
               [sys.executable, "-m", "batchscope", str(path), "--batch-sizes", BATCHES,
                "--min-time", MIN_TIME_S, "--out", str(out)])
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    report = out / "report.json"
    if not report.exists():
        return f"| {name} | exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1][:120]} |"
    doc = json.loads(report.read_text())
    rec = doc.get("recommendation") or {}
    ok = [b for b in doc["batches"] if b["status"] == "ok"]
    b1 = next((b for b in ok if b["batch_size"] == first), None)
    share = (b1 or {}).get("time_share") or {}
    shares = " / ".join(f"{100 * (share.get(k) or 0):.0f}" for k in
                        ("memory", "compute", "overhead", "uncounted", "framework"))
    effs = [(op.get("efficiency"), op["name"], _cache_served(op)) for b in ok
            for op in b.get("ops", []) if op.get("efficiency") and op.get("time_s", 0) > 1e-4]
    worst = max(((e, n) for e, n, cached in effs if not cached), default=None)
    cached = max(((e, n) for e, n, cached in effs if cached), default=None)
    after = timer_median_s(path, first, watched)  # between them: how far the machine moved
    timer = (before + after) / 2 if before and after else None
    ours = (b1 or {}).get("latency_s", {}).get("median")
    speedup = rec.get("speedup_from_batching")
    cells = [
        name, str(rec.get("batch_size", "–")),
        f"{speedup:.1f}x" if speedup else "–",
        shares if share else "–",
        f"{100 * b1['coverage']:.0f}%" if b1 and b1.get("coverage") is not None else "–",
        (f"{worst[1]} {100 * worst[0]:.0f}%" if worst else "–")
        + (f" (from cache: {cached[1]} {100 * cached[0]:.0f}%)" if cached else ""),
        (f"{ours / timer:.2f} ({1e3 * before:.3g} / {1e3 * after:.3g} ms)"
         if ours and timer else "–"),
        _allocator_cell(doc),
        f"{len(doc.get('flags') or [])}",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("pip install transformers first (the Hugging Face models are built from configs)")
    print("| model | pick | speedup | batch-1 shares % (mem / comp / ovh / unc / between) | "
          "coverage at 1 | op furthest past its roof (ops over 0.1 ms) | latency / Timer at 1 "
          "(Timer before / after the sweep) | buffers kept (glibc) | flags |")
    print("|---|---:|---:|---|---:|---|---:|---|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, source) in enumerate(MODELS.items()):
            path = Path(tmp) / f"model_{i}.py"
            path.write_text(textwrap.dedent(source))
            print(row(name, path, Path(tmp) / f"out_{i}"), flush=True)
        path = Path(tmp) / "watch_t5.py"
        path.write_text(WATCH_T5)
        print(row(f"watch around a T5 training loop (batch {WATCHED_BATCH}; shares and "
                  "coverage there)", path, Path(tmp) / "out_watch", watched=True), flush=True)


if __name__ == "__main__":
    main()
