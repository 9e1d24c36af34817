"""Every step fills a fresh 64 MiB buffer: glibc maps blocks this large afresh for each
allocation and unmaps them on free, so each step faults 16,384 pages in again."""
import torch


def build_model():
    return torch.nn.Linear(8, 8)


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)


def run(model, x):
    buffer = torch.empty(16 * 2**20)  # 64 MiB of float32, over glibc's 32 MiB mmap ceiling
    buffer.fill_(1.0)
    return model(x) + buffer[0]
