#!/usr/bin/env python3
"""Checks a `harness export --format guidellm` report with guidellm's own code.

Usage: guidellm_check.py REPORT.json  (prints one JSON line; exit 1 on a mismatch)

1. guidellm's report model loads it (`GenerativeBenchmarksReport.load_file`).
2. Nothing was ignored or coerced: every value the export wrote equals the value at
   the same place in the model's `model_dump(mode="json")`, and no model that
   accepts extra keys kept one (pydantic ignores or keeps unknown keys, so a
   misspelt key would otherwise pass silently).
3. Every metric equals what guidellm computes itself: `GenerativeMetrics.compile`
   is run on the report's own per-request `GenerativeRequestStats` (timings from
   our raw records) and its output compared with the exported `metrics`, number by
   number (relative tolerance 1e-9). Metrics the export leaves null are listed in
   NOT_EXPORTED and must be null in the export.

guidellm is installed with --no-deps (see requirements.txt next to this file): its
declared dependencies include torch, transformers, datasets, pandas and faker,
which its data-loading modules import at import time but the report model never
calls. Empty stand-in modules are installed for exactly those packages before
guidellm is imported; everything the check uses is guidellm's real code.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

import standins  # this folder (the script's own, first on sys.path)

HEAVY = ("torch", "transformers", "datasets", "pandas", "faker")

standins.install(HEAVY)
warnings.filterwarnings("ignore")

from types import SimpleNamespace  # noqa: E402

from guidellm.benchmark.schemas import GenerativeBenchmarksReport  # noqa: E402
from guidellm.benchmark.schemas.metrics import GenerativeMetrics  # noqa: E402
from importlib.metadata import version as _dist_version  # noqa: E402

GUIDELLM_VERSION = _dist_version("guidellm")

# Metrics the export leaves null (see harness/src/export/guidellm.rs).
NOT_EXPORTED = {
    "request_dispatch_delay",
    "request_scheduled_latency",
    "turn_predecessor_delay",
    "turn_scheduling_delay",
    "text",
    "image",
    "video",
    "audio",
    "tool_call",
}


def same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def compare(written, loaded, path, errors, what):
    """Every leaf of `written` must equal the same leaf of `loaded`."""
    if isinstance(written, dict):
        if not isinstance(loaded, dict):
            errors.append(f"{what} {path}: wrote an object, got {loaded!r:.80}")
            return
        for key, value in written.items():
            if key not in loaded:
                errors.append(f"{what} {path}.{key}: not in guidellm's model (ignored key)")
            else:
                compare(value, loaded[key], f"{path}.{key}", errors, what)
    elif isinstance(written, list):
        if not isinstance(loaded, list) or len(loaded) != len(written):
            errors.append(f"{what} {path}: list of {len(written)}, got {loaded!r:.80}")
            return
        for i, (w, l) in enumerate(zip(written, loaded)):
            compare(w, l, f"{path}[{i}]", errors, what)
    elif not same(written, loaded):
        errors.append(f"{what} {path}: exported {written!r}, guidellm {loaded!r}")


def extras(model, path, errors):
    """Keys a model that allows extras kept without knowing them (misspelt keys)."""
    from pydantic import BaseModel

    if isinstance(model, BaseModel):
        for key in (model.model_extra or {}):
            errors.append(f"extra {path}.{key}: not a field of guidellm's {type(model).__name__}")
        for name in type(model).model_fields:
            extras(getattr(model, name), f"{path}.{name}", errors)
    elif isinstance(model, (list, tuple)):
        for i, item in enumerate(model):
            extras(item, f"{path}[{i}]", errors)


def compiled_metrics(bench) -> dict:
    """guidellm's own GenerativeMetrics.compile over the benchmark's requests."""

    def group(stats):
        return SimpleNamespace(
            get_within_range=lambda start, end, start_func=lambda s: s.request_start_time,
            end_func=lambda s: s.request_end_time, closed=False: [
                s
                for s in stats
                if (e := end_func(s)) is not None
                and e >= start
                and (start_func(s) if start_func(s) is not None else e) <= end
            ]
        )

    sm = bench.scheduler_metrics
    accumulator = SimpleNamespace(
        timings=SimpleNamespace(finalized_measure_start=sm.measure_start_time, finalized_measure_end=sm.measure_end_time),
        completed=group(bench.requests.successful),
        incomplete=group(bench.requests.incomplete),
        errored=group(bench.requests.errored),
        # No intervals and no schedule-relative delays (NOT_EXPORTED); the
        # benchmark's own goodput targets.
        config=SimpleNamespace(
            confidence=None, slo=bench.config.slo, strategy=SimpleNamespace(defines_arrival_schedule=False)
        ),
    )
    return GenerativeMetrics.compile(accumulator).model_dump(mode="json")


def main() -> int:
    path = sys.argv[1]
    with open(path) as f:
        written = json.load(f)
    report = GenerativeBenchmarksReport.load_file(path)
    errors: list[str] = []
    compare(written, report.model_dump(mode="json"), "", errors, "round trip")
    extras(report, "", errors)
    compared = 0
    for i, bench in enumerate(report.benchmarks):
        mine = written["benchmarks"][i]["metrics"]
        theirs = compiled_metrics(bench)
        for key, value in mine.items():
            if key in NOT_EXPORTED:
                if value not in (None, {}) and not _all_null(value):
                    errors.append(f"benchmark {i} metrics.{key}: listed as not exported but written")
                continue
            compare(value, theirs.get(key), f"benchmarks[{i}].metrics.{key}", errors, "compile")
            compared += 1
        missing = set(theirs) - set(mine)
        if missing:
            errors.append(f"benchmark {i}: metrics missing from the export: {sorted(missing)}")
        # guidellm's computed fields work on what we wrote.
        if not bench.duration >= 0:
            errors.append(f"benchmark {i}: negative duration {bench.duration}")
    print(json.dumps({
        "guidellm_version": GUIDELLM_VERSION,
        "benchmarks": len(report.benchmarks),
        "metrics_compared": compared,
        "requests": sum(len(b.requests.successful) + len(b.requests.errored) for b in report.benchmarks),
        "errors": errors[:40],
        "error_count": len(errors),
    }))
    return 1 if errors else 0


def _all_null(value) -> bool:
    if isinstance(value, dict):
        return all(_all_null(v) for v in value.values())
    return value is None


if __name__ == "__main__":
    sys.exit(main())
