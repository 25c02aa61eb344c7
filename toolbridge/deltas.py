"""Parser events as OpenAI chat-completion stream deltas, the same for both engines.

Content is joined; per call, the first fragment carries its index, id, type and name (sent
once), later ones only argument text, so a client's concatenation of a call's fragments is
the final arguments string. Thinking goes in the engine's own field beside the content
(`reasoning_content`, llama-server's and llama-cpp-python's; vLLM's is `reasoning`), never in it.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .events import CallArgs, CallStart, Content, Event, Reasoning, ToolCall

REASONING_FIELD = "reasoning_content"


def delta(events: Iterable[Event], reasoning_field: str = REASONING_FIELD) -> dict | None:
    """One delta (`{"content": ..., "tool_calls": [...]}`, thinking under `reasoning_field`) for
    these events, or None when they carry nothing a client sees (a call's end only)."""
    content: list[str] = []
    thought: list[str] = []
    calls: dict[int, dict] = {}
    for e in events:
        t = type(e)
        if t is Content:
            content.append(e.text)
        elif t is Reasoning:
            thought.append(e.text)
        elif t is CallStart:
            calls[e.index] = {"index": e.index, "id": e.id, "type": "function",
                              "function": {"name": e.name, "arguments": ""}}
        elif t is CallArgs:
            tc = calls.get(e.index)
            if tc is None:
                calls[e.index] = {"index": e.index, "function": {"arguments": e.text}}
            else:
                tc["function"]["arguments"] += e.text
    if not content and not calls and not thought:
        return None
    out: dict = {}
    if thought:
        out[reasoning_field] = "".join(thought)
    if content:
        out["content"] = "".join(content)
    if calls:
        out["tool_calls"] = list(calls.values())
    return out


def message(content: str | None, calls: Sequence[ToolCall], reasoning: str | None = None,
            reasoning_field: str = REASONING_FIELD) -> dict:
    """A whole answer as an OpenAI assistant message: `content` null when the answer is only
    calls, "" when it is nothing at all; its thinking, if any, under `reasoning_field`."""
    msg: dict = {"role": "assistant", "content": content if content or calls else ""}
    if reasoning:
        msg[reasoning_field] = reasoning
    if calls:
        msg["tool_calls"] = [c.to_openai() for c in calls]
    return msg
