"""The markers of a set of dialects, in one table the scanner (stream.py) looks them up in.

A marker opens a call (`<tool_call>`, `TOOL_CALL:`, `Action:`, a code fence), is a label
dropped from content (`Thought:`), or starts a tool result the model should not write
(`<tool_response>`: the answer ends there). The table is built once per set of dialects.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from .dialects import DIALECTS, Dialect
from .lenient import WS

# marker kinds
K_OPEN, K_LABEL, K_END = range(3)


@dataclass(frozen=True)
class Marker:
    text: str
    kind: int
    dialect: Dialect
    line_start: bool


class MarkerTable:
    """The marker table for a set of dialects, built once per set."""

    def __init__(self, dialects: Iterable[Dialect]):
        found: dict[tuple[str, int], Marker] = {}
        self.bare: Dialect | None = None  # the dialect whose calls may start with a bare { or [
        for d in dialects:
            if d.open:
                found.setdefault((d.open, K_OPEN), Marker(d.open, K_OPEN, d, d.line_start))
            for label in d.labels:
                found.setdefault((label, K_LABEL), Marker(label, K_LABEL, d, True))
            if d.result_marker:
                found.setdefault((d.result_marker, K_END), Marker(d.result_marker, K_END, d, d.line_start))
            if d.bare and self.bare is None:
                self.bare = d
        self.by_first: dict[str, list[Marker]] = {}
        for m in found.values():
            self.by_first.setdefault(m.text[0], []).append(m)
        chars = set(self.by_first) | set(WS) | ({"{", "["} if self.bare else set())
        self.trigger = re.compile("[" + re.escape("".join(sorted(chars))) + "]")


_TABLES: dict[tuple[str, ...], MarkerTable] = {}


def markers(dialects: Iterable[Dialect] | None) -> MarkerTable:
    ds = tuple(dialects) if dialects is not None else tuple(DIALECTS.values())
    key = tuple(d.name for d in ds)
    if key not in _TABLES:
        _TABLES[key] = MarkerTable(ds)
    return _TABLES[key]


class _Wait:
    pass


WAIT = _Wait()  # a longer marker may still come: wait for more text
