"""The parser: model text in (whole or in deltas), content and tool-call events out.

One state machine serves both uses: `parse.parse` feeds it the whole text at once, a server
feeds it deltas. Every decision depends on the characters seen so far, never on where the
deltas were split, so a stream and a non-stream give the same answer. Text that cannot begin
a marker goes out as content at once; a possible marker is held back until it is decided,
and released as content when it turns out not to be a call. Work is amortized O(1) per
character: nothing is re-read when a delta arrives.

Whitespace next to a call is not content: the run before a call is dropped, and so is the run
after it unless content came before the call and comes after it too.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from .arguments import ArgsWriter
from .dialects import ARGS_KEYS, CALL_KEYS, DIALECTS, NAME_KEYS, Dialect
from .lenient import WS, LenientReader
from .tools import Tool, ToolChoice, normalize_tools


def new_call_id() -> str:
    """An OpenAI-style tool call id."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # canonical JSON text of an object
    complete: bool = True  # False: the text ended inside the call and it was closed by repair
    errors: list[str] = field(default_factory=list)  # schema violations of the arguments

    @property
    def valid(self) -> bool:
        return not self.errors

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class Content:
    text: str


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


Event = Content | CallStart | CallArgs | CallEnd

# parser modes
CONTENT, OPEN, JSON_BODY, AFTER, REACT_NAME, REACT_GAP, REACT_INPUT, DISCARD = range(8)
# marker kinds
K_OPEN, K_LABEL, K_END = range(3)
_LANG = re.compile(r"[A-Za-z0-9_-]*")
_FENCE = "```"
_INPUT_LABELS = ("Action Input:", "Action input:", "Action_Input:", "ActionInput:")
MAX_NAME_LINE = 200


@dataclass(frozen=True)
class _Marker:
    text: str
    kind: int
    dialect: Dialect | None
    line_start: bool


class _Markers:
    """The marker table for a set of dialects, built once."""

    def __init__(self, dialects: Iterable[Dialect]):
        found: dict[tuple[str, int], _Marker] = {}
        for d in dialects:
            if d.open:
                found.setdefault((d.open, K_OPEN), _Marker(d.open, K_OPEN, d, d.line_start))
            for label in d.labels:
                found.setdefault((label, K_LABEL), _Marker(label, K_LABEL, d, True))
            if d.result_marker:
                found.setdefault((d.result_marker, K_END), _Marker(d.result_marker, K_END, d, d.line_start))
        self.by_first: dict[str, list[_Marker]] = {}
        for m in found.values():
            self.by_first.setdefault(m.text[0], []).append(m)
        chars = "".join(sorted(set(self.by_first) | set(WS) | {"{", "["}))
        self.trigger = re.compile("[" + re.escape(chars) + "]")


_TABLES: dict[tuple[str, ...], _Markers] = {}


