#!/usr/bin/env python3
"""Checks `harness benchmark --data kind=json_file|csv_file|text_file,path=P` with
guidellm's own data loading.

Usage: guidellm_data_check.py DATA REQUESTS.jsonl
  DATA: the `--data` value as given to both (e.g. `kind=csv_file,path=rows.csv`)
  REQUESTS.jsonl: the requests file `harness benchmark` wrote for it
Prints one JSON line (`rows`, `forced`); exit 1 on a mismatch.

guidellm 0.8.1 reads the value with its own `arg_string` and `DataArgs` model,
loads the file with its deserializer (Hugging Face `datasets`, local files only:
offline), maps columns with its default `generative_column_mapper`, turns rows into
requests with its `generative` finalizer and its loader's row iterator
(`DatasetsIterator`, in file order), and builds each `/v1/completions` body with its
`TextCompletionsRequestHandler`. Every body's `prompt` must equal the harness's
line's `prompt`, its `max_tokens` the line's `output_tokens` (none: absent), and
`ignore_eos` must be set exactly when `max_tokens` comes from the data.

guidellm is installed with --no-deps (see requirements.txt next to this file);
empty stand-in modules take the place of torch and faker, which its loader and
synthetic modules import at import time and this path never calls. `datasets`,
`pandas` and `transformers` are the real packages.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import warnings

import standins  # this folder (the script's own, first on sys.path)

HEAVY = ("torch", "faker")

standins.install(HEAVY)
warnings.filterwarnings("ignore")
# Local files only, and no cache left behind in the user's home.
os.environ["HF_HUB_OFFLINE"] = "1"
CACHE = tempfile.mkdtemp(prefix="guidellm-data-check-")
atexit.register(shutil.rmtree, CACHE, ignore_errors=True)
os.environ["HF_DATASETS_CACHE"] = CACHE
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from guidellm.backends.openai.request_handlers import (  # noqa: E402
    TextCompletionsRequestHandler,
)
from guidellm.data.deserializers import DatasetDeserializerFactory  # noqa: E402
from guidellm.data.finalizers.generative import GenerativeRequestFinalizer  # noqa: E402
from guidellm.data.loaders.torch import DatasetsIterator  # noqa: E402
from guidellm.data.preprocessors.mappers import GenerativeColumnMapper  # noqa: E402
from guidellm.schemas.data import (  # noqa: E402
    DataArgs,
    GenerativeColumnMapperArgs,
    GenerativeRequestFinalizerArgs,
)
from guidellm.utils import arg_string  # noqa: E402


def guidellm_bodies(data: str) -> list[dict]:
    """The /v1/completions bodies guidellm sends for `--data DATA`, in order."""
    config = DataArgs.model_validate(arg_string.loads(data))
    dataset = DatasetDeserializerFactory.deserialize(
        config=config, processor_factory=None, random_seed=42
    )
    rows = DatasetsIterator(
        datasets=[dataset],
        data_samples=0,
        preprocessors=[GenerativeColumnMapper(GenerativeColumnMapperArgs())],
        finalizer=GenerativeRequestFinalizer(GenerativeRequestFinalizerArgs()),
    )
    handler = TextCompletionsRequestHandler()
    bodies = []
    for graph in rows.generator():
        nodes = list(graph.nodes.values())
        if len(nodes) != 1:
            raise SystemExit(f"a row became {len(nodes)} turns; the fixtures are single-turn")
        bodies.append(handler.format(nodes[0].request, model="m", stream=True).body)
    return bodies


def main() -> int:
    data, requests_path = sys.argv[1], sys.argv[2]
    bodies = guidellm_bodies(data)
    with open(requests_path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    problems = []
    if len(bodies) != len(lines):
        problems.append(f"guidellm yields {len(bodies)} requests, the harness wrote {len(lines)}")
    for k, (body, line) in enumerate(zip(bodies, lines)):
        if body.get("prompt") != line.get("prompt"):
            problems.append(f"row {k + 1}: prompt {body.get('prompt')!r} != {line.get('prompt')!r}")
        if body.get("max_tokens") != line.get("output_tokens"):
            problems.append(
                f"row {k + 1}: max_tokens {body.get('max_tokens')!r} != "
                f"output_tokens {line.get('output_tokens')!r}"
            )
        if body.get("ignore_eos", False) != ("output_tokens" in line):
            problems.append(f"row {k + 1}: ignore_eos {body.get('ignore_eos')!r}")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    forced = sum(1 for b in bodies if b.get("ignore_eos"))
    print(json.dumps({"rows": len(bodies), "forced": forced}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
