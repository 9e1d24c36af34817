"""Lightning's BatchSizeFinder against BatchscopeFinder, inside the same Lightning fit.

Three training models as LightningModules whose dataloader reads ``self.batch_size``: the
small CNN of ``samples/train_cnn.py`` (64x64 images), a small Transformer encoder
classifying 64-token sequences, and an MLP. For each model, each finder runs as the only
callback of a fit (its own process, start to exit), and its wall time is the time its
``on_fit_start`` took (the search alone). Lightning's finder keeps its defaults (power mode,
``init_val`` 2, 3 steps per trial) with ``max_val`` 1024, batchscope's default
``--max-batch``; BatchscopeFinder keeps its defaults with the same ``max_val``.

Then the training throughput of every batch size either finder picked is timed
independently, in fresh processes, the (model, batch) runs shuffled in each round: a
Lightning fit at that batch size, its steps from one ``on_train_batch_end`` to the next
(data loading included, as the finders time them) after a warm-up, for at least
``--min-time`` seconds; the median step of a run, the median over rounds.

    python benchmarks/finder_in_trainer.py --rounds 3 --finder-rounds 2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
MAX_VAL = 1024  # batchscope's default --max-batch; Lightning's finder returns it untried
ROWS = 4096  # rows of each synthetic training set: 4 batches of 1024
MODELS = ("cnn", "transformer", "mlp")
UNITS = {"cnn": "image", "transformer": "sequence", "mlp": "sample"}
WARMUP_STEPS = 3


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def build(name: str) -> Any:
    """The LightningModule of ``name``, seeded, its batch_size 2 (Lightning's init_val)."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if name == "cnn":
        from samples.train_cnn import IMAGE_SIZE, NUM_CLASSES, SmallCNN

        net: nn.Module = SmallCNN()
        x = torch.randn(ROWS, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        y = torch.randint(0, NUM_CLASSES, (ROWS,), generator=g)
        optimizer = lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)  # noqa: E731
    elif name == "transformer":
        net = _Encoder()
        x = torch.randint(0, _Encoder.VOCAB, (ROWS, _Encoder.SEQ), generator=g)
        y = torch.randint(0, 2, (ROWS,), generator=g)
        optimizer = lambda p: torch.optim.AdamW(p, lr=1e-4)  # noqa: E731
    else:
        net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                            nn.Linear(512, 10))
        x = torch.randn(ROWS, 256, generator=g)
        y = torch.randint(0, 10, (ROWS,), generator=g)
        optimizer = lambda p: torch.optim.AdamW(p, lr=1e-3)  # noqa: E731
    data = TensorDataset(x, y)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.batch_size = net, 2

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            inputs, labels = batch
            return nn.functional.cross_entropy(self.net(inputs), labels)

        def train_dataloader(self) -> Any:
            return DataLoader(data, batch_size=self.batch_size, shuffle=True)

        def configure_optimizers(self) -> Any:
            return optimizer(self.parameters())

    return Module()


class _Encoder(nn.Module):
    """2 layers of nn.TransformerEncoderLayer, 128 wide, 4 heads, over 64 tokens."""

    VOCAB, SEQ, WIDTH = 1000, 64, 128

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(self.VOCAB, self.WIDTH)
        layer = nn.TransformerEncoderLayer(self.WIDTH, 4, 256, batch_first=True, dropout=0.1)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(self.WIDTH, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


def trainer(root: str, callbacks: list[Any], max_steps: int) -> Any:
    import lightning as L

    return L.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, max_epochs=-1,
                     logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=callbacks, default_root_dir=root,
                     num_sanity_val_steps=0)


def run_finder(model: str, which: str) -> dict[str, Any]:
    """One finder in this process: its pick and the seconds its search took."""
    from lightning.pytorch.callbacks import BatchSizeFinder

    from batchscope.integrations.lightning_finder import BatchscopeFinder

    base = BatchSizeFinder if which == "lightning" else BatchscopeFinder
    kwargs: dict[str, Any] = ({"mode": "power", "max_val": MAX_VAL} if which == "lightning"
                              else {"max_val": MAX_VAL, "out_dir": None, "unit": UNITS[model]})
    spent: list[float] = []

    class Timed(base):  # type: ignore[misc, valid-type]
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            started = time.perf_counter()
            super().on_fit_start(trainer, pl_module)
            spent.append(time.perf_counter() - started)

    finder = Timed(**kwargs)
    module = build(model)
    with tempfile.TemporaryDirectory() as root:
        trainer(root, [finder], max_steps=1).fit(module)
    pick = finder.optimal_batch_size if which == "lightning" else finder.batch_size
    return {"pick": int(pick), "wall_s": spent[0]}


