"""Finding the calls in one JSON body: a sink for `LenientReader` events.

A body is a call object (`{"name": ..., "arguments": {...}}`, in any key spelling of
dialects.NAME_KEYS / ARGS_KEYS), a list of them, an OpenAI-shaped `{"function": {...}}` or
`{"tool_calls": [...]}`, or (ReAct) the arguments of a call whose name came before. Each
call's arguments go to its `Slot`; everything else in the body is read and ignored.
"""
from __future__ import annotations

from typing import Any

from .arguments import ArgsWriter
from .calls import CallBook, Slot
from ..dialects import ARGS_KEYS, CALL_KEYS, NAME_KEYS
from ..lenient import LenientReader

# What the value starting now is, at the call-object level (`_place`).
NO_CALL = 1  # a value that cannot be (part of) a call
LIST, CALL, FUNCTION = 2, 3, 4  # containers: a list of calls, a call object, its "function" object
NAME, ARGS, ARGS_TEXT, OTHER = 5, 6, 7, 8  # subtrees: the name, the arguments (an object, or JSON in a string), other
NOT_IN_SUBTREE = 0


class CallObjectReader:
    """`args_slot` set: the body is the arguments of that call (ReAct).

    `bare`: no marker announced the JSON, so it is a call only if it looks like one: a
    declared name and an arguments key, and no other keys before them.
    """

    def __init__(self, book: CallBook, args_slot: Slot | None = None, bare: bool = False):
        self.book = book
        self.bare = bare
        self.reader: LenientReader | None = None
        self.frames: list[list] = []  # [place, slot, key] of the open containers
        self.args_slot = args_slot
        self.committed = False  # a call in this body counts: the body is no longer content
        self.failed = False  # the body is not a call
        self.checked = False
        self.sub = NOT_IN_SUBTREE
        self.sub_slot: Slot | None = None
        self.depth = 0
        self.name_parts: list[str] = []
        self.nested: LenientReader | None = None  # arguments given as a JSON string, read as JSON
        self.str_bare: list[str] | None = None
        self.open_slots: list[Slot] = []

    # -- outcomes -------------------------------------------------------------------------------
    def fail(self) -> None:
        self.failed = True
        self.reader.stop()

    def reject(self, slot: Slot) -> None:
        """A call object that does not count: the whole body is not a call if nothing else was."""
        if self.committed:
            slot.dropped = True
        else:
            self.fail()

    def abort(self) -> None:
        """End every call still open (its text ended or broke off)."""
        for slot in self.open_slots:
            slot.end(complete=False)
        self.open_slots = []

    # -- where a value lands ----------------------------------------------------------------------
    def _place(self, kind: str) -> tuple[int, Slot | None]:
        """What the value starting now (`kind`: its first character) is, and its call."""
        if not self.frames:
            if self.args_slot is not None:
                return ARGS, self.args_slot
            return (CALL if kind == "{" else LIST if kind == "[" else NO_CALL), None
        place, slot, key = self.frames[-1]
        if place == LIST:
            return (CALL if kind == "{" else NO_CALL), None
        if key in NAME_KEYS and kind == '"' and slot.tool is None:
            return NAME, slot
        if key in ARGS_KEYS and not slot.args_started:
            return (ARGS_TEXT if kind == '"' else ARGS), slot
        if key == "function" and kind == "{":
            return FUNCTION, slot
        if key == "tool_calls" and kind == "[":
            return LIST, None
        return OTHER, None

    def _at_top(self) -> bool:
        """No call has counted yet and the value is the body itself or an item of a list of calls."""
        return not self.committed and (not self.frames or self.frames[-1][0] == LIST)

    def _enter(self, kind: str) -> bool:
        """Handle the start of a container at call-object level; True when it opened a subtree."""
        place, slot = self._place(kind)
        if place == NO_CALL:
            if self._at_top():
                self.fail()
            self.sub, self.depth = OTHER, 0
            return True
        if place in (CALL, FUNCTION, LIST):
            if place == CALL:
                slot = Slot(self.book)
                self.open_slots.append(slot)
            self.frames.append([place, slot, None])
            return False
        if place == ARGS and kind == "[":
            place = OTHER  # an array is no arguments object
        self.sub, self.sub_slot, self.depth = place, slot, 0
        if place in (ARGS, ARGS_TEXT):
            self._args_begin(slot)
        return True

    # -- sink -----------------------------------------------------------------------------------
    def begin_object(self) -> None:
        if self.sub or self._enter("{"):
            self._sub_open(ArgsWriter.begin_object)

    def begin_array(self) -> None:
        if self.sub or self._enter("["):
            self._sub_open(ArgsWriter.begin_array)

    def _sub_open(self, write) -> None:
        self.depth += 1
        if self.sub == ARGS:
            self.sub_slot.ev(write)

    def _sub_close(self, write) -> None:
        self.depth -= 1
        if self.sub == ARGS:
            self.sub_slot.ev(write)
        if self.depth == 0:
            self.sub, self.sub_slot = NOT_IN_SUBTREE, None

    def end_object(self) -> None:
        if self.sub:
            self._sub_close(ArgsWriter.end_object)
            return
        place, slot, _ = self.frames.pop()
        if place == CALL:
            self.open_slots.remove(slot)
            if slot.tool is None or not (slot.committed or slot.dropped):
                self.reject(slot)
            else:
                slot.end(complete=not self.reader.repaired)

    def end_array(self) -> None:
        if self.sub:
            self._sub_close(ArgsWriter.end_array)
            return
        self.frames.pop()
        if not self.frames and not self.committed:
            self.fail()

    def key(self, name: str) -> None:
        if self.sub:
            if self.sub == ARGS:
                self.sub_slot.ev(ArgsWriter.key, name)
            return
        self.frames[-1][2] = name
        if name not in CALL_KEYS and (not self.checked or (self.bare and not self.committed)):
            self.fail()
        self.checked = True

    def begin_string(self) -> None:
        if self.sub:
            if self.sub == ARGS:
                self.sub_slot.ev(ArgsWriter.begin_string)
            return
        place, slot = self._place('"')
        if place == NAME:
            self.sub, self.sub_slot = NAME, slot
            self.name_parts = []
        elif place in (ARGS_TEXT, ARGS):  # ARGS: a ReAct input given as a string
            self.sub, self.sub_slot = ARGS_TEXT, slot
            self.nested = None
            self.str_bare = []
            self._args_begin(slot)
        elif place in (CALL, LIST, NO_CALL) and self._at_top():
            self.fail()
            self.sub = OTHER
        else:
            self.sub = OTHER

    def string_chunk(self, text: str) -> None:
        sub = self.sub
        if sub == ARGS:
            self.sub_slot.ev(ArgsWriter.string_chunk, text)
        elif sub == NAME:
            self.name_parts.append(text)
        elif sub == ARGS_TEXT:
            self._args_text(text)

    def end_string(self) -> None:
        sub = self.sub
        if sub == ARGS:
            self.sub_slot.ev(ArgsWriter.end_string)
            if self.depth == 0:
                self.sub, self.sub_slot = NOT_IN_SUBTREE, None
            return
        if self.depth:  # a string inside an ignored subtree
            return
        slot = self.sub_slot
        self.sub, self.sub_slot = NOT_IN_SUBTREE, None
        if sub == NAME:
            self._named(slot, "".join(self.name_parts))
        elif sub == ARGS_TEXT:
            if self.nested is not None:
                self.nested.finish()
            else:
                slot.wrap("".join(self.str_bare or ()))

    def scalar(self, value: Any) -> None:
        if self.sub:
            if self.sub == ARGS:
                self.sub_slot.ev(ArgsWriter.scalar, value)
            return
        place, slot = self._place("0")
        if place in (ARGS, ARGS_TEXT):
            if value is not None:
                self._args_begin(slot)
                slot.wrap(value)
        elif place == NO_CALL and self._at_top():
            self.fail()

    # -- names and string arguments ------------------------------------------------------------------
    def _named(self, slot: Slot, name: str) -> None:
        tool = self.book.resolve(name)
        if tool is None:
            self.reject(slot)
            return
        slot.tool = tool
        if slot.args_started or not self.bare:
            self._start(slot)

    def _args_begin(self, slot: Slot) -> None:
        slot.args_started = True
        if slot.tool is not None and not (slot.committed or slot.dropped):
            self._start(slot)

    def _start(self, slot: Slot) -> None:
        """The call in `slot` counts (a well-formed call over the limit is dropped, not content)."""
        self.book.start(slot)
        self.committed = True

    def _args_text(self, text: str) -> None:
        """Arguments written as a JSON string: read the string's content as JSON."""
        if self.nested is None:
            self.str_bare.append(text)
            head = "".join(self.str_bare).lstrip()
            if not head:
                return
            if head[0] != "{":
                return  # a plain string: wrapped at its end
            self.nested = LenientReader(_Forward(self.sub_slot))
            self.str_bare = None
            text = head
        if not (self.nested.done or self.nested.failed):
            self.nested.feed(text)


class _Forward:
    """Sink passing a nested reader's events to a slot (arguments given as a JSON string)."""

    def __init__(self, slot: Slot):
        self.slot = slot

    def begin_object(self) -> None:
        self.slot.ev(ArgsWriter.begin_object)

    def end_object(self) -> None:
        self.slot.ev(ArgsWriter.end_object)

    def begin_array(self) -> None:
        self.slot.ev(ArgsWriter.begin_array)

    def end_array(self) -> None:
        self.slot.ev(ArgsWriter.end_array)

    def key(self, name: str) -> None:
        self.slot.ev(ArgsWriter.key, name)

    def begin_string(self) -> None:
        self.slot.ev(ArgsWriter.begin_string)

    def string_chunk(self, text: str) -> None:
        self.slot.ev(ArgsWriter.string_chunk, text)

    def end_string(self) -> None:
        self.slot.ev(ArgsWriter.end_string)

    def scalar(self, value: Any) -> None:
        self.slot.ev(ArgsWriter.scalar, value)
