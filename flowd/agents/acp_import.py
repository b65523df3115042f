"""The `acp` SDK's import, without pydantic reading the SDK's source back for docstrings.

`acp.schema` declares its ~270 pydantic models with `use_attribute_docstrings=True`: for each
class, pydantic finds the class's source through the import's frames and parses it, to make each
attribute's docstring its field's description. That is about a third of the SDK's import (0.2 s
of CPU of 0.6), and a run pays the import before its first agent turn, with every lane waiting
(docs/performance.md, "The SDK's import"). The descriptions feed only JSON Schema and help text,
which flowd never asks of the SDK's models; validation and serialization do not read them.

So the first import runs with pydantic's docstring extraction answering "none" (a function of
pydantic's internals, looked up by name: a pydantic without it imports the SDK as it is, only
slower; `tests/agents/test_acp_import.py` says when that happens). flowd's own models do not ask
for attribute docstrings, so one defined in another thread meanwhile is built the same.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK = threading.Lock()  # the preload thread and the first executor may both get here
_EXTRACTOR = ("pydantic._internal._fields", "extract_docstrings_from_cls")


def sdk() -> None:
    """Import `acp` and its schema once, the quick way; later calls return at once."""
    if "acp.schema" in sys.modules:
        return
    with _LOCK, _no_attribute_docstrings():
        importlib.import_module("acp")


def _none(cls: type[Any], use_inspect: bool = False) -> dict[str, str]:
    return {}


@contextmanager
def _no_attribute_docstrings() -> Iterator[None]:
    module = importlib.import_module(_EXTRACTOR[0])
    original = getattr(module, _EXTRACTOR[1], None)
    if original is None:
        yield
        return
    setattr(module, _EXTRACTOR[1], _none)
    try:
        yield
    finally:
        setattr(module, _EXTRACTOR[1], original)
