"""What the parser reports: thinking, content, and for each call its start, argument fragments and end.

A server turns these into OpenAI deltas (toolbridge.deltas); `parse` folds them into one
message. The fragments of a call concatenate to exactly its final arguments string.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass


def new_call_id() -> str:
    """An OpenAI-style tool call id."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # canonical JSON text of an object
    complete: bool = True  # False: the text ended inside the call and it was closed by repair

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class Content:
    text: str


@dataclass(slots=True)
class Reasoning:
    text: str  # the thinking before the answer (toolbridge.parsing.thinking): never content


@dataclass(slots=True)
class CallStart:
    index: int
    id: str
    name: str


@dataclass(slots=True)
class CallArgs:
    index: int
    text: str


@dataclass(slots=True)
class CallEnd:
    index: int
    call: ToolCall


Event = Content | Reasoning | CallStart | CallArgs | CallEnd


def merge(events: list[Event]) -> list[Event]:
    """Adjacent content, and adjacent fragments of one call, joined (fewer, larger deltas)."""
    if len(events) < 2:
        return events
    merged: list[Event] = [events[0]]
    for e in events[1:]:
        last = merged[-1]
        if type(e) is Content and type(last) is Content:
            merged[-1] = Content(last.text + e.text)
        elif type(e) is Reasoning and type(last) is Reasoning:
            merged[-1] = Reasoning(last.text + e.text)
        elif type(e) is CallArgs and type(last) is CallArgs and e.index == last.index:
            merged[-1] = CallArgs(e.index, last.text + e.text)
        else:
            merged.append(e)
    return merged
