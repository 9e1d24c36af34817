"""A --target-gpu report's prefill, predicted on its GPU for ``diagnose serve``: one
prompt's forward (the one that fills its KV cache) at each prompt length, counted on meta
tensors and timed by the same performance model as the decode steps (the same host, none
under ``--cuda-graphs``, and the same fusion under ``--fused``). Nothing is timed on this
machine.
"""

from __future__ import annotations

from pathlib import Path

import torch

from batchscope.errors import UsageError
from batchscope.profiler.counting import count_model_step
from batchscope.records import Report
from batchscope.records.engine import PrefillPoint
from batchscope.serving.engines.transformers_engine import NoEngineModel, model_from_file
from batchscope.target.kernel_time import step_time
from batchscope.target.predict import TORCH_DTYPES, gpu_spec


def predict_prefill(report: Report, prompt_tokens: list[int]) -> list[PrefillPoint] | None:
    """The predicted prefill of one prompt at each of ``prompt_tokens``; None where the
    report's model file defines no ``build_engine_model()``.

    Raises:
        UsageError: the report is no prediction, or its model cannot run on meta tensors.
    """
    target = report.target
    if target is None:
        raise UsageError("the report is no --target-gpu prediction: its prefill is timed here.")
    sheet = gpu_spec(target.gpu)
    try:
        with torch.device("meta"):
            model = model_from_file(Path(report.model.target))
    except NoEngineModel:
        return None
    model = model.to(device="meta", dtype=TORCH_DTYPES[target.dtype]).eval()
    host = 0.0 if target.cuda_graphs else target.terms.host_s_per_op
    points = []
    for tokens in sorted(set(prompt_tokens)):
        ids = torch.zeros(1, max(tokens, 1), dtype=torch.long, device="meta")

        def forward(ids: torch.Tensor = ids) -> object:
            with torch.inference_mode():
                return model(input_ids=ids, use_cache=True).logits

        try:
            ops = count_model_step(forward, model, None, [ids])
        except Exception as exc:  # noqa: BLE001 - the user's model: one sentence
            raise UsageError(f"{report.model.target}: its build_engine_model() cannot run a "
                             f"prefill on meta tensors: {type(exc).__name__}: "
                             f"{str(exc)[:200]}") from None
        points.append(PrefillPoint(tokens, step_time(ops, sheet, target.terms, host,
                                                      fused=target.fused).step_s))
    return points
