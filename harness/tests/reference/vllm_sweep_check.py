#!/usr/bin/env python3
"""Runs `harness bench` under vLLM's own parameter sweep and plots what it saved.

Usage: vllm_sweep_check.py OUT_DIR -- SWEEP_SERVE_ARGS...
(prints one JSON line; exit 1 when vLLM's code refuses what the harness wrote)

1. `vllm bench sweep serve SWEEP_SERVE_ARGS -o OUT_DIR`: vLLM's sweep starts the
   `--serve-cmd` server, waits for its /health, runs the `--bench-cmd` (here
   `harness bench ...`) once per `--bench-params` combination with the flags it
   adds itself (`--request-rate ...`, `--percentile-metrics ttft,tpot,itl,e2el
   --save-result --result-dir D --result-filename run=N.json`), loads every saved
   result with its own reader and writes each combination's summary.json.
2. `vllm bench sweep plot OUT_DIR/<experiment>` with vLLM's defaults (x:
   total_token_throughput, y: median_ttft_ms): vLLM's plotter reads every
   summary.json and draws the figure.

vLLM is installed with --no-deps (see requirements.txt next to this file): the
wheel's package __init__ imports torch, which the sweep modules never call. The
check imports vllm's subpackages without running that __init__ and stands in an
empty torch module; everything it runs is vLLM's real code.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path


class _StandIn(types.ModuleType):
    """A module whose attributes are empty classes (capitalised names) or modules."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.lstrip("_")[:1].isupper():
            value = type(name, (), {})
        else:
            value = _StandIn(f"{self.__name__}.{name}")
            sys.modules[value.__name__] = value
        setattr(self, name, value)
        return value


def import_vllm_sweep():
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vllm is not installed (run scripts/test)")
    package = types.ModuleType("vllm")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["vllm"] = package
    sys.modules["torch"] = _StandIn("torch")
    from vllm.benchmarks.sweep import plot, serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return serve, plot, FlexibleArgumentParser


def main() -> int:
    out_dir = Path(sys.argv[1])
    sweep_args = sys.argv[sys.argv.index("--") + 1 :]
    serve, plot, Parser = import_vllm_sweep()

    parser = serve.SweepServeArgs.add_cli_args(Parser())
    args = parser.parse_args([*sweep_args, "-o", str(out_dir)])
    serve.main(args)

    experiments = [d for d in out_dir.iterdir() if d.is_dir()]
    if len(experiments) != 1:
        print(f"expected one experiment directory in {out_dir}, got {experiments}", file=sys.stderr)
        return 1
    experiment = experiments[0]
    parser = plot.SweepPlotArgs.add_cli_args(Parser())
    plot.main(parser.parse_args([str(experiment)]))

    summaries = sorted(experiment.rglob("summary.json"))
    runs = [run for path in summaries for run in json.loads(path.read_text())]
    figures = sorted(str(p.relative_to(experiment)) for p in experiment.rglob("*.png"))
    print(
        json.dumps(
            {
                "combinations": len(summaries),
                "runs": [
                    {
                        k: run.get(k)
                        for k in (
                            "request_rate",
                            "max_concurrency",
                            "completed",
                            "total_token_throughput",
                            "median_ttft_ms",
                            "p90_ttft_ms",
                            "run_number",
                        )
                    }
                    for run in runs
                ],
                "figures": figures,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
