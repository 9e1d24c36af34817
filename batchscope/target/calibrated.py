"""The performance model's terms as :mod:`batchscope.traces.calibrate` measured them on
the recorded traces of real GPUs in tests/data/gpu-traces (an H100 running ViT and
TimeSformer inference, a B200 eager rank, an A100 DDP training rank and an A100 NCCL
rank), and the GEMMs' memory side on the Nsight Compute exports in tests/data/ncu (an RTX
5090 decoding DeepSeek-OCR). Regenerate with ``python -m batchscope.traces.calibrate
tests/data/gpu-traces/*.json.gz --ncu 'tests/data/ncu/deepseek-ocr-rtx5090/kernel_*/ncu.*.csv'
--ncu-gpu 'RTX 5090'``; tests/target/test_target.py recomputes them."""

from __future__ import annotations

from batchscope.records.target import KernelTerm, ModelTerms

TERMS = ModelTerms(
    gemm=KernelTerm(fixed_s=5.25e-06, efficiency=0.35, ops=115, calls=482,
                    median_abs_log_error=0.2153),
    gemm_fp32=KernelTerm(fixed_s=7e-06, efficiency=0.72, ops=19, calls=23,
                         median_abs_log_error=0.1897),
    other=KernelTerm(fixed_s=3.5e-06, efficiency=0.6, ops=280, calls=1195,
                     median_abs_log_error=0.3126),
    host_s_per_op=8.12e-05, host_low_s_per_op=4.94e-05, host_high_s_per_op=1.677e-04,
    traces=["a100-ddp2-nccl-rank0.json.gz", "a100-ddp8-train-rank3.json.gz",
            "b200-eager-rank.json.gz", "h100-timesformer-inference.json.gz",
            "h100-vit-nsfw-inference.json.gz"],
    gemm_memory=KernelTerm(fixed_s=5.25e-06, efficiency=0.76, ops=1, calls=1,
                           median_abs_log_error=0.0014),
    ncu_exports=["deepseek-ocr-rtx5090"],
)
