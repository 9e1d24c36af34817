"""The peak memory label says what each method counts (issue 15, bug 10).

On CUDA the figure is ``torch.cuda.max_memory_allocated``: every live tensor, weights and
state included, but not the caching allocator's reserve nor the CUDA context. It used to be
labelled "tensor memory of this batch size", which read as the batch's own memory. On the
CPU it is the worker's peak resident set size, which holds more than tensors.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
from rich.console import Console

from batchscope.profiler.memory import CUDA_METHOD
from batchscope.records import BatchResult, Report, Status
from batchscope.reports import view
from batchscope.reports.console import print_summary
from batchscope.reports.html import render_html
from batchscope.reports.markdown import render_summary
from tests.reports.test_html import parse

# What older reports' CUDA batches said, and what new ones say.
OLD_CUDA_METHOD = "torch.cuda.max_memory_allocated (tensor memory of this batch size)"


def _on_cuda(doc: dict[str, Any], method: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for batch in doc["batches"]:
        batch["peak_memory_method"] = method
    return doc


def _says_what_cuda_counts(text: str) -> None:
    """The label names what the figure holds and what it leaves out."""
    text = " ".join(text.split())
    assert "max_memory_allocated" in text
    held = text[text.index("peak tensor memory"):]
    assert held.index("weights") < held.index("excludes")  # weights are in, not out
    assert "state and activations" in held
    left_out = held[held.index("excludes"):]
    assert "cached reserve" in left_out and "CUDA context" in left_out
    assert "tensor memory of this batch size" not in text


def _console_text(method: str) -> str:
    out = io.StringIO()
    batch = BatchResult(8, Status.OK, peak_memory_bytes=3 << 30, peak_memory_method=method)
    report = Report(model={"unit": "sample"}, hardware=None, batches=[batch],
                    recommendation=None, run={})
    print_summary(Console(file=out, width=400, color_system=None), report)
    return out.getvalue()


@pytest.mark.parametrize("method", [CUDA_METHOD, OLD_CUDA_METHOD])
def test_cuda_peak_memory_says_it_holds_weights_not_the_reserve(
        sample_docs: dict[str, dict[str, Any]], method: str) -> None:
    doc = _on_cuda(sample_docs["mlp"], method)
    _says_what_cuda_counts(view.peak_memory_label(doc))
    _says_what_cuda_counts(" ".join(parse(render_html(doc)).text))
    _says_what_cuda_counts(render_summary(doc).replace("\\", ""))
    _says_what_cuda_counts(_console_text(method))


def test_the_recorded_cuda_method_says_it_too() -> None:
    # report.json carries the method itself: it must not say the old thing either
    _says_what_cuda_counts(CUDA_METHOD)


def test_cpu_peak_memory_says_it_is_the_whole_process(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    doc = sample_docs["mlp"]  # recorded on a CPU: VmHWM, reset per batch size
    label = view.peak_memory_label(doc)
    assert label.startswith("peak resident memory of the worker process")
    assert "weights" in label and "interpreter" in label and "not the tensors alone" in label
    assert label in " ".join(parse(render_html(doc)).text)
    lifetime = view.memory_method_label("lifetime peak resident set size (ru_maxrss)")
    assert "since it started" in lifetime and "interpreter" in lifetime
    assert "not reset per batch size" in lifetime
    assert view.memory_method_label("") == "peak memory"
