#!/usr/bin/env python3
"""Parses the engine's /metrics in both formats with prometheus_client's own parsers.

Usage: metrics_check.py PROMETHEUS_TEXT OPENMETRICS_TEXT
Prints one JSON object per format: {family name: [type, {sample name + labels: value}]},
the 0.0.4 text through `prometheus_client.parser.text_string_to_metric_families`
(what a client that does not ask for OpenMetrics parses with) and the OpenMetrics
text through `prometheus_client.openmetrics.parser.text_string_to_metric_families`.
A parse error exits 1 with the parser's message.
"""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus


def families(parse, text):
    out = {}
    for f in parse(text):
        samples = {}
        for s in f.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}"] = s.value
        out[f.name] = [f.type, samples]
    return out


def main():
    with open(sys.argv[1]) as f:
        prometheus = f.read()
    with open(sys.argv[2]) as f:
        openmetrics = f.read()
    print(json.dumps({"prometheus": families(parse_prometheus, prometheus), "openmetrics": families(parse_openmetrics, openmetrics)}))


if __name__ == "__main__":
    main()
