from __future__ import annotations

from pathlib import Path

from batchscope.records import BatchResult, ModelInfo, Report, RunInfo, Status, Stop, StopKind
from batchscope.reports import write_all


def test_write_all_writes_three_formats_atomically(tmp_path: Path) -> None:
    report = Report(model=ModelInfo(target="m.py", unit="sample"), hardware=None,
                    batches=[BatchResult(1, Status.OOM, error="CUDA out of memory")],
                    recommendation=None, run=RunInfo(), partial=True,
                    stop=Stop(StopKind.IN_PROGRESS))
    paths = write_all(report, tmp_path)
    assert set(paths) == {"json", "html", "markdown"}
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["report.html", "report.json", "summary.md"]
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "No batch size was measured" in html and "Partial report (sweep in progress)" in html
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert "**No batch size could be measured** (sweep in progress)" in summary
    assert "Partial report" in summary
    # Rewritten after every batch size: a second write replaces the files in place.
    write_all(report, tmp_path)
    assert len(list(tmp_path.iterdir())) == 3
