"""The peak memory label says what each method counts (issue 15, bug 10).

On CUDA the figure is ``torch.cuda.max_memory_allocated``: every live tensor, weights and
state included, but not the caching allocator's reserve nor the CUDA context. It used to be
labelled "tensor memory of this batch size", which read as the batch's own memory. On the
CPU it is the worker's peak resident set size, which holds more than tensors.

report.json records the method as a kind (:class:`PeakMemoryMethod`); the words are the
reports layer's (``view.PEAK_MEMORY_LABELS``), and a report of schema 1, which stored them
as a sentence, is read back as the kind its sentence named.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
from rich.console import Console

from batchscope.records import BatchResult, ModelInfo, PeakMemoryMethod, Report, RunInfo, Status
from batchscope.reports import view
from batchscope.reports.console import print_summary
from batchscope.reports.html import render_html
from batchscope.reports.markdown import render_summary
from tests.reports.conftest import typed
from tests.reports.test_html import parse

CUDA = PeakMemoryMethod.CUDA_MAX_ALLOCATED
# What schema-1 reports' CUDA batches said: read back as the CUDA kind, labelled anew.
OLD_CUDA_METHOD = "torch.cuda.max_memory_allocated (tensor memory of this batch size)"


def _on_cuda(doc: dict[str, Any]) -> Report:
    doc = copy.deepcopy(doc)
    for batch in doc["batches"]:
        batch["peak_memory_method"] = CUDA.value
    return typed(doc)


def _schema_1_on_cuda() -> Report:
    """A report.json of schema 1 whose batch named the method in words."""
    return typed({"schema": "batchscope.report/1", "model": {"target": "m.py", "unit": "sample"},
                  "hardware": None, "recommendation": None, "run": {},
                  "batches": [{"batch_size": 8, "status": "ok", "peak_memory_bytes": 3 << 30,
                               "peak_memory_method": OLD_CUDA_METHOD}]})


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


def _console_text(report: Report) -> str:
    out = io.StringIO()
    print_summary(Console(file=out, width=400, color_system=None), report)
    return out.getvalue()


def _one_batch_on_cuda() -> Report:
    batch = BatchResult(8, Status.OK, peak_memory_bytes=3 << 30, peak_memory_method=CUDA)
    return Report(model=ModelInfo(target="m.py", unit="sample"), hardware=None,
                  batches=[batch], recommendation=None, run=RunInfo())


def test_cuda_peak_memory_says_it_holds_weights_not_the_reserve(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    report = _on_cuda(sample_docs["mlp"])
    _says_what_cuda_counts(view.peak_memory_label(report))
    _says_what_cuda_counts(" ".join(parse(render_html(report)).text))
    _says_what_cuda_counts(render_summary(report).replace("\\", ""))
    _says_what_cuda_counts(_console_text(_one_batch_on_cuda()))


def test_a_schema_1_cuda_report_is_labelled_anew() -> None:
    # its stored sentence said "tensor memory of this batch size": it is read as the kind
    report = _schema_1_on_cuda()
    assert view.peak_memory_method(report) == CUDA
    _says_what_cuda_counts(view.peak_memory_label(report))
    _says_what_cuda_counts(render_summary(report).replace("\\", ""))
    _says_what_cuda_counts(_console_text(report))


@pytest.mark.parametrize("method", [m for m in PeakMemoryMethod if m != PeakMemoryMethod.NONE])
def test_every_method_has_its_words(method: PeakMemoryMethod) -> None:
    label = view.memory_method_label(method)
    assert label == view.PEAK_MEMORY_LABELS[method] and "weights" in label


def test_cpu_peak_memory_says_it_is_the_whole_process(
        sample_reports: dict[str, Report]) -> None:
    report = sample_reports["mlp"]  # recorded on a CPU: VmHWM, reset per batch size
    label = view.peak_memory_label(report)
    assert label.startswith("peak resident memory of the worker process")
    assert "weights" in label and "interpreter" in label and "not the tensors alone" in label
    assert label in " ".join(parse(render_html(report)).text)
    lifetime = view.memory_method_label(PeakMemoryMethod.LIFETIME_MAXRSS)
    assert "since it started" in lifetime and "interpreter" in lifetime
    assert "not reset per batch size" in lifetime
    assert view.memory_method_label(PeakMemoryMethod.NONE) == "peak memory"
