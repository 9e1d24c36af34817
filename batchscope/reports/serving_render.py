"""The serving what-if rendered: the explanation in the user's numbers, charts of latency
and throughput against request rate for both policies, serving.html, serving.md and the
console summary. Pure functions of the what-if result (:mod:`batchscope.serving.whatif`)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports.escape import chart_text, json_for_script, md_text
from batchscope.reports.html import _static, environment, page_csp, plotly_js

Doc = dict[str, Any]
POLICY_COLORS = {"continuous": st.ACCENT, "static": "#b45309"}
TEMPLATE = "serving.html.j2"


def _runs(result: Doc, policy: str, cap: int) -> list[Doc]:
    return sorted((r for r in result.get("runs") or []
                   if r.get("policy") == policy and r.get("cap") == cap),
                  key=lambda r: r["rate_per_s"])


def _best_caps(result: Doc) -> dict[str, int]:
    """Each policy's cap to draw: its cap under the SLO where one was asked, else its best."""
    out = {}
    slo_rates = result.get("max_rate_within_slo") or []
    for policy in ("continuous", "static"):
        mine = [r for r in slo_rates if r.get("policy") == policy and r.get("max_rate_per_s")]
        if mine:
            out[policy] = max(mine, key=lambda r: r["max_rate_per_s"])["cap"]
        elif (result.get("best") or {}).get(policy):
            out[policy] = result["best"][policy]["cap"]
    return out


def _both_keep_up(result: Doc, cont_cap: int, stat_cap: int) -> tuple[Doc, Doc] | None:
    """Continuous and static runs at the highest rate both kept up with, each at its cap."""
    cont = {r["rate_per_s"]: r for r in _runs(result, "continuous", cont_cap)}
    stat = {r["rate_per_s"]: r for r in _runs(result, "static", stat_cap)}
    rates = [rate for rate in cont if rate in stat
             and cont[rate].get("keeps_up") and stat[rate].get("keeps_up")]
    return (cont[max(rates)], stat[max(rates)]) if rates else None