class StreamParser:
    """Feed deltas, get events; call `finish` when the text ends.

    tools: the declared tools (OpenAI dicts or `Tool`s); only calls naming one of them count.
    choice: a named choice restricts calls to that tool. max_calls: 1 when parallel calls are
    off; later calls are read and dropped. id_factory: makes call ids.
    """

    def __init__(self, tools: Sequence[Any], *, choice: ToolChoice | None = None,
                 max_calls: int | None = None, id_factory: Callable[[], str] = new_call_id,
                 dialects: Iterable[Dialect] | None = None):
        self.tools = {t.name: t for t in normalize_tools(tools)}
        self.allowed = ({choice.name} if choice is not None and choice.mode == "named" and choice.name
                        else set(self.tools))
        self.max_calls = max_calls
        self.id_factory = id_factory
        ds = tuple(dialects) if dialects is not None else tuple(DIALECTS.values())
        key = tuple(d.name for d in ds)
        if key not in _TABLES:
            _TABLES[key] = _Markers(ds)
        self.markers = _TABLES[key]
        self.events: list[Event] = []
        self.pending = ""
        self.mode = CONTENT
        self.ws = ""
        self.line_start = True
        self.after_label = False
        self.content_emitted = False
        self.held: list[str] = []
        self.dialect: Dialect | None = None
        self.fenced = False
        self.lang = False
        self.reader: LenientReader | None = None
        self.router: _Router | None = None
        self.react_slot: _Slot | None = None
        self.name_parts: list[str] = []
        self.gap_newline = False
        self.ncalls = 0  # calls started
        self.accepted = 0  # calls counted against max_calls
        self.args: dict[int, list[str]] = {}
        self.finished = False

    # -- public -----------------------------------------------------------------------------
    def feed(self, delta: str) -> list[Event]:
        if delta:
            self.pending += delta
            self._run(final=False)
        return self._take()

    def finish(self) -> list[Event]:
        """The text has ended: decide everything still held back."""
        if not self.finished:
            self.finished = True
            self._run(final=True)
            if self.mode == REACT_NAME:
                self._react_name("", 0, final=True)
            if self.mode in (REACT_GAP, REACT_INPUT):
                self._end_react_call(complete=True)
            elif self.mode == JSON_BODY:
                self.reader.finish()
                self._after_reader(final=True)
            elif self.mode == OPEN:
                self._fail()
            if self.pending:
                self._run(final=True)
            if self.ws and not self.ncalls:
                self._text("")
        return self._take()

    @property
    def calls_started(self) -> int:
        return self.ncalls

    # -- the loop -----------------------------------------------------------------------------
    def _take(self) -> list[Event]:
        out, self.events = self.events, []
        if len(out) < 2:
            return out
        merged: list[Event] = [out[0]]
        for e in out[1:]:
            last = merged[-1]
            if type(e) is Content and type(last) is Content:
                merged[-1] = Content(last.text + e.text)
            elif type(e) is CallArgs and type(last) is CallArgs and e.index == last.index:
                merged[-1] = CallArgs(e.index, last.text + e.text)
            else:
                merged.append(e)
        return merged

    def _run(self, final: bool) -> None:
        s = self.pending
        i = 0
        n = len(s)
        while i < n:
            mode = self.mode
            if mode == CONTENT:
                j = self._content(s, i, final)
            elif mode == JSON_BODY:
                j = self._json(s, i)
            elif mode == OPEN:
                j = self._open(s, i, final)
            elif mode == AFTER:
                j = self._after(s, i, final)
            elif mode == REACT_NAME:
                j = self._react_name(s, i, final)
            elif mode == REACT_GAP:
                j = self._react_gap(s, i, final)
            elif mode == REACT_INPUT:
                j = self._react_input(s, i)
            else:  # DISCARD
                j = n
            if j == i and self.mode == mode:
                break  # waiting for more text
            i = j
        self.pending = s[i:]

    # -- content ---------------------------------------------------------------------------------
    def _text(self, t: str) -> None:
        """Emit content, with the held whitespace in front of it where it belongs."""
        if self.ws:
            if self.content_emitted or not self.ncalls:
                t = self.ws + t
            self.ws = ""
        if t:
            self.events.append(Content(t))
            self.content_emitted = True
            k = t.rfind("\n")
            if k >= 0:
                self.line_start = not t[k + 1:].strip(" \t")
            elif t.strip(" \t"):
                self.line_start = False

    def _space(self, run: str) -> None:
        if self.after_label:
            run = run.lstrip(" \t")
            if not run:
                return
            self.after_label = False
        self.ws += run
        if "\n" in run:
            self.line_start = True

    def _content(self, s: str, i: int, final: bool) -> int:
        n = len(s)
        trigger = self.markers.trigger
        while i < n:
            m = trigger.search(s, i)
            if m is None:
                self._plain(s[i:])
                return n
            j = m.start()
            if j > i:
                self._plain(s[i:j])
            c = s[j]
            if c in WS:
                k = j + 1
                while k < n and s[k] in WS:
                    k += 1
                self._space(s[j:k])
                i = k
                continue
            if c == "{" or c == "[":
                self._begin_json(DIALECTS["json"])
                return j
            marker = self._match(s, j, final)
            if marker is None:
                self._plain(c)
                i = j + 1
                continue
            if marker is _WAIT:
                return j
            return self._on_marker(marker, s, j)
        return n

    def _plain(self, t: str) -> None:
        if self.after_label:
            self.after_label = False
        self._text(t)

    def _match(self, s: str, j: int, final: bool) -> Any:
        """The longest marker at s[j:], _WAIT while a longer one may still come, or None."""
        best: _Marker | None = None
        rest = len(s) - j
        for mk in self.markers.by_first.get(s[j], ()):
            if (mk.line_start and not self.line_start) or (mk.kind == K_END and not self.ncalls):
                continue
            t = mk.text
            if rest >= len(t):
                if s.startswith(t, j) and (best is None or len(t) > len(best.text)):
                    best = mk
            elif not final and t.startswith(s[j:]):
                return _WAIT
        return best

    def _on_marker(self, mk: _Marker, s: str, j: int) -> int:
        end = j + len(mk.text)
        if mk.kind == K_LABEL:
            self.after_label = True
            return end
        if mk.kind == K_END:
            self.mode = DISCARD
            return len(s)
        d = mk.dialect
        self.dialect = d
        self.held = [mk.text]
        if d.react:
            self.mode = REACT_NAME
            self.name_parts = []
        else:
            self.mode = OPEN
            self.fenced = self.lang = mk.text == _FENCE
        return end

    # -- a marker was seen: its body --------------------------------------------------------------
    def _open(self, s: str, i: int, final: bool) -> int:
        n = len(s)
        start = i
        while i < n:
            if self.lang:
                i = _LANG.match(s, i).end()
                if i == n:
                    break
                self.lang = False
                continue
            c = s[i]
            if c in WS:
                i += 1
                continue
            if c == "{" or c == "[":
                self.held.append(s[start:i])
                self._begin_json(self.dialect, keep_held=True)
                return i
            if c == "`" and not self.fenced:
                if s.startswith(_FENCE, i):
                    i += 3
                    self.fenced = self.lang = True
                    continue
                if not final and _FENCE.startswith(s[i:]):
                    break
            self.held.append(s[start:i])
            self._fail()
            return i
        self.held.append(s[start:i])
        return i

    def _begin_json(self, dialect: Dialect, keep_held: bool = False, slot: "_Slot | None" = None) -> None:
        self.dialect = dialect
        if not keep_held:
            self.held = []
            self.fenced = False
        self.router = _Router(self, slot, bare=not (dialect.open or keep_held))
        self.reader = LenientReader(self.router)
        self.router.reader = self.reader
        self.mode = JSON_BODY

    def _json(self, s: str, i: int) -> int:
        j = self.reader.feed(s, i)
        if not self.router.committed:
            self.held.append(s[i:j])
        self._after_reader(final=False)
        return j

    def _after_reader(self, final: bool) -> None:
        router, reader = self.router, self.reader
        if router.failed or (reader.failed and not router.committed):
            self._fail()
            return
        if not (reader.failed or reader.done or final):
            return
        router.abort()
        if self.react_slot is not None:
            self._end_react_call(complete=reader.done and not reader.repaired)
        elif reader.done and (self.dialect.close or self.fenced):
            self.mode = AFTER
        else:
            self._to_content()

    def _to_content(self) -> None:
        self.mode = CONTENT
        self.held = []
        self.fenced = False
        self.line_start = False

    def _fail(self) -> None:
        """The held text was not a call after all: it is content."""
        held = "".join(self.held)
        self.held = []
        self.mode = CONTENT
        self.fenced = self.lang = False
        self.react_slot = None
        if held:
            self._plain(held)

    def _after(self, s: str, i: int, final: bool) -> int:
        """After a call's JSON: stray closers and whitespace, then the fence and close markers."""
        n = len(s)
        while i < n:
            c = s[i]
            if c in WS:
                k = i + 1
                while k < n and s[k] in WS:
                    k += 1
                self._space(s[i:k])
                i = k
                continue
            if c == "}" or c == "]":
                i += 1
                continue
            if self.fenced:
                if s.startswith(_FENCE, i):
                    self.fenced = False
                    self.ws = ""
                    i += 3
                    if not self.dialect.close:
                        self._to_content()
                        return i
                    continue
                if _FENCE.startswith(s[i:]):
                    return n if final else i  # a cut-off fence is dropped
                self.fenced = False
            close = self.dialect.close
            if close:
                if s.startswith(close, i):
                    self.ws = ""
                    self._to_content()
                    return i + len(close)
                if close.startswith(s[i:]):
                    return n if final else i  # a cut-off close marker is dropped
            self._to_content()
            return i
        return i

    # -- ReAct ----------------------------------------------------------------------------------
    def _react_name(self, s: str, i: int, final: bool) -> int:
        n = len(s)
        j = s.find("\n", i)
        if j < 0:
            self.name_parts.append(s[i:])
            self.held.append(s[i:])
            if not final and sum(map(len, self.name_parts)) <= MAX_NAME_LINE:
                return n
            j = n
        else:
            self.name_parts.append(s[i:j])
            self.held.append(s[i:j])
        line = "".join(self.name_parts)
        tool = self._resolve(line) if len(line) <= MAX_NAME_LINE else None
        if tool is None:
            self._fail()
            return j
        slot = self.react_slot = _Slot(self)
        slot.name = tool.name
        if self._commit(slot):
            slot.start()
        else:
            slot.dropped = True
        self.held = []
        self.ws = ""
        self.mode = REACT_GAP
        self.gap_newline = False
        return j

    def _react_gap(self, s: str, i: int, final: bool) -> int:
        n = len(s)
        while i < n and s[i] in WS:
            i += 1
        if i == n:
            return i
        for label in _INPUT_LABELS:
            if s.startswith(label, i):
                self.mode = REACT_INPUT
                self.gap_newline = False
                return i + len(label)
            if not final and label.startswith(s[i:]):
                return i
        self._end_react_call(complete=True)
        return i

    def _react_input(self, s: str, i: int) -> int:
        n = len(s)
        while i < n and s[i] in WS:
            if s[i] == "\n":
                self.gap_newline = True
            i += 1
        if i == n:
            return i
        if self.gap_newline and s[i] not in "{[":
            self._end_react_call(complete=True)
            return i
        self._begin_json(self.dialect, slot=self.react_slot)
        self.router.committed = True
        return i

    def _end_react_call(self, complete: bool) -> None:
        slot = self.react_slot
        self.react_slot = None
        if slot is not None:
            slot.end(complete)
        self._to_content()

    # -- calls ----------------------------------------------------------------------------------
    def _resolve(self, name: str) -> Tool | None:
        name = name.strip().strip("`'\"*").strip()
        if name.endswith("()"):
            name = name[:-2]
        if name in self.allowed:
            return self.tools[name]
        for prefix in ("functions.", "function.", "tools."):
            if name.startswith(prefix) and name[len(prefix):] in self.allowed:
                return self.tools[name[len(prefix):]]
        folded = [a for a in self.allowed if a.casefold() == name.casefold()]
        return self.tools[folded[0]] if len(folded) == 1 else None

    def _commit(self, slot: "_Slot") -> bool:
        """Start the call in `slot` (its name is known). False when it must be dropped."""
        if self.max_calls is not None and self.accepted >= self.max_calls:
            return False
        self.accepted += 1
        tool = self.tools[slot.name]
        index = self.ncalls
        self.ncalls += 1
        slot.index = index
        slot.tool = tool
        slot.id = self.id_factory()
        self.ws = ""
        self.events.append(CallStart(index, slot.id, tool.name))
        parts: list[str] = []
        self.args[index] = parts

        def emit(text: str, _index: int = index, _parts: list = parts) -> None:
            _parts.append(text)
            self.events.append(CallArgs(_index, text))

        slot.writer = ArgsWriter(tool.schema, emit)
        return True

    def _end_call(self, slot: "_Slot", complete: bool) -> None:
        text = "".join(self.args.pop(slot.index))
        try:
            errors = slot.tool.errors(json.loads(text))
        except ValueError:
            errors = ["arguments are not JSON"]
        self.events.append(CallEnd(slot.index, ToolCall(slot.id, slot.tool.name, text, complete, errors)))


