"""``diagnose serve`` on a report whose step is not a decode step (issue 32): one sentence,
exit 4, even with ``--context``, never a decode what-if simulated from, say, BERT."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.errors import UsageError
from batchscope.serving.whatif import WhatIfOptions, check_decode_step, what_if
from tests.serving.conftest import decode_doc, decode_report_of

runner = CliRunner()
SMALL = ["--requests", "20", "--rate", "1", "--output-tokens", "4:8"]


def _doc(contexts: bool = False, **model: Any) -> dict[str, Any]:
    """A decode-shaped report (step times the what-if can take) whose model says ``model``."""
    doc = decode_doc(contexts=contexts)
    doc["model"].update(model)
    return doc


@pytest.mark.parametrize("model, words", [
    # hf:bert --task seq-cls: rows are sequences (it was simulated as decode with --context).
    ({"unit": "sequence"}, "rows yield 'sequence', not tokens"),
    ({"unit": "image"}, "rows yield 'image'"),
    # hf:gpt2 --task causal-lm-prefill: a row is its 128 tokens.
    ({"unit": "token", "units_per_row": 128}, "each yield 128 units"),
    ({"unit": "token", "seq_lens": [16, 32], "units_per_row": 16,
      "units_per_row_per_token": True}, "whole sequences (SEQ_LENS)"),
    ({"unit": "token", "mode": "train"}, "a training step"),
])
def test_serve_refuses_a_step_that_is_not_a_decode_step(tmp_path, model, words):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_doc(**model)))
    result = runner.invoke(tools_app, ["serve", str(report), "--context", "64", *SMALL])
    assert result.exit_code == 4, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and words in line and "not one decode step" in line
    assert not (tmp_path / "serving.json").exists()


def test_a_training_report_is_refused_even_with_contexts():
    with pytest.raises(UsageError, match="a training step"):
        check_decode_step(decode_report_of(_doc(contexts=True, mode="train")))


@pytest.mark.parametrize("model", [
    {},  # decode_doc's own: unit token
    {"unit": "Tokens"},
    {"unit": "sample"},  # the contract's default UNIT: a decode file that set none
    {"unit": "sequence", "contexts": [128, 512]},  # CONTEXTS: the file says it decodes
])
def test_a_decode_step_is_simulated(model):
    doc = _doc(contexts=True) if "contexts" in model else _doc()
    doc["model"].update(model)
    result = what_if(decode_report_of(doc), WhatIfOptions(rates_per_s=[1.0], requests=20,
                                                         context=128))
    assert result.runs
