"""`diagnose hardware --device cuda:N` measures that GPU, not cuda:0 (issue 15, bug 3)."""

from __future__ import annotations

import pytest

from batchscope import hardware
from batchscope.cli import main


def test_hardware_passes_the_gpu_index_through(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def fake_load_or_measure(device, recalibrate=False):
        asked.append(device)
        raise SystemExit(0)  # stop before printing: only the device asked for matters here

    monkeypatch.setattr(hardware, "load_or_measure", fake_load_or_measure)
    with pytest.raises(SystemExit):
        main(["hardware", "--device", "cuda:1"])
    assert asked == ["cuda:1"]


def test_hardware_refuses_other_devices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["hardware", "--device", "tpu"])
    assert exit_info.value.code == 4
    assert "cuda:N" in capsys.readouterr().err