class _Wait:
    pass


_WAIT = _Wait()


class _Slot:
    """One call being read: its name may come before or after its arguments."""

    __slots__ = ("parser", "name", "tool", "id", "index", "writer", "buffer", "args_started",
                 "args_done", "committed", "dropped", "ended")

    def __init__(self, parser: StreamParser):
        self.parser = parser
        self.name: str | None = None
        self.tool: Tool | None = None
        self.id = ""
        self.index = -1
        self.writer: ArgsWriter | None = None
        self.buffer: list[tuple] = []
        self.args_started = self.args_done = self.committed = self.dropped = self.ended = False

    def ev(self, method: str, *args: Any) -> None:
        """An arguments event: written when the call is started, kept until then."""
        if self.dropped:
            return
        if self.committed:
            self._apply(method, args)
        else:
            self.buffer.append((method, args))

    def start(self) -> None:
        self.committed = True
        for method, args in self.buffer:
            self._apply(method, args)
        self.buffer = []

    def _apply(self, method: str, args: tuple) -> None:
        if method == "wrap":
            props = self.tool.parameters.get("properties")
            if isinstance(props, dict) and len(props) == 1:
                w = self.writer
                w.begin_object()
                w.key(next(iter(props)))
                w.value(args[0])
                w.end_object()
        else:
            getattr(self.writer, method)(*args)

    def wrap(self, value: Any) -> None:
        """A bare (non-object) arguments value: kept only when the tool has one parameter."""
        self.ev("wrap", value)

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
        self.parser._end_call(self, complete)


