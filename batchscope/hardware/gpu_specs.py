"""Datasheet figures of common NVIDIA GPUs: a cross-check shown beside the measurement.

Never used as the roof: measured ceilings win (datasheets are boost-clock peaks, and tables
in the wild mix sparse and dense figures up). Tensor-core figures here are DENSE; where the
sheet prints only the 2:4-sparse figure (marked with an asterisk), dense = sparse / 2 and the
printed sparse figure is kept beside it in ``sparse_flops_per_s``.

Example:
    >>> lookup("NVIDIA H100 80GB HBM3")["peak_flops_per_s"]["bfloat16"]
    989500000000000.0
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from batchscope.errors import UsageError
from batchscope.hardware.figures import DatasheetSpec
from batchscope.hardware.types import BF16, FP16, FP32, TF32

TERA = 1e12
GB_PER_S = 1e9  # bandwidth is printed in decimal GB/s (TB/s)
GIB = 2**30  # capacity is printed as "GB" but is binary: an 80 GB H100 shows ~79.1 GiB in torch
# L2 is printed in binary MB: CUDA's l2CacheSize of an H100 is 52428800 bytes, "50 MB".
MIB = 2**20
FP8 = "float8_e4m3fn"  # torch's name of the FP8 format tensor cores run (Hopper and later)

_H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/"
_H100_64GB_SOURCE = (
    "no NVIDIA datasheet; bandwidth from the configuration BSC's memory group recorded on "
    "MareNostrum 5's ACC H100 (132 SMs, 1593 MHz HBM2e, 4096-bit bus: 4 of the 5 stacks of "
    "an 80 GB part; 1593e6 x 2 x 4096 / 8 = 1631 GB/s, 1570 GB/s measured reading), "
    "https://github.com/bsc-mem/Mess-Results/blob/635f30b952f809983b025df56b47209ac38b1627/"
    "Systems/HPC/MN5/MN5-ACC/GPU/README.md; tensor peaks as the 80 GB SXM5 (inferred)"
)
_H200_SHEET = "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/"
_A100_SHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/"
    "Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_V100_SHEET = ("NVIDIA V100 Tensor Core GPU datasheet, "
               "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf")
_ADA_PAPER = (
    "NVIDIA Ada GPU architecture whitepaper, appendix A (FP32-accumulate tensor rates), "
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
)
_RTX_BLACKWELL_PAPER = (
    "NVIDIA RTX Blackwell GPU architecture whitepaper, appendix A (FP32-accumulate tensor "
    "rates), https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/"
    "nvidia-rtx-blackwell-gpu-architecture.pdf"
)
_GA102_PAPER = (
    "NVIDIA Ampere GA102 GPU architecture whitepaper, appendix A (FP32-accumulate tensor rates), "
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)

# L2 sizes. Datasheets rarely print them; where they do not, the architecture whitepaper's
# figure for the part, or what CUDA itself reports (``torch.cuda.get_device_properties(i)
# .L2_cache_size``, printed by torch as "L2_cache_size=..MB") in public logs, is used:
# - H100 SXM5 and PCIe: 50 MB, "NVIDIA H100 Tensor Core GPU Architecture" whitepaper
#   (the full GH100 has 60 MB); CUDA reports 50 MB for "NVIDIA H100 80GB HBM3".
# - H100 NVL: 50 MB assumed (same GH100 configuration as the SXM5 part); not printed by
#   NVIDIA's NVL page, not verified on a device.
# - H200 SXM: 60 MB as CUDA reports it for "NVIDIA H200" (major 9, 132 SMs, 143156 MB) in a
#   public torch log; NVIDIA's H200 page prints no L2. H200 NVL: unknown (None).
# - B200: 126 MB as CUDA reports it for "NVIDIA B200" (148 SMs, 182631 MB), and Chips and
#   Cheese, https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut (126 MB).
# - A100 (40 and 80 GB): 40 MB, "NVIDIA A100 Tensor Core GPU Architecture" whitepaper.
# - A10 and RTX 3090 (GA102): 6 MB (6144 KB), GA102 whitepaper appendix A.
# - L4 (AD104): 48 MB; L40, L40S (AD102): 96 MB; RTX 4090: 72 MB; Ada whitepaper.
# - T4 (TU104): 4 MB, NVIDIA Turing architecture whitepaper.


@dataclass(frozen=True)
class GpuSpec:
    """One datasheet row.

    Attributes:
        product: marketing name of the part.
        patterns: regular expressions matched in full against the normalised device name.
        peak_flops_per_s: dense peak per dtype name; tensor cores for bf16/fp16/tf32/fp8,
            the plain (non-tensor) FP32 rate for "float32".
        bandwidth_bytes_per_s: memory bandwidth.
        memory_bytes: memory capacity.
        source: where the figures come from.
        sparse_flops_per_s: the 2:4-sparse figures as the sheet prints them, where it does.
        l2_bytes: the L2 cache (see the sources above the table), None where unknown.
        family_patterns: names that do not say which row of a family they are (e.g. "A100
            SXM4" without 40/80 GB); ``lookup`` picks among the rows they match by memory.
    """

    product: str
    patterns: tuple[str, ...]
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    memory_bytes: int
    source: str
    sparse_flops_per_s: dict[str, float] = field(default_factory=dict)
    l2_bytes: int | None = None
    family_patterns: tuple[str, ...] = ()

    def datasheet(self) -> DatasheetSpec:
        """The row as the record ceilings carry (a fresh copy of its tables)."""
        return DatasheetSpec(product=self.product, peak_flops_per_s=dict(self.peak_flops_per_s),
                             bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
                             memory_bytes=self.memory_bytes, source=self.source,
                             sparse_flops_per_s=dict(self.sparse_flops_per_s),
                             l2_bytes=self.l2_bytes)


def _sparse_sheet(fp32_tf: float, tf32_sparse_tf: float, half_sparse_tf: float,
                  fp8_sparse_tf: float | None = None) -> dict[str, Any]:
    """Dense and sparse tables from a sheet that prints sparse tensor figures (dense = half)."""
    sparse = {TF32: tf32_sparse_tf * TERA, BF16: half_sparse_tf * TERA, FP16: half_sparse_tf * TERA}
    if fp8_sparse_tf is not None:
        sparse[FP8] = fp8_sparse_tf * TERA
    dense = {k: v / 2 for k, v in sparse.items()}
    return {"peak_flops_per_s": {**dense, FP32: fp32_tf * TERA}, "sparse_flops_per_s": sparse}


def _dense_sheet(fp32_tf: float, tf32_tf: float, half_tf: float) -> dict[str, Any]:
    """Dense and sparse tables from a sheet that prints "dense | sparse*" (sparse = twice)."""
    dense = {TF32: tf32_tf * TERA, BF16: half_tf * TERA, FP16: half_tf * TERA}
    sparse = {k: 2 * v for k, v in dense.items()}
    return {"peak_flops_per_s": {**dense, FP32: fp32_tf * TERA}, "sparse_flops_per_s": sparse}


# Every A100 SXM4 board is a PG509 (torch may print its board name, "A100-PG509-200");
# "A100-SXM4" alone, or a board number not listed, is told 40 from 80 GB by memory.
# "NVIDIA H100" (as the 64 GB part names itself, and some 80 GB boards) or "H100 SXM5"
# without a size: told 64 from 80 GB by memory; without it, no guess (the two differ in
# bandwidth by 2x).
_H100_SXM_FAMILY = (r"h100( sxm5?)?",)
_A100_SXM_FAMILY = (r"a100 sxm4?", r"a100 pg509 \d+")
_A100_PCIE_FAMILY = (r"a100 pcie",)

SPECS: tuple[GpuSpec, ...] = (
    # Hopper. The H100/H200 sheets print tensor figures with sparsity only (asterisk).
    GpuSpec("H100 SXM5 80GB", (r"h100( sxm5?)? 80gb( hbm3)?",),
            bandwidth_bytes_per_s=3350 * GB_PER_S, memory_bytes=80 * GIB,
            source=_H100_SHEET, l2_bytes=50 * MIB, family_patterns=_H100_SXM_FAMILY,
            **_sparse_sheet(67, 989, 1979, fp8_sparse_tf=3958)),
    GpuSpec("H100 PCIe 80GB", (r"h100( 80gb)? pcie( 80gb)?",),
            bandwidth_bytes_per_s=2000 * GB_PER_S, memory_bytes=80 * GIB,
            source=_H100_SHEET, l2_bytes=50 * MIB,
            **_sparse_sheet(51, 756, 1513, fp8_sparse_tf=3026)),
    # The 64 GB SXM5 part (MareNostrum 5's accelerated nodes; PCI ID 2337) has no NVIDIA
    # datasheet: see _H100_64GB_SOURCE. Tensor peaks as the 80 GB SXM5 (the same 132 SMs
    # and 700 W), an inference.
    GpuSpec("H100 SXM5 64GB", (r"h100( sxm5?)? 64gb( hbm2e?)?",),
            bandwidth_bytes_per_s=1631 * GB_PER_S, memory_bytes=64 * GIB,
            source=_H100_64GB_SOURCE, l2_bytes=50 * MIB, family_patterns=_H100_SXM_FAMILY,
            **_sparse_sheet(67, 989, 1979, fp8_sparse_tf=3958)),
    GpuSpec("H100 NVL 94GB", (r"h100 nvl",), bandwidth_bytes_per_s=3900 * GB_PER_S,
            memory_bytes=94 * GIB, source=_H100_SHEET, l2_bytes=50 * MIB,
            **_sparse_sheet(60, 835, 1671, fp8_sparse_tf=3341)),
    GpuSpec("H200 SXM 141GB", (r"h200( sxm5?)?( 141gb)?( hbm3e)?",),
            bandwidth_bytes_per_s=4800 * GB_PER_S, memory_bytes=141 * GIB,
            source=_H200_SHEET, l2_bytes=60 * MIB,
            **_sparse_sheet(67, 989, 1979, fp8_sparse_tf=3958)),
    GpuSpec("H200 NVL 141GB", (r"h200 nvl",), bandwidth_bytes_per_s=4800 * GB_PER_S,
            memory_bytes=141 * GIB, source=_H200_SHEET, l2_bytes=None,
            **_sparse_sheet(60, 835, 1671, fp8_sparse_tf=3341)),
    # Blackwell: HGX B200 platform figures (sparse, asterisk) divided by its 8 GPUs
    # (FP8: 72 PFLOPS sparse for 8 GPUs, 9000 TFLOPS each).
    GpuSpec("B200 (HGX) 180GB", (r"b200",), bandwidth_bytes_per_s=7700 * GB_PER_S,
            memory_bytes=180 * GIB,
            source="NVIDIA HGX B200 specifications per GPU, "
            "https://www.nvidia.com/en-us/data-center/hgx/",
            l2_bytes=126 * MIB, **_sparse_sheet(75, 2200, 4500, fp8_sparse_tf=9000)),
    # Ampere data centre. The A100 and A10 sheets print "dense | sparse*".
    GpuSpec("A100 SXM4 80GB", (r"a100 sxm4? 80gb",), bandwidth_bytes_per_s=2039 * GB_PER_S,
            memory_bytes=80 * GIB, source=_A100_SHEET, l2_bytes=40 * MIB,
            family_patterns=_A100_SXM_FAMILY, **_dense_sheet(19.5, 156, 312)),
    # "A100-PG509-200": a 40 GB SXM4 board (seen with totalGlobalMem 42505273344 bytes).
    GpuSpec("A100 SXM4 40GB", (r"a100 sxm4? 40gb", r"a100 pg509 200"),
            bandwidth_bytes_per_s=1555 * GB_PER_S, memory_bytes=40 * GIB,
            source=_A100_SHEET, l2_bytes=40 * MIB,
            family_patterns=_A100_SXM_FAMILY, **_dense_sheet(19.5, 156, 312)),
    GpuSpec("A100 PCIe 80GB", (r"a100 80gb pcie", r"a100 pcie 80gb"),
            bandwidth_bytes_per_s=1935 * GB_PER_S, memory_bytes=80 * GIB,
            source=_A100_SHEET, l2_bytes=40 * MIB,
            family_patterns=_A100_PCIE_FAMILY, **_dense_sheet(19.5, 156, 312)),
    GpuSpec("A100 PCIe 40GB", (r"a100 40gb pcie", r"a100 pcie 40gb"),
            bandwidth_bytes_per_s=1555 * GB_PER_S, memory_bytes=40 * GIB,
            source=_A100_SHEET, l2_bytes=40 * MIB,
            family_patterns=_A100_PCIE_FAMILY, **_dense_sheet(19.5, 156, 312)),
    GpuSpec("A10 24GB", (r"a10",), bandwidth_bytes_per_s=600 * GB_PER_S, memory_bytes=24 * GIB,
            source="NVIDIA A10 Tensor Core GPU datasheet, "
            "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
            l2_bytes=6 * MIB, **_dense_sheet(31.2, 62.5, 125)),
    # Ada data centre. The L4/L40S sheets print tensor figures with sparsity (asterisk).
    GpuSpec("L4 24GB", (r"l4",), bandwidth_bytes_per_s=300 * GB_PER_S, memory_bytes=24 * GIB,
            source="NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/",
            l2_bytes=48 * MIB, **_sparse_sheet(30.3, 120, 242, fp8_sparse_tf=485)),
    GpuSpec("L40S 48GB", (r"l40s",), bandwidth_bytes_per_s=864 * GB_PER_S, memory_bytes=48 * GIB,
            source="NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/",
            l2_bytes=96 * MIB, **_sparse_sheet(91.6, 366, 733, fp8_sparse_tf=1466)),
    GpuSpec("L40 48GB", (r"l40",), bandwidth_bytes_per_s=864 * GB_PER_S, memory_bytes=48 * GIB,
            source="NVIDIA L40 GPU datasheet, https://www.nvidia.com/en-us/data-center/l40/",
            l2_bytes=96 * MIB, **_sparse_sheet(90.5, 181, 362.1)),
    # GeForce: architecture whitepapers, "dense | sparse" with FP32 accumulate (what torch uses).
    # GeForce Blackwell (sm_120): FP32-accumulate tensor rates, half the FP16-accumulate ones
    # (838.4 TFLOPS sparse FP16) as on Ada; the Nsight Compute exports in tests/data/ncu
    # reached 113 TFLOP/s on its bf16 GEMMs.
    GpuSpec("GeForce RTX 5090", (r"rtx 5090",), bandwidth_bytes_per_s=1792 * GB_PER_S,
            memory_bytes=32 * GIB,
            source=_RTX_BLACKWELL_PAPER, l2_bytes=96 * MIB, **_dense_sheet(104.8, 104.8, 209.5)),
    GpuSpec("GeForce RTX 4090", (r"rtx 4090",), bandwidth_bytes_per_s=1008 * GB_PER_S,
            memory_bytes=24 * GIB,
            source=_ADA_PAPER, l2_bytes=72 * MIB, **_dense_sheet(82.6, 82.6, 165.2)),
    GpuSpec("GeForce RTX 3090", (r"rtx 3090",), bandwidth_bytes_per_s=936 * GB_PER_S,
            memory_bytes=24 * GIB,
            source=_GA102_PAPER, l2_bytes=6 * MIB, **_dense_sheet(35.6, 35.6, 71)),
    # Turing: fp16 tensor cores only (no bf16, no TF32, no sparsity).
    GpuSpec("T4 16GB", (r"t4",), bandwidth_bytes_per_s=320 * GB_PER_S, memory_bytes=16 * GIB,
            source="NVIDIA T4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/tesla-t4/",
            l2_bytes=4 * MIB, peak_flops_per_s={FP16: 65 * TERA, FP32: 8.1 * TERA}),
    # Volta: fp16 tensor cores only. L2 6 MB (Volta architecture whitepaper).
    GpuSpec("V100 SXM2 16GB", (r"v100( sxm2)?( 16gb)?",), bandwidth_bytes_per_s=900 * GB_PER_S,
            memory_bytes=16 * GIB, source=_V100_SHEET, l2_bytes=6 * MIB,
            peak_flops_per_s={FP16: 125 * TERA, FP32: 15.7 * TERA}),
    GpuSpec("V100 SXM2 32GB", (r"v100( sxm2)? 32gb",), bandwidth_bytes_per_s=900 * GB_PER_S,
            memory_bytes=32 * GIB, source=_V100_SHEET, l2_bytes=6 * MIB,
            peak_flops_per_s={FP16: 125 * TERA, FP32: 15.7 * TERA}),
    GpuSpec("V100 PCIe 16GB", (r"v100 pcie( 16gb)?", r"v100 16gb pcie"),
            bandwidth_bytes_per_s=900 * GB_PER_S, memory_bytes=16 * GIB, source=_V100_SHEET,
            l2_bytes=6 * MIB, peak_flops_per_s={FP16: 112 * TERA, FP32: 14 * TERA}),
)

# Words that vendors put around the model name and that carry no information here.
_NOISE_WORDS = re.compile(r"\b(nvidia|geforce|tesla)\b")


def normalise(name: str) -> str:
    """Lower-case ``name``, drop vendor words, and turn "-" / "_" into single spaces."""
    text = _NOISE_WORDS.sub(" ", name.lower())
    return " ".join(re.sub(r"[-_]", " ", text).split())


def _matching(key: str, patterns_of: Callable[[GpuSpec], tuple[str, ...]]) -> list[GpuSpec]:
    return [spec for spec in SPECS if any(re.fullmatch(p, key) for p in patterns_of(spec))]


def lookup(name: str, memory_bytes: int | None = None) -> DatasheetSpec | None:
    """Datasheet figures for a device name as ``torch.cuda.get_device_name()`` prints it.

    The whole name must match, so "NVIDIA A10" is not an A100, and a MIG slice
    ("... MIG 1g.10gb") or an unknown part gives None. A name that says its row wins; a
    name that fits several rows of a family ("NVIDIA A100-SXM4", no 40/80 GB) is told apart
    by ``memory_bytes``: the row whose capacity is nearest. Without it such a name gives
    None rather than a guess (40 and 80 GB parts differ in bandwidth by a third).

    Args:
        name: e.g. "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090".
        memory_bytes: the device's memory (``torch.cuda.get_device_properties(i)
            .total_memory``), used only where the name leaves the row open.

    Returns:
        A fresh record (product, peak_flops_per_s, sparse_flops_per_s, bandwidth_bytes_per_s,
        memory_bytes, l2_bytes, source), or None where the part is not in the table.

    Example:
        >>> lookup("NVIDIA A100-SXM4", memory_bytes=42505273344).product
        'A100 SXM4 40GB'
    """
    key = normalise(name)
    exact = _matching(key, lambda spec: spec.patterns)
    if exact:
        return exact[0].datasheet()
    family = _matching(key, lambda spec: spec.family_patterns)
    if len(family) == 1:
        return family[0].datasheet()
    if not family or memory_bytes is None:
        return None
    return min(family, key=lambda spec: abs(spec.memory_bytes - memory_bytes)).datasheet()


def _words(name: str) -> list[str]:
    """The words of a GPU name, normalised, a capacity as one word ("80 GB" is "80gb")."""
    return re.sub(r"\b(\d+)\s+(gb|gib)\b", r"\1gb", normalise(name)).split()


def _word_in(word: str, product_words: list[str]) -> bool:
    """A word of the name is one of the product's, or the start of one where it has no digit
    ("sxm" for "sxm4"; "a10" is never an "a100")."""
    return any(w == word or (word.isalpha() and w.startswith(word)) for w in product_words)


def products_named(name: str) -> list[GpuSpec]:
    """The rows whose product name holds every word of ``name``, in table order.

    Example:
        >>> [spec.product for spec in products_named("A100 80GB")]
        ['A100 SXM4 80GB', 'A100 PCIe 80GB']
        >>> [spec.product for spec in products_named("4090")]
        ['GeForce RTX 4090']
    """
    words = _words(name)
    if not words:
        return []
    return [spec for spec in SPECS
            if all(_word_in(w, _words(spec.product)) for w in words)]


def resolve(name: str, option: str = "--target-gpu",
            unknown_hint: str = "`diagnose hardware --list-gpus` lists them") -> DatasheetSpec:
    """The datasheet a user's GPU name means: the device name as torch prints it
    (:func:`lookup`), else the one product whose name holds every word of it ("A10",
    "RTX 4090", "H200 NVL").

    Raises:
        UsageError: the name fits several products (one sentence listing them) or none.
    """
    spec = lookup(name)
    if spec is not None:
        return spec
    named = products_named(name)
    if len(named) == 1:
        return named[0].datasheet()
    if named:
        raise UsageError(f"{option} {name!r} names more than one GPU "
                         f"({', '.join(s.product for s in named)}); give one of them.")
    known = ", ".join(s.product for s in SPECS)
    raise UsageError(f"{option} {name!r} is not a GPU in batchscope's datasheet table "
                     f"({known}); {unknown_hint}.")

