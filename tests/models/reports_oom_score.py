"""Writes the worker's /proc/self/oom_score_adj to $BATCHSCOPE_TEST_OUT when built."""
import os

import torch

BATCH_SIZES = [1]


def build_model():
    with open("/proc/self/oom_score_adj") as src, \
            open(os.environ["BATCHSCOPE_TEST_OUT"], "w") as dst:
        dst.write(src.read())
    return torch.nn.Linear(8, 8)


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