def run_throughput(model: str, batch_size: int, min_time_s: float) -> dict[str, Any]:
    """The fit's training throughput at ``batch_size``: its steps' median after a warm-up."""
    import lightning as L

    ends: list[float] = []

    class Steps(L.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            ends.append(time.perf_counter())
            timed = len(ends) - 1 - WARMUP_STEPS
            if timed >= 10 and ends[-1] - ends[WARMUP_STEPS] >= min_time_s:
                trainer.should_stop = True

    module = build(model)
    module.batch_size = batch_size
    with tempfile.TemporaryDirectory() as root:
        trainer(root, [Steps()], max_steps=100_000).fit(module)
    steps = [b - a for a, b in zip(ends[WARMUP_STEPS:], ends[WARMUP_STEPS + 1:])]
    median = statistics.median(steps)
    return {"throughput_per_s": batch_size / median, "steps": len(steps), "step_s": median}


def child(args: list[str], threads: int) -> dict[str, Any]:
    """Run this script's ``--child`` mode in a fresh process; its JSON line, and the other
    processes' share of the CPU while it ran."""
    from batchscope.hardware.busy import OtherLoad

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with OtherLoad() as load:
        proc = subprocess.run([sys.executable, __file__, "--threads", str(threads), "--child",
                               *args], cwd=ROOT, env=env, text=True, capture_output=True,
                              check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise RuntimeError(f"child {args} exited with {proc.returncode}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["other_cpu"] = load.share
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    parser.add_argument("--finder-rounds", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads in every child (1: on a shared 2-core machine two "
                        "threads wait on each other's time slices at every op)")
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _quiet()
        torch.set_num_threads(args.threads)
        kind, model, *rest = args.child
        out = (run_finder(model, rest[0]) if kind == "finder"
               else run_throughput(model, int(rest[0]), float(rest[1])))
        print(json.dumps(out))
        return
    rng = random.Random(args.seed)
    models = args.models.split(",")
    finders: dict[tuple[str, str], list[dict[str, Any]]] = {}
    jobs = [(m, f) for m in models for f in ("lightning", "batchscope")]
    for r in range(args.finder_rounds):
        rng.shuffle(jobs)
        for model, which in jobs:
            out = child(["finder", model, which], args.threads)
            finders.setdefault((model, which), []).append(out)
            print(f"finder round {r + 1}: {model} {which}: pick {out['pick']}, "
                  f"{out['wall_s']:.1f} s, other CPU {out['other_cpu']:.0%}", file=sys.stderr,
                  flush=True)
    picks = sorted({(m, o["pick"]) for (m, _), runs in finders.items() for o in runs})
    tput: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        order = list(picks)
        rng.shuffle(order)
        for model, size in order:
            out = child(["throughput", model, str(size), str(args.min_time)], args.threads)
            tput.setdefault((model, size), []).append(out)
            print(f"throughput round {r + 1}: {model} batch {size}: "
                  f"{out['throughput_per_s']:,.1f}/s ({out['steps']} steps), other CPU "
                  f"{out['other_cpu']:.0%}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "finders": {f"{m}/{w}": v for (m, w), v in finders.items()},
            "throughput": {f"{m}/{b}": v for (m, b), v in tput.items()}}, indent=1))
    print(table(models, finders, tput))


def table(models: list[str], finders: dict[tuple[str, str], list[dict[str, Any]]],
          tput: dict[tuple[str, int], list[dict[str, Any]]]) -> str:
    rows = ["| model | finder | pick (each run) | pick's throughput (median of rounds) | "
            "finder wall time (each run) | batchscope / Lightning throughput | other "
            "processes' CPU (finder runs; throughput runs) |", "|---|---|---|---|---|---|---|"]

    def rate(model: str, size: int) -> float:
        return statistics.median(o["throughput_per_s"] for o in tput[(model, size)])

    for model in models:
        medians = {}
        for which in ("lightning", "batchscope"):
            runs = finders[(model, which)]
            picks = [o["pick"] for o in runs]
            pick = statistics.median_low(picks)
            medians[which] = rate(model, pick)
            tp = " / ".join(f"{rate(model, p):,.1f}" for p in dict.fromkeys(picks))
            loads = " ".join(f"{o['other_cpu']:.0%}" for o in runs)
            tloads = " ".join(f"{o['other_cpu']:.0%}" for p in dict.fromkeys(picks)
                              for o in tput[(model, p)])
            ratio = (f"{medians['batchscope'] / medians['lightning']:.2f}"
                     if which == "batchscope" else "")
            walls = ", ".join(f"{o['wall_s']:.1f} s" for o in runs)
            rows.append(f"| {model} | {which} | {', '.join(map(str, picks))} | {tp} "
                        f"{UNITS[model]}s/s | {walls} | {ratio} | {loads}; {tloads} |")
    return "\n".join(rows)



if __name__ == "__main__":
    main()
