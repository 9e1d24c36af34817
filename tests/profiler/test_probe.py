"""Kernel probes run for real on the CPU: the model's own matmul shapes, timed alone."""

from __future__ import annotations

import torch

from batchscope.profiler.probe import probe_key, run_probes


def test_probes_time_linear_shaped_products_and_say_why_one_cannot_run():
    specs = [{"key": probe_key("addmm", [[64], [8, 32], [32, 64]]), "name": "addmm",
              "shapes": [[64], [8, 32], [32, 64]]},
             {"key": "mm-small", "name": "mm", "shapes": [[4, 16], [16, 8]]},
             {"key": "bmm", "name": "bmm", "shapes": [[2, 4, 8], [2, 8, 3]]},
             {"key": "bad", "name": "mm", "shapes": [[4, 16], [5, 8]]},
             {"key": "conv", "name": "convolution", "shapes": [[1, 3, 8, 8]]}]
    out = run_probes(specs, torch.float32, torch.device("cpu"), lambda: None,
                     cache_bytes=1 << 16)
    assert set(out["times_s"]) == {specs[0]["key"], "mm-small", "bmm"}
    assert all(0 < t < 1 for t in out["times_s"].values())
    assert set(out["errors"]) == {"bad", "conv"}
    assert "not probed" in out["errors"]["conv"]


def test_a_round_makes_each_weight_once_and_its_copies_at_other_addresses():
    from batchscope.profiler.probe import _Arguments

    made = _Arguments(torch.float32, torch.device("cpu"))
    at_8 = made.for_spec("addmm", [[64], [8, 32], [32, 64]], 0)
    at_16 = made.for_spec("addmm", [[64], [16, 32], [32, 64]], 0)
    assert at_8[2] is at_16[2] and at_8[0] is at_16[0]  # bias and weight: made once
    assert at_8[2].stride() == (1, 32)  # nn.Linear's [out, in] weight, seen transposed
    copy = made.for_spec("addmm", [[64], [8, 32], [32, 64]], 1)
    assert copy[2].data_ptr() != at_8[2].data_ptr() and torch.equal(copy[2], at_8[2])
