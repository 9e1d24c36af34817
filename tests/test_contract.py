from __future__ import annotations

import pytest
import torch

from batchscope.contract import check_inputs, load_model_file
from batchscope.errors import ModelFileError
from tests.conftest import MODELS, SAMPLES


def test_samples_follow_the_contract():
    for name, unit in (("llm_decode.py", "token"), ("cnn.py", "image"), ("mlp.py", "sample")):
        spec = load_model_file(SAMPLES / name)
        assert spec.unit == unit and spec.mode == "inference"


def test_missing_function_lists_what_the_file_defines():
    with pytest.raises(ModelFileError) as info:
        load_model_file(MODELS / "no_make_inputs.py")
    message = str(info.value)
    assert "defines no make_inputs()" in message
    assert "build_model" in message and "helper" in message and "UNIT" in message


def test_import_error_shows_only_the_users_frames():
    with pytest.raises(ModelFileError) as info:
        load_model_file(MODELS / "import_error.py")
    assert "RuntimeError: config file weights.yaml not found" in str(info.value)
    detail = info.value.detail
    assert "import_error.py" in detail and "_load_config" in detail
    assert "importlib" not in detail and "batchscope" not in detail.replace("import_error", "")


def test_syntax_error_and_missing_file():
    with pytest.raises(ModelFileError, match="line 1: syntax error"):
        load_model_file(MODELS / "syntax_error.py")
    with pytest.raises(ModelFileError, match="does not exist"):
        load_model_file(MODELS / "nope.py")


def test_batch_dimension_must_match():
    spec = load_model_file(MODELS / "wrong_batch_dim.py")
    with pytest.raises(ModelFileError, match=r"shape \[8, 3\].*not 3"):
        check_inputs(spec.make_inputs(3), 3, "wrong_batch_dim.py")
    with pytest.raises(ModelFileError, match="returned a str"):
        check_inputs("hello", 1, "m.py")
    check_inputs({"x": torch.zeros(2, 4), "pos": 3}, 2, "m.py")


@pytest.mark.slow
def test_units_per_row_scales_throughput_and_is_checked(tmp_path):
    # issue 18: a prefill row yields its tokens, so throughput reads in tokens/s
    from batchscope.api import Options, diagnose_file

    source = (MODELS / "tiny.py").read_text()
    path = tmp_path / "prefill_like.py"
    path.write_text(source + '\nUNIT = "token"\nUNITS_PER_ROW = 128\n')
    report = diagnose_file(path, Options(out_dir=str(tmp_path / "out"), batch_sizes=[2],
                                         measure_ceilings=False, op_breakdown=False,
                                         min_time_s=0.05, device="cpu"))
    (b,) = report.batches
    assert report.model.units_per_row == 128
    assert b.throughput_per_s == pytest.approx(2 * 128 / b.latency_s.median)
    for bad in ("0", "1.5", "True", "'many'"):
        path.write_text(source + f"\nUNITS_PER_ROW = {bad}\n")
        with pytest.raises(ModelFileError, match="UNITS_PER_ROW must be a whole number"):
            load_model_file(path)
