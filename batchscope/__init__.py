"""batchscope: where each op of a PyTorch model sits on the roofline at every batch size.

Example:
    >>> import batchscope
    >>> report = batchscope.diagnose_file("samples/llm_decode.py")  # doctest: +SKIP
    >>> report.recommendation.batch_size  # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"

from batchscope.api import Options, diagnose, diagnose_file, exit_code  # noqa: E402
from batchscope.report import Report  # noqa: E402
from batchscope.watch import watch  # noqa: E402

__all__ = ["Options", "Report", "__version__", "diagnose", "diagnose_file", "exit_code",
           "watch"]
