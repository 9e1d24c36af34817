"""Raises the exception named by $BATCHSCOPE_TEST_RAISE at the batch sizes in
$BATCHSCOPE_TEST_AT (comma-separated), so one file covers every fault message."""
import os

import torch

BATCH_SIZES = [1, 2, 4]
MESSAGES = {
    "cuda_oom": (torch.OutOfMemoryError, "CUDA out of memory. Tried to allocate 2.00 GiB"),
    "cublas": (RuntimeError, "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
                             "`cublasCreate(handle)`"),
    "cudnn": (RuntimeError, "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear "
                            "if you passed in a non-contiguous input."),
    "illegal": (RuntimeError, "CUDA error: an illegal memory access was encountered"),
    "launch": (RuntimeError, "CUDA error: too many resources requested for launch"),
    "long": (ValueError, "x" * 100_000),
}


class OnCue(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        at = {int(b) for b in os.environ.get("BATCHSCOPE_TEST_AT", "").split(",") if b}
        if x.shape[0] in at:
            kind, message = MESSAGES[os.environ["BATCHSCOPE_TEST_RAISE"]]
            raise kind(message)
        return self.lin(x)


def build_model():
    return OnCue()


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