# roles of containers at the call-object level
R_LIST, R_CALL, R_FUNCTION = range(10, 13)
# what a string or a subtree is for
S_NONE, S_NAME, S_ARGS, S_ARGSTR, S_IGNORE = range(5)


class _Router:
    """Sink for one JSON body: finds the call objects in it and sends each call's arguments
    to its slot. `args_slot` set: the body is the arguments of that call (ReAct).

    `bare`: no marker announced the JSON, so it is a call only if it looks like one: a
    declared name and an arguments key, and no other keys before them."""

    def __init__(self, parser: StreamParser, args_slot: _Slot | None = None, bare: bool = False):
        self.p = parser
        self.bare = bare
        self.reader: LenientReader | None = None
        self.frames: list[list] = []  # [role, slot, key]
        self.args_slot = args_slot
        self.committed = False
        self.failed = False
        self.checked = False
        self.sub = S_NONE
        self.sub_slot: _Slot | None = None
        self.depth = 0
        self.name_parts: list[str] = []
        self.nested: LenientReader | None = None
        self.str_bare: list[str] | None = None
        self.open_slots: list[_Slot] = []

    # -- outcomes -------------------------------------------------------------------------------
    def fail(self) -> None:
        self.failed = True
        self.reader.halt = True

    def reject(self, slot: _Slot) -> None:
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
    def _place(self, kind: str) -> tuple[int, _Slot | None]:
        """What the value starting now is for: (S_* or role, slot)."""
        if not self.frames:
            if self.args_slot is not None:
                return S_ARGS, self.args_slot
            return (R_CALL if kind == "{" else R_LIST if kind == "[" else -1), None
        role, slot, key = self.frames[-1]
        if role == R_LIST:
            if kind == "{":
                return R_CALL, None
            return -1, None
        if key in NAME_KEYS and kind == '"' and slot.name is None:
            return S_NAME, slot
        if key in ARGS_KEYS and not slot.args_started:
            return (S_ARGSTR if kind == '"' else S_ARGS), slot
        if key == "function" and kind == "{":
            return R_FUNCTION, slot
        if key == "tool_calls" and kind == "[":
            return R_LIST, None
        return S_IGNORE, None

    def _enter(self, kind: str) -> bool:
        """Handle the start of a value at call-object level; True when it opened a subtree."""
        place, slot = self._place(kind)
        if place == -1:
            if not self.committed and not self.frames:
                self.fail()
            elif not self.committed and self.frames and self.frames[-1][0] == R_LIST:
                self.fail()
            self.sub, self.depth = S_IGNORE, 0
            return True
        if place in (R_CALL, R_FUNCTION, R_LIST):
            if place == R_CALL:
                slot = _Slot(self.p)
                self.open_slots.append(slot)
            self.frames.append([place, slot, None])
            return False
        if place == S_ARGS and kind == "[":
            place = S_IGNORE  # an array is no arguments object
        self.sub, self.sub_slot, self.depth = place, slot, 0
        if place in (S_ARGS, S_ARGSTR):
            self._args_begin(slot)
        return True

    # -- sink -----------------------------------------------------------------------------------
    def begin_object(self) -> None:
        if self.sub:
            self._sub_open("begin_object")
        elif self._enter("{"):
            self._sub_open("begin_object")

    def begin_array(self) -> None:
        if self.sub:
            self._sub_open("begin_array")
        elif self._enter("["):
            self._sub_open("begin_array")

    def _sub_open(self, method: str) -> None:
        self.depth += 1
        if self.sub == S_ARGS:
            self.sub_slot.ev(method)

    def _sub_close(self, method: str) -> None:
        self.depth -= 1
        if self.sub == S_ARGS:
            self.sub_slot.ev(method)
        if self.depth == 0:
            self._sub_done()

    def _sub_done(self) -> None:
        if self.sub in (S_ARGS, S_ARGSTR) and self.sub_slot is not None:
            self.sub_slot.args_done = True
        self.sub = S_NONE
        self.sub_slot = None

    def end_object(self) -> None:
        if self.sub:
            self._sub_close("end_object")
            return
        role, slot, _ = self.frames.pop()
        if role == R_CALL:
            self.open_slots.remove(slot)
            if slot.name is None or not (slot.committed or slot.dropped):
                self.reject(slot)
            else:
                slot.end(complete=not self.reader.repaired)

    def end_array(self) -> None:
        if self.sub:
            self._sub_close("end_array")
            return
        self.frames.pop()
        if not self.frames and not self.committed:
            self.fail()

    def key(self, name: str) -> None:
        if self.sub:
            if self.sub == S_ARGS:
                self.sub_slot.ev("key", name)
            return
        frame = self.frames[-1]
        frame[2] = name
        if name not in CALL_KEYS and (not self.checked or (self.bare and not self.committed)):
            self.fail()
        self.checked = True

    def begin_string(self) -> None:
        if self.sub:
            if self.sub == S_ARGS:
                self.sub_slot.ev("begin_string")
            return
        place, slot = self._place('"')
        if place == S_NAME:
            self.sub, self.sub_slot = S_NAME, slot
            self.name_parts = []
        elif place == S_ARGSTR:
            self.sub, self.sub_slot = S_ARGSTR, slot
            self.nested = None
            self.str_bare = []
            self._args_begin(slot)
        elif place in (R_CALL, R_LIST, -1) and not self.committed and (
                not self.frames or self.frames[-1][0] == R_LIST):
            self.fail()
            self.sub = S_IGNORE
        elif place == S_ARGS:  # ReAct input given as a string
            self.sub, self.sub_slot = S_ARGSTR, slot
            self.nested = None
            self.str_bare = []
            self._args_begin(slot)
        else:
            self.sub = S_IGNORE

    def string_chunk(self, text: str) -> None:
        sub = self.sub
        if sub == S_ARGS:
            self.sub_slot.ev("string_chunk", text)
        elif sub == S_NAME:
            self.name_parts.append(text)
        elif sub == S_ARGSTR:
            self._argstr(text)

    def end_string(self) -> None:
        sub = self.sub
        if sub == S_ARGS:
            self.sub_slot.ev("end_string")
            if self.depth == 0:
                self._sub_done()
            return
        if self.depth:  # a string inside an ignored subtree
            return
        slot = self.sub_slot
        self.sub, self.sub_slot = S_NONE, None
        if sub == S_NAME:
            self._named(slot, "".join(self.name_parts))
        elif sub == S_ARGSTR:
            if self.nested is not None:
                self.nested.finish()
            else:
                slot.wrap("".join(self.str_bare or ()))
            slot.args_done = True

    def scalar(self, value: Any) -> None:
        if self.sub:
            if self.sub == S_ARGS:
                self.sub_slot.ev("scalar", value)
            return
        place, slot = self._place("0")
        if place in (S_ARGS, S_ARGSTR):
            if value is not None:
                self._args_begin(slot)
                slot.wrap(value)
                slot.args_done = True
        elif place == -1 and not self.committed and (not self.frames or self.frames[-1][0] == R_LIST):
            self.fail()

    # -- names and string arguments ------------------------------------------------------------------
    def _named(self, slot: _Slot, name: str) -> None:
        tool = self.p._resolve(name)
        if tool is None:
            self.reject(slot)
            return
        slot.name = tool.name
        if slot.args_started or not self.bare:
            self._start(slot)

    def _args_begin(self, slot: _Slot) -> None:
        slot.args_started = True
        if slot.name is not None and not (slot.committed or slot.dropped):
            self._start(slot)

    def _start(self, slot: _Slot) -> None:
        """The call in `slot` counts: start it (or drop it, over max_calls)."""
        if self.p._commit(slot):
            self.committed = True
            slot.start()
        else:
            self.committed = True  # a well-formed call over max_calls: dropped, not content
            slot.dropped = True

    def _argstr(self, text: str) -> None:
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

    def __init__(self, slot: _Slot):
        self.slot = slot

    def __getattr__(self, method: str) -> Callable[..., None]:
        return lambda *args: self.slot.ev(method, *args)
