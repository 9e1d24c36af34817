"""``diagnose MODEL --target-gpu NAME``: a model's batch curve predicted on a GPU this
machine does not have, from its exact per-op work and a performance model calibrated on
real GPUs' traces (docs/method.md, "Predicted on a named GPU")."""
