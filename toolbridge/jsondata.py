"""Plain data from engine objects, and JSON text.

Both engines hand requests over as pydantic models (vLLM, llama-cpp-python) or dicts; the
core works on plain dicts and lists. JSON text is written one way everywhere: `json.dumps`
separators, no ASCII escaping, so a streamed arguments string equals the final one and a
literal in a grammar matches what the parser emits. Small values a model wrote are read with
the lenient reader (`loads`).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from .lenient import LenientReader

dumps = json.JSONEncoder(ensure_ascii=False).encode


_SCALARS = (str, int, float, bool, type(None))


def plain_data(x: Any) -> Any:
    """Dicts, lists and scalars from pydantic models and other mappings (deep). A pydantic
    model dumps itself (deep, in Rust); dicts and lists are walked for models inside them."""
    if isinstance(x, _SCALARS):
        return x
    if hasattr(x, "model_dump"):
        return x.model_dump(exclude_none=True)
    if isinstance(x, dict) and all(isinstance(v, _SCALARS) for v in x.values()):
        return x
    if isinstance(x, Mapping):
        return {k: plain_data(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain_data(v) for v in x]
    return x


def json_string(text: str) -> str:
    """`text` as a quoted JSON string; also a valid GBNF string literal."""
    return dumps(text)


def json_escape(text: str) -> str:
    """JSON string escaping of a piece of a string (no quotes)."""
    return dumps(text)[1:-1]


class ValueBuilder:
    """A sink that builds the Python value (for small values: repairs, coercions, tests)."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.keys: list[Any] = []
        self.value: Any = None
        self.parts: list[str] = []

    def _put(self, v: Any) -> None:
        if not self.stack:
            self.value = v
        elif isinstance(self.stack[-1], dict):
            self.stack[-1][self.keys[-1]] = v
        else:
            self.stack[-1].append(v)

    def begin_object(self) -> None:
        d: dict = {}
        self._put(d)
        self.stack.append(d)
        self.keys.append(None)

    def end_object(self) -> None:
        self.stack.pop()
        self.keys.pop()

    def begin_array(self) -> None:
        a: list = []
        self._put(a)
        self.stack.append(a)
        self.keys.append(None)

    end_array = end_object

    def key(self, name: str) -> None:
        self.keys[-1] = name

    def begin_string(self) -> None:
        self.parts = []

    def string_chunk(self, text: str) -> None:
        self.parts.append(text)

    def end_string(self) -> None:
        self._put("".join(self.parts))

    def scalar(self, value: Any) -> None:
        self._put(value)


def loads(text: str) -> tuple[Any, bool]:
    """Leniently read one JSON value at the start of `text`: (value, ok)."""
    builder = ValueBuilder()
    reader = LenientReader(builder)
    reader.feed(text)
    reader.finish()
    return builder.value, reader.started and not reader.failed
