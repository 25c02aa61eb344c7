"""Parser events as OpenAI chat-completion stream deltas, the same for both engines.

Content is joined; per call, the first fragment carries its index, id, type and name (sent
once), later ones only argument text, so a client's concatenation of a call's fragments is
the final arguments string.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .events import CallArgs, CallStart, Content, Event, ToolCall


def delta(events: Iterable[Event]) -> dict | None:
    """One delta (`{"content": ..., "tool_calls": [...]}`) for these events, or None when
    they carry nothing a client sees (a call's end only)."""
    content: list[str] = []
    calls: dict[int, dict] = {}
    for e in events:
        t = type(e)
        if t is Content:
            content.append(e.text)
        elif t is CallStart:
            calls[e.index] = {"index": e.index, "id": e.id, "type": "function",
                              "function": {"name": e.name, "arguments": ""}}
        elif t is CallArgs:
            tc = calls.get(e.index)
            if tc is None:
                calls[e.index] = {"index": e.index, "function": {"arguments": e.text}}
            else:
                tc["function"]["arguments"] += e.text
    if not content and not calls:
        return None
    out: dict = {}
    if content:
        out["content"] = "".join(content)
    if calls:
        out["tool_calls"] = list(calls.values())
    return out


def message(content: str | None, calls: Sequence[ToolCall]) -> dict:
    """A whole answer as an OpenAI assistant message: `content` null when the answer is only
    calls, "" when it is nothing at all."""
    msg: dict = {"role": "assistant", "content": content if content or calls else ""}
    if calls:
        msg["tool_calls"] = [c.to_openai() for c in calls]
    return msg
