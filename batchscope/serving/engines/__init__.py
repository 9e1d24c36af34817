"""Real serving engines, run on the report's own model: what ``diagnose serve --engine``
measures (the engine's per-step cost, the model's prefill) and what the serving benchmark
checks the simulation against."""
