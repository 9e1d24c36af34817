"""report.json ``serving`` for a decode model (one whose file sets CONTEXTS): the contexts,
the context grid the sweep timed, and once the sweep is done the what-if at its defaults
(``diagnose serve`` runs it with the user's rates, lengths and SLO)."""

from __future__ import annotations

from typing import Any

from batchscope.errors import UsageError
from batchscope.records import GridPoint, to_jsonable
from batchscope.serving.whatif import WhatIfOptions, what_if

# The report's own what-if is a first look, run at the end of every decode sweep: fewer
# requests and loads than ``diagnose serve``'s defaults keep it to a second or two.
REPORT_REQUESTS = 150
REPORT_LOADS = (0.25, 0.75, 1.1)
# It simulates the recommended batch size as the cap, with a stream this many times as long as
# the cap: a shorter one never fills the batch (the first requests ramp it up, the last drain
# it), and its throughput would read as the policy's, not the ramp's.
BATCHES_PER_STREAM = 12


def serving_section(doc: dict[str, Any], grid: list[GridPoint], final: bool) -> dict[str, Any]:
    contexts = (doc.get("model") or {}).get("contexts") or []
    section: dict[str, Any] = {
        "contexts": contexts,
        "base_context": contexts[0] if contexts else None,
        "context_grid": to_jsonable(grid),
        "what_if": None,
    }
    if not final:
        return section
    rec = (doc.get("recommendation") or {}).get("batch_size")
    options = WhatIfOptions(requests=REPORT_REQUESTS, loads=REPORT_LOADS)
    if isinstance(rec, int) and rec > 0:
        options.caps = [rec]
        options.requests = max(REPORT_REQUESTS, BATCHES_PER_STREAM * rec)
    try:
        section["what_if"] = what_if({**doc, "serving": section}, options)
    except UsageError as exc:  # nothing measured to simulate from: say so, keep the report
        section["what_if_error"] = str(exc)
    return section
