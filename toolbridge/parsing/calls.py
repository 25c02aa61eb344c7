"""The calls of one answer: which names count, ids and indexes, the call limit, and each
call's arguments from its first fragment to its validation.

A `Slot` is one call being read. Its name may come after its arguments (`{"arguments": ...,
"name": ...}`), so argument events are kept until the name decides whether the call counts;
then they are written, and later ones go straight to the call's `ArgsWriter`.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .arguments import ArgsWriter
from ..events import CallArgs, CallEnd, CallStart, Event, ToolCall
from ..tools import Tool

PREFIXES = ("functions.", "function.", "tools.")  # namespaces models put before a tool's name


class CallBook:
    """Starts and ends the calls of one answer, appending their events to `events`.

    allowed: the names a call may have (a named tool_choice allows one). max_calls: calls over
    the limit are read and dropped. on_start: told when a call starts (the parser drops the
    whitespace before it). A call with the same name and arguments as an earlier one of the answer
    is the last: the model has started repeating itself, and the calls after it are read and
    dropped like those over the limit (it was streamed before it could be known for a repeat, so
    it stays).
    """

    def __init__(self, tools: Sequence[Tool], allowed: set[str] | None, max_calls: int | None,
                 id_factory: Callable[[], str], events: list[Event], on_start: Callable[[], None]):
        self.tools = {t.name: t for t in tools}
        self.allowed = set(self.tools) if allowed is None else allowed
        self.max_calls = max_calls
        self.id_factory = id_factory
        self.events = events
        self.on_start = on_start
        self.started = 0
        self.ended: set[tuple[str, str]] = set()  # (name, arguments) of each call ended
        self.repeated = False  # a call ended that repeats an earlier one

    def resolve(self, name: str) -> Tool | None:
        """The declared tool a model's spelling of a name means, if exactly one."""
        name = name.strip().strip("`'\"*").strip()
        if name.endswith("()"):
            name = name[:-2]
        if name in self.allowed:
            return self.tools[name]
        for prefix in PREFIXES:
            if name.startswith(prefix) and name[len(prefix):] in self.allowed:
                return self.tools[name[len(prefix):]]
        folded = [a for a in self.allowed if a.casefold() == name.casefold()]
        return self.tools[folded[0]] if len(folded) == 1 else None

    def start(self, slot: "Slot") -> bool:
        """Start the call in `slot` (its tool is known). False when it is dropped (over the limit,
        or after a repeat); the whitespace before it is not content either way."""
        self.on_start()
        if self.repeated or (self.max_calls is not None and self.started >= self.max_calls):
            slot.dropped = True
            return False
        index = self.started
        self.started += 1
        slot.index = index
        slot.id = self.id_factory()
        self.events.append(CallStart(index, slot.id, slot.tool.name))
        parts = slot.parts
        events = self.events

        def emit(text: str) -> None:
            parts.append(text)
            events.append(CallArgs(index, text))

        slot.writer = ArgsWriter(slot.tool.schema, emit)
        slot.begin()
        return True

    def end(self, slot: "Slot", complete: bool) -> None:
        call = (slot.tool.name, "".join(slot.parts))
        self.repeated = self.repeated or call in self.ended
        self.ended.add(call)
        self.events.append(CallEnd(slot.index, ToolCall(slot.id, *call, complete)))


class Slot:
    """One call being read."""

    __slots__ = ("book", "tool", "id", "index", "writer", "parts", "buffer", "args_started", "committed",
                 "dropped", "ended")

    def __init__(self, book: CallBook, tool: Tool | None = None):
        self.book = book
        self.tool = tool
        self.id = ""
        self.index = -1
        self.writer: ArgsWriter | None = None
        self.parts: list[str] = []
        self.buffer: list[tuple[Callable[..., None], tuple]] = []
        self.args_started = self.committed = self.dropped = self.ended = False

    def ev(self, write: Callable[..., None], *args: Any) -> None:
        """An arguments event (an ArgsWriter method and its arguments): written once the call
        has started, kept until then."""
        if self.dropped:
            return
        if self.committed:
            write(self.writer, *args)
        else:
            self.buffer.append((write, args))

    def begin(self) -> None:
        self.committed = True
        for write, args in self.buffer:
            write(self.writer, *args)
        self.buffer = []

    def wrap(self, value: Any) -> None:
        """A bare (non-object) arguments value: kept only when the tool has one parameter."""
        self.ev(_wrap, value)

    def end(self, complete: bool) -> None:
        if self.ended or self.dropped or not self.committed:
            self.ended = True
            return
        self.ended = True
        w = self.writer
        w.close()
        if not w.started:
            w.begin_object()
            w.end_object()
        self.book.end(self, complete)


def _wrap(writer: ArgsWriter, value: Any) -> None:
    props = writer.schema.root.get("properties") if writer.schema else None
    if isinstance(props, dict) and len(props) == 1:
        writer.begin_object()
        writer.key(next(iter(props)))
        writer.value(value)
        writer.end_object()
