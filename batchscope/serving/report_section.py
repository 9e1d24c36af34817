"""report.json ``serving`` for a decode model (one whose file sets CONTEXTS): the contexts,
the context grid the sweep timed, and once the sweep is done the what-if at its defaults
(``diagnose serve`` runs it with the user's rates, lengths and SLO)."""

from __future__ import annotations

import dataclasses

from batchscope.errors import UsageError
from batchscope.records import GridPoint, Report
from batchscope.records.serving import ServingSection
from batchscope.serving.whatif import WhatIfOptions, what_if

# The report's own what-if is a first look, run at the end of every decode sweep: fewer
# requests and loads than ``diagnose serve``'s defaults keep it to a second or two.
REPORT_REQUESTS = 150
REPORT_LOADS = (0.25, 0.75, 1.1)
# It simulates the recommended batch size as the cap, with a stream this many times as long as
# the cap: a shorter one never fills the batch (the first requests ramp it up, the last drain
# it), and its throughput would read as the policy's, not the ramp's.
BATCHES_PER_STREAM = 12


def serving_section(report: Report, grid: list[GridPoint], final: bool) -> ServingSection:
    """The section of ``report`` (assembled but for it): its contexts and ``grid``, and
    when ``final`` the what-if at the recommended batch size, or the sentence saying why
    none could be simulated."""
    contexts = list(report.model.contexts)
    section = ServingSection(contexts=contexts, base_context=contexts[0] if contexts else None,
                             context_grid=list(grid))
    if not final:
        return section
    options = WhatIfOptions(requests=REPORT_REQUESTS, loads=REPORT_LOADS)
    rec = report.recommendation.batch_size if report.recommendation is not None else None
    if rec is not None and rec > 0:
        options.caps = [rec]
        options.requests = max(REPORT_REQUESTS, BATCHES_PER_STREAM * rec)
    try:
        result = what_if(dataclasses.replace(report, serving=section), options)
    except UsageError as exc:  # nothing measured to simulate from: say so, keep the report
        return dataclasses.replace(section, what_if_error=str(exc))
    return dataclasses.replace(section, what_if=result)
