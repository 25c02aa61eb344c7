"""One call's arguments written as canonical JSON while the model is still writing them.

The writer is a sink for `lenient.LenientReader` events. It emits `json.dumps`-style text
(", " and ": " separators, no ASCII escaping) fragment by fragment, so the fragments a stream
sends concatenate to exactly the final arguments string. Where the tool's schema says a
position holds another type than the model wrote, scalars are coerced when that is safe:
"3" -> 3 for an integer, "true" -> true for a boolean, 3 -> "3" for a string, a case-only
mismatch of an enum member. Strings the schema wants as strings stream as they arrive.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ..jsondata import dumps as _dumps, json_escape as escape, loads
from ..lenient import parse_number
from ..schema import Schema

_INT_TEXT = re.compile(r"\s*[-+]?\d+\s*")


class ArgsWriter:
    """Sink that writes the arguments object through `emit`, coercing to `schema`."""

    __slots__ = ("schema", "emit", "frames", "streaming", "parts", "pending", "started")

    def __init__(self, schema: Schema | None, emit: Callable[[str], None]):
        self.schema = schema
        self.emit = emit
        self.frames: list[list] = []  # [is_object, schema node, count, key]
        self.streaming: bool | None = None  # None: not in a string
        self.parts: list[str] = []
        self.pending: tuple[str, Any] = ("", None)
        self.started = False  # the top-level object has begun

    def _slot(self) -> tuple[str, Any]:
        """The separator, key and schema node of the value about to be written."""
        if not self.frames:
            return "", self.schema.root if self.schema else None
        f = self.frames[-1]
        sep = ", " if f[2] else ""
        sch = self.schema
        if f[0]:
            node = sch.child(f[1], f[3]) if sch else None
            sep += _dumps(f[3] if f[3] is not None else "") + ": "
        else:
            node = sch.item(f[1], f[2]) if sch else None
        f[2] += 1
        return sep, node

    def begin_object(self) -> None:
        self.started = True
        sep, node = self._slot()
        self.frames.append([True, node, 0, None])
        self.emit(sep + "{")

    def end_object(self) -> None:
        self.frames.pop()
        self.emit("}")

    def begin_array(self) -> None:
        sep, node = self._slot()
        self.frames.append([False, node, 0, None])
        self.emit(sep + "[")

    def end_array(self) -> None:
        self.frames.pop()
        self.emit("]")

    def key(self, name: str) -> None:
        self.frames[-1][3] = name

    def begin_string(self) -> None:
        sep, node = self._slot()
        types = self.schema.types(node) if self.schema else None
        if (types is None or "string" in types) and not (self.schema and self.schema.enum(node)):
            self.streaming = True
            self.emit(sep + '"')
        else:
            self.streaming = False
            self.parts = []
            self.pending = (sep, node)

    def string_chunk(self, text: str) -> None:
        if self.streaming:
            self.emit(escape(text))
        else:
            self.parts.append(text)

    def end_string(self) -> None:
        if self.streaming:
            self.emit('"')
        else:
            sep, node = self.pending
            self.emit(sep + _dumps(coerce(self.schema, node, "".join(self.parts))))
        self.streaming = None

    def scalar(self, value: Any) -> None:
        sep, node = self._slot()
        self.emit(sep + _dumps(coerce(self.schema, node, value)))

    def value(self, value: Any) -> None:
        """Write a whole Python value at the current position (used to wrap a bare argument)."""
        if isinstance(value, dict):
            self.begin_object()
            for k, v in value.items():
                self.key(str(k))
                self.value(v)
            self.end_object()
        elif isinstance(value, list):
            self.begin_array()
            for v in value:
                self.value(v)
            self.end_array()
        elif isinstance(value, str):
            self.begin_string()
            self.string_chunk(value)
            self.end_string()
        else:
            self.scalar(value)

    def close(self) -> None:
        """Close whatever is open (the call ended before its arguments did)."""
        if self.streaming is not None:
            self.end_string()
        while self.frames:
            if self.frames[-1][0]:
                self.end_object()
            else:
                self.end_array()


def coerce(schema: Schema | None, node: Any, value: Any) -> Any:
    """`value` converted to what the schema allows at `node`, where that conversion is safe."""
    if schema is None:
        return value
    types = schema.types(node)
    enum = schema.enum(node)
    if isinstance(value, str) and enum and value not in enum:
        folded = [e for e in enum if isinstance(e, str) and e.casefold() == value.strip().casefold()]
        if len(folded) == 1:
            return folded[0]
    if types is None:
        return value
    if isinstance(value, str):
        if "string" in types:
            return value
        text = value.strip()
        if "integer" in types and _INT_TEXT.fullmatch(text):
            return int(text)
        if "integer" in types or "number" in types:
            num = parse_number(text)
            if isinstance(num, float) and num.is_integer() and "integer" in types:
                return int(num)
            if num is not None and "number" in types:
                return num
        low = text.lower()
        if "boolean" in types and low in ("true", "false"):
            return low == "true"
        if "null" in types and low in ("null", "none", ""):
            return None
        if ("array" in types and text.startswith("[")) or ("object" in types and text.startswith("{")):
            parsed, ok = loads(text)
            if ok:
                return parsed
        return value
    if isinstance(value, bool):
        if "boolean" not in types and "string" in types:
            return "true" if value else "false"
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and value.is_integer() and "integer" in types and "number" not in types:
            return int(value)
        if "integer" not in types and "number" not in types and "string" in types:
            return _dumps(value)
    return value