def explain(result: Doc) -> list[str]:
    """Paragraphs that say what the what-if found, each from the numbers beside it."""
    model = result["step_time"]
    unit = result.get("unit") or "token"
    curve = model.get("curve") or []
    c0 = model["base_context"]
    paras = [result["recommendation"]["sentence"]]
    if curve:
        first, last = curve[0], curve[-1]
        step1 = first["shared_s"] + first["per_token_s"] * c0
        stepn = last["shared_s"] + last["per_token_s"] * c0
        text = (f"From the sweep at {c0} tokens of context: a decode step takes "
                f"{fmt.seconds(step1)} at batch {first['batch_size']} and "
                f"{fmt.seconds(stepn)} at batch {last['batch_size']}, so a full batch of "
                f"{last['batch_size']} makes {fmt.rate(last['batch_size'] / stepn, unit)} "
                f"against {fmt.rate(first['batch_size'] / step1, unit)}.")
        if model.get("source") != "none" and last["per_token_s"] > 0:
            longer = 4 * c0 or 512
            slower = last["shared_s"] + last["per_token_s"] * longer
            text += (f" Each row's KV cache is read at every step, so context costs time: at "
                     f"batch {last['batch_size']} a step at {longer} tokens would take "
                     f"{fmt.seconds(slower)} ({model['source']}).")
        paras.append(text)
    best = result.get("best") or {}
    cont, stat = best.get("continuous"), best.get("static")
    if cont and stat:
        text = (f"At {cont['rate_per_s']:.3g} requests/s, past what either policy can serve, "
                f"static batching's steps averaged {fmt.number(stat.get('mean_batch'))} rows")
        if stat.get("idle_slot_share") is not None:
            text += (f", {fmt.pct(stat['idle_slot_share'])} of them slots whose request had "
                     "already finished, held until the longest one of the batch was done")
        text += (f"; continuous batching refilled each freed slot at the next step and "
                 f"averaged {fmt.number(cont.get('mean_batch'))} rows.")
        calm = _both_keep_up(result, cont["cap"], stat["cap"])
        if calm is not None:
            c, st_ = calm
            text += (f" At {c['rate_per_s']:.3g} requests/s, which both keep up with, an "
                     "arrival also waits for a whole static batch to end: p99 time to first "
                     f"token {fmt.seconds(st_.get('ttft_p99_s'))} against "
                     f"{fmt.seconds(c.get('ttft_p99_s'))}.")
        paras.append(text)
    kv_tokens = result.get("kv_capacity_tokens")
    per_token = model.get("kv_bytes_per_token")
    stream = result.get("stream") or {}
    if kv_tokens and per_token:
        need = stream.get("mean_prompt_tokens", 0) + stream.get("mean_output_tokens", 0)
        fits = int(kv_tokens // need) if need else None
        text = (f"The KV cache takes {fmt.nbytes(per_token)} per token per row "
                f"({model.get('kv_bytes_source')}); {fmt.nbytes(result.get('kv_memory_bytes'))} "
                f"({result.get('kv_memory_source')}) holds {kv_tokens:,} tokens")
        if fits is not None:
            caps = result.get("caps") or [0]
            text += (f", {fits:,} requests of the mean length at once: "
                     + ("KV memory, not the cap, limits the largest caps here."
                        if fits < max(caps) else
                        f"above the largest cap tried ({max(caps)}), so memory does not limit "
                        "these caps."))
        paras.append(text if text.endswith(".") else text + ".")
    return paras


def assumptions(result: Doc) -> list[str]:
    out = [("Attention is padded: every row of a step pays for the longest context in the "
            "batch, as a plain PyTorch batch does (paged attention would read each row's own)."),
           ("Each request reserves KV for its prompt and all its output tokens when admitted; "
            "nothing is preempted; waiting requests are admitted first come, first served."),
           (f"Step times are this machine's, from {result.get('target') or 'the report'}'s "
            "sweep; between measured batch sizes they are interpolated, above the largest not "
            "extrapolated.")]
    if not result.get("prefill_s_per_token"):
        out.insert(0, "Prefill is not measured: a request's prompt is taken as already in its "
                   "KV cache when it is admitted, and its first token comes with its first "
                   "decode step (give --prefill-ms-per-token to charge it).")
    else:
        out.insert(0, f"Prefill costs {result['prefill_s_per_token'] * 1e3:g} ms per prompt "
                   "token, paid before the next step, blocking the batch.")
    return out


def figures(result: Doc) -> dict[str, st.Figure]:
    caps = _best_caps(result)
    slo = result.get("slo") or {}
    out = {}
    for key, field, title in (("tpot", "tpot", "time per output token"),
                              ("ttft", "ttft", "time to first token")):
        data = []
        for policy, cap in caps.items():
            runs = _runs(result, policy, cap)
            for q, dash in (("p99", "solid"), ("p50", "dot")):
                data.append({"type": "scatter", "mode": "lines+markers",
                             "name": chart_text(f"{policy}, cap {cap}, {q}"),
                             "x": [r["rate_per_s"] for r in runs],
                             "y": [(r.get(f"{field}_{q}_s") or 0) * 1e3 for r in runs],
                             "line": {"color": POLICY_COLORS[policy], "dash": dash}})
        shapes = []
        target = slo.get(f"{field}_s")
        if target:
            shapes.append(st.hline(target * 1e3, st.LIMIT))
        values = [y for d in data for y in d["y"] if y > 0]
        out[key] = st.figure(data, st.layout(
            xaxis=st.axis("offered requests/s"),
            yaxis=st.axis(f"{title} (ms)", log=st.wants_log(values) if values else False),
            shapes=shapes))
    data = []
    unit = result.get("unit") or "token"
    for policy, cap in caps.items():
        runs = _runs(result, policy, cap)
        data.append({"type": "scatter", "mode": "lines+markers",
                     "name": chart_text(f"{policy}, cap {cap}"),
                     "x": [r["rate_per_s"] for r in runs],
                     "y": [r["throughput_tokens_per_s"] for r in runs],
                     "line": {"color": POLICY_COLORS[policy]}})
    out["throughput"] = st.figure(data, st.layout(
        xaxis=st.axis("offered requests/s"), yaxis=st.axis(chart_text(f"{unit}s/s served"))))
    return out


def table_rows(result: Doc) -> list[Doc]:
    rows = []
    for r in result.get("runs") or []:
        rows.append({"policy": r["policy"], "cap": r["cap"], "rate": f"{r['rate_per_s']:.3g}"[:5],
                     "throughput": fmt.si(r.get("throughput_tokens_per_s")),
                     "batch": fmt.number(r.get("mean_batch")),
                     "ttft50": fmt.seconds(r.get("ttft_p50_s")),
                     "ttft99": fmt.seconds(r.get("ttft_p99_s")),
                     "tpot50": fmt.seconds(r.get("tpot_p50_s")),
                     "tpot99": fmt.seconds(r.get("tpot_p99_s")),
                     "e2e99": fmt.seconds(r.get("e2e_p99_s")),
                     "keeps_up": "yes" if r.get("keeps_up") else "no",
                     "slo": {True: "met", False: "missed", None: "–"}[r.get("slo_met")]})
    return rows


def fit_rows(result: Doc) -> list[Doc]:
    return [{"batch": p["batch_size"], "context": p["context"],
             "measured": fmt.seconds(p["measured_s"]), "predicted": fmt.seconds(p["predicted_s"]),
             "error": f"{p['error']:+.0%}",
             "split": f"{p['split_error']:+.0%}" if p.get("split_error") is not None else "–"}
            for p in result["step_time"].get("points") or []]


def render_html(result: Doc) -> str:
    """serving.html: self-contained and offline, like report.html."""
    page_js = _static("report.js")
    figs = figures(result)
    return environment().get_template(TEMPLATE).render(
        result=result, paragraphs=explain(result), assumptions=assumptions(result),
        rows=table_rows(result), fit_rows=fit_rows(result),
        charts={"tpot": "Time per output token", "ttft": "Time to first token",
                "throughput": "Throughput served"},
        css=_static("report.css"), page_js=page_js, plotly_js=plotly_js(),
        figures_json=json_for_script(figs),
        csp=page_csp(page_js))


def render_markdown(result: Doc) -> str:
    lines = [f"## Serving what-if: {md_text(str(result.get('target') or 'report'))}", ""]
    lines += [md_text(p, limit=4000) + "\n" for p in explain(result)]
    lines += [("| policy | cap | requests/s | tokens/s | mean batch | p99 TTFT | p50 TPOT | "
               "p99 TPOT | keeps up | SLO |"), "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    caps = _best_caps(result)
    for row in table_rows(result):
        if caps.get(row["policy"]) == row["cap"]:
            lines.append(f"| {row['policy']} | {row['cap']} | {row['rate']} | "
                         f"{row['throughput']} | {row['batch']} | {row['ttft99']} | "
                         f"{row['tpot50']} | {row['tpot99']} | {row['keeps_up']} | "
                         f"{row['slo']} |")
    lines += ["", "Assumptions: " + " ".join(md_text(a, limit=4000) for a in assumptions(result)), ""]
    return "\n".join(lines)


def print_serving(console: Console, result: Doc) -> None:
    for para in explain(result):
        console.print(para, markup=False, highlight=False)
        console.print()
    table = Table(title="Each policy at its best cap (every run: serving.html)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("policy", "cap", "req/s", "tok/s", "TTFT p99", "TPOT p50", "TPOT p99",
                "SLO"):
        table.add_column(col, justify="left" if col in ("policy", "SLO") else "right",
                         no_wrap=True)
    caps = _best_caps(result)
    for row in table_rows(result):
        if caps.get(row["policy"]) == row["cap"]:
            slo = row["slo"] if row["slo"] != "–" else ("" if row["keeps_up"] == "yes"
                                                         else "behind")
            table.add_row(row["policy"], str(row["cap"]), row["rate"], row["throughput"],
                          row["ttft99"], row["tpot50"], row["tpot99"], slo)
    console.print(table)
