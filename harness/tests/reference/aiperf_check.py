#!/usr/bin/env python3
"""Loads `harness profile`'s AIPerf exports with AIPerf 0.13's own models and
recomputes every record metric's summary with AIPerf's own summary function.

Usage: aiperf_check.py ARTIFACT_DIR. Run with the venv scripts/test makes
(target/venv-aiperf-ref: aiperf 0.13.0 installed with --no-deps, see
harness/tests/reference/requirements-aiperf.txt). Prints one JSON line:
{"records": N, "errors": E, "metrics": M, "recomputed": R, "csv_rows": C}.
Exits 1 on the first disagreement, naming it.
"""
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
from aiperf.common.models.export_models import JsonExportData
from aiperf.common.models.record_models import MetricRecordInfo
from aiperf.metrics.metric_dicts import metric_result_from_array


def fail(msg):
    print(f"aiperf_check: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    art = Path(sys.argv[1])
    text = (art / "profile_export_aiperf.json").read_text()
    export = JsonExportData.model_validate_json(text)
    raw = json.loads(text)
    records = [
        MetricRecordInfo.model_validate_json(line)
        for line in (art / "profile_export.jsonl").read_text().splitlines()
        if line.strip()
    ]
    if not records:
        fail("profile_export.jsonl holds no record")
    errors = sum(1 for r in records if r.error is not None)
    # Every record metric's summary, recomputed from the JSONL by AIPerf's function.
    series = {}
    for r in records:
        if r.error is not None:
            continue
        for tag, mv in r.metrics.items():
            vals = mv.value if isinstance(mv.value, list) else [mv.value]
            series.setdefault(tag, []).extend(float(v) for v in vals)
    recomputed = 0
    for tag, vals in series.items():
        if tag not in raw:
            fail(f"{tag}: in the JSONL but not in profile_export_aiperf.json")
        arr = np.array(vals, dtype=np.float64)
        want = metric_result_from_array(tag, tag, raw[tag]["unit"], arr.copy(), float(arr.sum()))
        for key in ["avg", "min", "max", "p1", "p50", "p90", "p99", "std", "count"]:
            got = raw[tag].get(key)
            w = getattr(want, key)
            if got is None or not math.isclose(float(got), float(w), rel_tol=1e-9, abs_tol=1e-9):
                fail(f"{tag}.{key}: exported {got}, AIPerf computes {w}")
        recomputed += 1
    count = export.request_count
    if count is None or int(count.avg) != len(records) - errors:
        fail(f"request_count {count} but {len(records) - errors} good records")
    # The CSV: every metric row's name and average agrees with the JSON.
    rows = list(csv.reader((art / "profile_export_aiperf.csv").read_text().splitlines()))
    csv_rows = sum(1 for row in rows if row and row[0] not in ("Metric", ""))
    metrics = sum(1 for k, v in raw.items() if isinstance(v, dict) and "unit" in v)
    print(json.dumps({"records": len(records), "errors": errors, "metrics": metrics,
                      "recomputed": recomputed, "csv_rows": csv_rows}))


if __name__ == "__main__":
    main()
