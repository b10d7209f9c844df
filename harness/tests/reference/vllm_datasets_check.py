#!/usr/bin/env python3
"""Builds vLLM's benchmark datasets with vLLM 0.34's own dataset code.

Usage: vllm_datasets_check.py SPECS_JSON   (prints one JSON line: a list, one
result per spec)

SPECS_JSON is a list of specs, each naming a dataset and its arguments as `vllm bench serve` passes them
(`get_samples` in vllm/benchmarks/datasets/datasets.py):
  {"dataset": "random", "tokenizer_dir": DIR, "seed": 0, "num_prompts": 8,
   "input_len": 64, "output_len": 16, "prefix_len": 0, "range_ratio": "0.0"}
(`range_ratio` as vLLM's --random-range-ratio text: a float or a JSON dict),
  {"dataset": "burstgpt", "tokenizer_dir": DIR, "seed": 0, "num_prompts": 8,
   "dataset_path": CSV}
  {"dataset": "prefix_repetition", "tokenizer_dir": DIR, "seed": 0,
   "num_prompts": 8, "prefix_len": 16, "suffix_len": 8, "num_prefixes": 2,
   "output_len": 12, "disable_shuffle": false}
(vLLM's --prefix-repetition-* flags and --disable-shuffle).
The tokenizer is transformers' `AutoTokenizer.from_pretrained(DIR)` on a local
directory holding tokenizer.json (what vLLM's `get_tokenizer` loads; offline).
It prints, per request, the token IDs of the prompt vLLM would send
(`tokenizer.encode(prompt, add_special_tokens=False)`), `prompt_len` and
`expected_output_len`, so the harness's panel can be compared token for token.

vLLM is installed with --no-deps (see requirements.txt next to this file): its
dataset module imports vLLM internals (multimodal, LoRA, torch) and image and
audio packages that text datasets never call. Stand-in modules are installed for
exactly those before the module is imported; the dataset classes, their RNG use
and the decode/re-encode loop are vLLM's real code.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import sys
import types
import warnings
from pathlib import Path

# vLLM modules the dataset module imports whose code is not the datasets' own.
REAL_VLLM = ("vllm.benchmarks.datasets",)
HEAVY = ("torch", "PIL", "pybase64", "soundfile", "datasets", "librosa", "cv2")


class _AnythingType(type):
    """Stand-in classes: any attribute is another stand-in class."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnythingType(name, (cls,), {})


class _Anything(metaclass=_AnythingType):
    def __init__(self, *args, **kwargs):
        pass

    def __class_getitem__(cls, key):
        return cls

    def __or__(self, other):
        return self

    def __ror__(self, other):
        return self


class _StandIn(types.ModuleType):
    """A module whose attributes are inert classes (capitalised) or modules."""

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.lstrip("_")[:1].isupper():
            value = type(name, (_Anything,), {})
        else:
            value = _StandIn(f"{self.__name__}.{name}")
            value.__path__ = []
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in HEAVY:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if top == "vllm" and name != "vllm" and not name.startswith(REAL_VLLM):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def import_vllm_datasets():
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vllm is not installed (run scripts/test)")
    root = list(spec.submodule_search_locations)
    package = types.ModuleType("vllm")
    package.__path__ = root
    sys.modules["vllm"] = package
    for sub in ("benchmarks", "utils"):
        m = types.ModuleType(f"vllm.{sub}")
        m.__path__ = [str(Path(root[0]) / sub)]
        sys.modules[f"vllm.{sub}"] = m
    sys.meta_path.insert(0, _StandInFinder())
    warnings.filterwarnings("ignore")
    from vllm.benchmarks.datasets import datasets

    return datasets


def build(datasets, spec):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer_dir"])
    name = spec["dataset"]
    if name == "random":
        requests = datasets.RandomDataset(random_seed=spec["seed"]).sample(
            tokenizer=tokenizer,
            num_requests=spec["num_prompts"],
            prefix_len=spec["prefix_len"],
            input_len=spec["input_len"],
            output_len=spec["output_len"],
            range_ratio=datasets._parse_range_ratio(spec["range_ratio"]),
        )
    elif name == "burstgpt":
        requests = datasets.BurstGPTDataset(
            random_seed=spec["seed"],
            dataset_path=spec["dataset_path"],
            disable_shuffle=False,
        ).sample(tokenizer=tokenizer, num_requests=spec["num_prompts"])
    elif name == "prefix_repetition":
        requests = datasets.PrefixRepetitionRandomDataset(
            random_seed=spec["seed"],
            dataset_path=None,
            disable_shuffle=spec["disable_shuffle"],
        ).sample(
            tokenizer=tokenizer,
            num_requests=spec["num_prompts"],
            prefix_len=spec["prefix_len"],
            suffix_len=spec["suffix_len"],
            num_prefixes=spec["num_prefixes"],
            output_len=spec["output_len"],
        )
    else:
        sys.exit(f"unknown dataset {name}")
    return {
        "vocab_size": tokenizer.vocab_size,
        "num_special_tokens_to_add": tokenizer.num_special_tokens_to_add(),
        "requests": [
            {
                "tokens": tokenizer.encode(r.prompt, add_special_tokens=False),
                "prompt_len": r.prompt_len,
                "expected_output_len": r.expected_output_len,
            }
            for r in requests
        ],
    }


def main() -> int:
    specs = json.loads(sys.argv[1])
    datasets = import_vllm_datasets()
    print(json.dumps([build(datasets, spec) for spec in specs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
