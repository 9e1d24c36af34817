"""batchscope: where each op of a PyTorch model sits on the roofline at every batch size.

Example:
    >>> import batchscope
    >>> report = batchscope.diagnose_file("samples/llm_decode.py")  # doctest: +SKIP
    >>> report.recommendation.batch_size  # doctest: +SKIP
    >>> batchscope.save(report, "out")  # report.json, report.html, summary.md  # doctest: +SKIP
    >>> batchscope.explanation(report)  # doctest: +SKIP
    >>> batchscope.show(report)  # in a notebook: the HTML report  # doctest: +SKIP
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from batchscope.api import Options, diagnose, diagnose_file, exit_code
from batchscope.records import Report
from batchscope.reports import explanation, show, show_reports_in
from batchscope.reports import write_all as save
from batchscope.version import __version__

if TYPE_CHECKING:
    from batchscope.find_function import find_batch_size
    from batchscope.watching import watch


def __getattr__(name: str) -> Any:
    # watch profiles in this process and needs torch; the sweep's parent process never
    # imports torch (only its worker does), so it is loaded on first use. Its module is
    # batchscope.watching: a submodule named watch would be bound to this name by whatever
    # imported it first (the Lightning callback did), and batchscope.watch(...) would then
    # call a module.
    if name == "watch":
        from batchscope.watching import watch

        globals()["watch"] = watch
        return watch
    if name == "find_batch_size":  # in-process too (batchscope.find_function)
        from batchscope.find_function import find_batch_size

        globals()["find_batch_size"] = find_batch_size
        return find_batch_size
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _running_shell() -> Any:
    """IPython's shell where one runs this interpreter (a notebook's kernel, ipython);
    None elsewhere. IPython is never imported here: only found where it already is."""
    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None)
    return get() if callable(get) else None


# In a notebook a bare ``report`` shows as its HTML report (IPython's formatter for the type).
show_reports_in(_running_shell())

__all__ = ["Options", "Report", "__version__", "diagnose", "diagnose_file", "exit_code",
           "explanation", "find_batch_size", "save", "show", "watch"]
