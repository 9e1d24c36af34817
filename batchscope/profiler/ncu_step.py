"""One step of the model file under Nsight Compute (``diagnose model.py --ncu``).

``ncu [options] python -m batchscope.profiler.ncu_step BATCH_SIZE`` runs in a process of its
own (the worker's configuration in ``BATCHSCOPE_WORKER_CONFIG``, as the ranks get it): the
model is built as the worker builds it, warmed up for :data:`WARMUP_STEPS` steps, and one
step is run between ``cudaProfilerStart`` and ``cudaProfilerStop``. ncu, started with
``--profile-from-start off``, profiles only the kernels of that step. On a CPU the step runs
with no profiler range (there are no kernels to profile).
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext

import torch

from batchscope.profiler.worker import Worker
from batchscope.profiler.worker_config import WORKER_CONFIG_ENV, worker_config_from_json

WARMUP_STEPS = 2


def main() -> None:
    config = worker_config_from_json(os.environ[WORKER_CONFIG_ENV])
    batch_size = int(sys.argv[1])
    worker = Worker(config, send=lambda reply: None)
    inputs = worker.make_inputs(batch_size)
    step = worker._step(worker.model, inputs)
    cuda = worker.device.type == "cuda"
    # The step the sweep timed: inference under inference_mode, as Worker.measure runs it
    # (no autograd graph, and the kernels of torch's no-grad fast paths).
    grad = torch.inference_mode() if worker.mode == "inference" else nullcontext()
    with grad:
        for _ in range(WARMUP_STEPS):
            step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        step()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
