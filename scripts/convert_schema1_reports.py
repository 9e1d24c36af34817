"""One-off: tests/data/reports/*.json from schema 1 (sentences) to schema 2 (kinds and values).

The recorded sample reports (README there) were written by batchscope 0.1.0 at schema 1,
whose flags, stop and rule were sentences. This rewrites them in schema 2 with the same
numbers: each sentence becomes the kind it was and the values it quoted, taken from the
fields it quoted them from (a noisy-timing flag's spread from the batch's own quartiles, an
accounting error's times from its op's time and roof time); the ceilings' per-op floor
figures move under ``overhead.ops``. Run once, from the repository
root: ``python scripts/convert_schema1_reports.py tests/data/reports/*.json``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from batchscope.records import Report
from batchscope.records.codec import decode, dumps, encode, to_builtins
from batchscope.records.flags import Flag, FlagKind, Stop, StopKind
from batchscope.records.report import SCHEMA_1
from batchscope.records.run import Options

_NOISY = re.compile(r"^batch (\d+): noisy timing")
_PLATEAU = re.compile(r"^throughput plateaued: (\d+) doublings in a row each added less than "
                      r"(\d+)%")
_CAP = re.compile(r"^reached the largest batch size \((\d+)\)")
_METHOD = {"peak resident set size of the worker process": "worker_peak_rss"}


def _stop(text: str) -> Stop:
    if m := _PLATEAU.match(text):
        return Stop(StopKind.PLATEAU, values={"doublings": int(m[1]), "gain": int(m[2]) / 100})
    if m := _CAP.match(text):
        return Stop(StopKind.CAP, values={"largest": int(m[1])})
    raise ValueError(f"unknown stop: {text!r}")


def convert(doc: dict) -> dict:
    assert doc["schema"] == SCHEMA_1
    batches = {b["batch_size"]: b for b in doc["batches"]}
    flags = []
    for text in doc["flags"]:
        m = _NOISY.match(text)
        if m is None:
            raise ValueError(f"unknown flag: {text!r}")
        lat = batches[int(m[1])]["latency_s"]
        flags.append(Flag(FlagKind.NOISY_TIMING, int(m[1]),
                          values={"spread": (lat["p75"] - lat["p25"]) / lat["median"]}))
    for b in doc["batches"]:
        method = b.pop("peak_memory_method", "")
        b["peak_memory_method"] = next((v for k, v in _METHOD.items() if method.startswith(k)), "")
        for op in b["ops"]:
            converted = []
            for text in op["flags"]:
                if not text.startswith("accounting error: "):
                    raise ValueError(f"unknown op flag: {text!r}")
                converted.append(to_builtins(Flag(FlagKind.ACCOUNTING_ERROR, op_id=op["op_id"],
                                                  values={"time_s": op["time_s"],
                                                          "roof_s": op["roof_time_s"]})))
            op["flags"] = converted
    details = doc["hardware"]["details"]
    overhead = details["overhead"]  # schema 1: one key per op beside "floor_s"
    details["overhead"] = {"ops": {k: v for k, v in overhead.items() if k != "floor_s"},
                           "floor_s": overhead["floor_s"]}
    rec = doc["recommendation"]
    rec["rule"] = {"kind": "near_best", "share": rec["near_best_share"],
                   "best_batch_size": rec["best_batch_size"],
                   "best_value": rec["best_throughput_per_s"], "excluded": []}
    for key in ("explanation", "excluded"):
        rec.pop(key)
    run = doc["run"]
    options = {k: v for k, v in run.pop("options").items() if k in Options.__dataclass_fields__}
    run.pop("stop_reason")
    out = {**doc, "schema": "batchscope.report/2", "flags": to_builtins(flags),
           "stop": to_builtins(_stop(doc.pop("stop_reason"))),
           "run": {**run, "source": "sweep", "options": options},
           "estimates": [{k: v for k, v in e.items() if k != "method"}
                         for e in doc["estimates"]]}
    out.pop("stop_reason", None)
    report = decode(out, Report)  # every field typed, or this raises
    return encode(report)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(dumps(convert(json.loads(path.read_text()))) + "\n")
        print(f"converted {path}")
