#!/usr/bin/env python3
"""Checks `harness benchmark`'s CSV and HTML against guidellm's own writers.

Usage: guidellm_outputs_check.py REPORT.json OURS.csv OURS.html
(prints one JSON line; exit 1 on a difference)

guidellm has no reader for its CSV or HTML, so its own writers
(`GenerativeBenchmarkerCSV`, `GenerativeBenchmarkerHTML`, guidellm 0.8.1) write
both from our JSON report as loaded by its report model, and ours must equal
theirs:

- HTML: byte for byte.
- CSV: the same header rows and every cell equal as text (floats as Python prints
  them; no tolerance), with one documented exception: `Runtime Info / Arguments`
  is guidellm's config model dumped with every default filled in (its default
  output paths under the working directory among them), ours the report's config
  as written; ours must load in guidellm's config model and dump to guidellm's
  cell. guidellm formats timestamps in the local time zone, the harness in UTC:
  this check runs guidellm with TZ=UTC.

The stand-in modules for guidellm's heavy imports are guidellm_check.py's.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path

os.environ["TZ"] = "UTC"
time.tzset()
runpy.run_path(str(Path(__file__).with_name("guidellm_check.py")), run_name="guidellm_check")

from guidellm.benchmark.outputs import (  # noqa: E402
    GenerativeBenchmarkerCSV,
    GenerativeBenchmarkerHTML,
)
from guidellm.benchmark.schemas import GenerativeBenchmarksReport  # noqa: E402


def main() -> int:
    report_path, our_csv, our_html = sys.argv[1:4]
    report = GenerativeBenchmarksReport.load_file(report_path)
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        their_csv = Path(tmp) / "benchmarks.csv"
        their_html = Path(tmp) / "benchmarks.html"
        asyncio.run(GenerativeBenchmarkerCSV(output_path=their_csv).finalize(report))
        asyncio.run(GenerativeBenchmarkerHTML(output_path=their_html).finalize(report))
        theirs_html = their_html.read_bytes()
        with their_csv.open(newline="") as f:
            theirs = list(csv.reader(f))
    ours_html = Path(our_html).read_bytes()
    if ours_html != theirs_html:
        at = next((i for i, (a, b) in enumerate(zip(ours_html, theirs_html)) if a != b), None)
        at = min(len(ours_html), len(theirs_html)) if at is None else at
        errors.append(
            f"html: differs at byte {at} of {len(theirs_html)}: ours {ours_html[at - 60:at + 60]!r}, "
            f"guidellm {theirs_html[at - 60:at + 60]!r}"
        )
    with open(our_csv, newline="") as f:
        ours = list(csv.reader(f))
    if Path(our_csv).read_bytes().count(b"\r\n") != len(ours):
        errors.append("csv: rows do not end in \\r\\n as Python's csv writer ends them")
    if len(ours) != len(theirs) or any(len(a) != len(b) for a, b in zip(ours, theirs)):
        errors.append(f"csv: shape {[len(r) for r in ours]}, guidellm {[len(r) for r in theirs]}")
    cells = 0
    config_type = type(report.config)
    for i, (mine, their) in enumerate(zip(ours, theirs)):
        for j, (a, b) in enumerate(zip(mine, their)):
            cells += 1
            header = tuple(theirs[k][j] for k in range(min(3, len(theirs))))
            if i >= 3 and header[:2] == ("Runtime Info", "Arguments"):
                a = config_type.model_validate_json(a).model_dump_json()
            if a != b:
                errors.append(f"csv row {i} {header}: ours {a[:120]!r}, guidellm {b[:120]!r}")
    print(json.dumps({
        "benchmarks": len(report.benchmarks),
        "csv_rows": len(ours),
        "csv_cells": cells,
        "html_bytes": len(ours_html),
        "errors": errors[:20],
        "error_count": len(errors),
    }))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
