#!/usr/bin/env python3
"""Runs vLLM's own `vllm bench serve` code (vllm/benchmarks/serve.py) with the given
arguments, from a vLLM wheel installed with --no-deps (scripts/bench-clients).

The wheel's package __init__ imports torch, which the benchmark never calls: as
harness/tests/reference/vllm_sweep_check.py does, this imports vllm's subpackages
without running that __init__ and stands in an empty torch module (with a module
spec and no version, so that transformers judges torch absent). Everything that
sends, times and summarizes requests is vLLM's real code.
"""

import importlib.machinery
import importlib.util
import sys
import types


class _StandIn(types.ModuleType):
    """A module whose attributes are empty classes (capitalised names) or modules."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.lstrip("_")[:1].isupper():
            value = type(name, (), {})
        else:
            value = _StandIn(f"{self.__name__}.{name}")
            value.__path__ = []
            sys.modules[value.__name__] = value
        setattr(self, name, value)
        return value

    def __call__(self, *args, **kwargs):
        """A stand-in function: true, and a stand-in itself."""
        return _StandIn(f"{self.__name__}()")


# Modules served by stand-ins: torch, and vLLM's modules that run torch code at
# import (dtype tables, LoRA, model executor, distributed state, engine
# configuration, multimodal inputs); the benchmark's
# own code (datasets, request functions, metrics) calls none of it.
STAND_INS = (
    "torch",
    "vllm.utils.torch_utils",
    "vllm.lora",
    "vllm.model_executor",
    "vllm.distributed",
    "vllm.config",
    "vllm.multimodal",
)


class _StandInFinder:
    """Serves every import under `STAND_INS` with a stand-in."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if any(name == p or name.startswith(p + ".") for p in STAND_INS):
            return importlib.machinery.ModuleSpec(name, _StandInFinder, is_package=True)
        return None

    @staticmethod
    def create_module(spec):
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    @staticmethod
    def exec_module(module):
        pass


def main():
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("vllm is not installed in this environment")
    package = types.ModuleType("vllm")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["vllm"] = package
    if importlib.util.find_spec("torch") is None:
        torch = _StandIn("torch")
        # With a spec but no version and no file, transformers judges torch absent.
        torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
        torch.__path__ = []
        sys.modules["torch"] = torch
        sys.meta_path.insert(0, _StandInFinder)
        # Runs torch code at import (dtype tables); the benchmark calls none of it.
        # Modules that run torch code at import (dtype tables, LoRA and model
        # configuration); the benchmark calls none of it.
        for name in ("vllm.utils.torch_utils", "vllm.lora.utils"):
            sys.modules[name] = _StandIn(name)
    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(sys.argv[1:])
    serve.main(args)


if __name__ == "__main__":
    main()
