"""Empty stand-ins for heavy packages that a reference check's peer code imports at
import time but never calls (torch, datasets, faker, ...): `install(("torch", ...))`
puts a finder first on sys.meta_path that answers every import under those
top-level names with a module whose attributes are empty classes (capitalised
names) or further such modules. Everything else a check uses is the peer's real
code. Shared by guidellm_check.py and guidellm_data_check.py (run as scripts, so
this folder is on sys.path)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class StandIn(types.ModuleType):
    """A module whose attributes are empty classes (capitalised names) or modules."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.lstrip("_")[:1].isupper():
            value = type(name, (), {"__class_getitem__": classmethod(lambda c, k: c)})
        else:
            value = StandIn(f"{self.__name__}.{name}")
            value.__path__ = []
        setattr(self, name, value)
        return value


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, heavy: tuple[str, ...]):
        self.heavy = heavy

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.heavy:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install(heavy: tuple[str, ...]) -> None:
    sys.meta_path.insert(0, StandInFinder(heavy))
