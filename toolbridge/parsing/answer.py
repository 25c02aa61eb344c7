"""Complete model text -> (content, calls): the stream parser fed the whole text at once."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..dialects import Dialect
from ..events import CallEnd, Content, Event, Reasoning, ToolCall, new_call_id
from .stream import StreamParser
from ..tools import ToolChoice


@dataclass
class ParseResult:
    content: str | None  # None when the answer holds no content (only calls, or nothing)
    calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None  # the thinking before the answer, if any


def collect(events: Iterable[Event]) -> ParseResult:
    """Fold parser events into a result (what a client does with a stream)."""
    text: list[str] = []
    thought: list[str] = []
    calls: list[ToolCall] = []
    for e in events:
        if type(e) is Content:
            text.append(e.text)
        elif type(e) is CallEnd:
            calls.append(e.call)
        elif type(e) is Reasoning:
            thought.append(e.text)
    return ParseResult("".join(text) or None, calls, "".join(thought) or None)


def parse(text: str, tools: Sequence[Any], *, choice: ToolChoice | None = None,
          max_calls: int | None = None, id_factory: Callable[[], str] = new_call_id,
          dialects: Iterable[Dialect] | None = None, end_after_calls: bool = True) -> ParseResult:
    """Parse a finished answer: content with no markers in it, and the calls that name a declared tool."""
    p = StreamParser(tools, choice=choice, max_calls=max_calls, id_factory=id_factory, dialects=dialects,
                     end_after_calls=end_after_calls)
    return collect(p.feed(text) + p.finish())


class TextOnly:
    """A text answer read by the stream parser, its content alone: a model answering with tools in
    play but none to call (tool_choice none) may still write call or history markup, which is not
    shown (the same feed/finish/whole as markers.TurnCut, which cuts at turn markers only)."""

    __slots__ = ("parser",)

    def __init__(self, parser: StreamParser):
        self.parser = parser

    def feed(self, text: str) -> str:
        return "".join(e.text for e in self.parser.feed(text) if type(e) is Content)

    def finish(self) -> str:
        return "".join(e.text for e in self.parser.finish() if type(e) is Content)

    def whole(self, text: str) -> str:
        return self.feed(text) + self.finish()
