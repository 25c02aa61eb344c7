"""Complete model text -> (content, calls): the stream parser fed the whole text at once."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .dialects import Dialect
from .stream import CallEnd, Content, Event, StreamParser, ToolCall, new_call_id
from .tools import ToolChoice


@dataclass
class ParseResult:
    content: str | None  # None when the answer holds no content (only calls, or nothing)
    calls: list[ToolCall] = field(default_factory=list)

    def to_openai_message(self) -> dict:
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            msg["tool_calls"] = [c.to_openai() for c in self.calls]
        return msg


def collect(events: Iterable[Event]) -> ParseResult:
    """Fold parser events into a result (what a client does with a stream)."""
    text: list[str] = []
    calls: list[ToolCall] = []
    for e in events:
        if type(e) is Content:
            text.append(e.text)
        elif type(e) is CallEnd:
            calls.append(e.call)
    return ParseResult("".join(text) or None, calls)


def parse(text: str, tools: Sequence[Any], *, choice: ToolChoice | None = None,
          max_calls: int | None = None, id_factory: Callable[[], str] = new_call_id,
          dialects: Iterable[Dialect] | None = None) -> ParseResult:
    """Parse a finished answer: content with no markers in it, and the calls that name a declared tool."""
    p = StreamParser(tools, choice=choice, max_calls=max_calls, id_factory=id_factory, dialects=dialects)
    return collect(p.feed(text) + p.finish())
