"""Raises the CPU allocator's own out-of-memory error at batch size 4 (a real allocation)."""
import torch

BATCH_SIZES = [1, 2, 4, 8]


class Greedy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        if x.shape[0] >= 4:
            # 2**62 bytes: the DefaultCPUAllocator refuses with "can't allocate memory".
            torch.empty(2**60, dtype=torch.float32)
        return self.lin(x)


def build_model():
    return Greedy()


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
