"""An incremental, lenient JSON reader: model text in, structure events out.

Models write almost-JSON: single quotes, trailing commas, Python literals, unquoted keys,
missing commas, brackets left open when they stop. json-repair fixes such text but needs the
whole of it; a stream needs the same answer one delta at a time, at O(1) amortized work per
character, so this reader is a resumable state machine. Its decisions depend only on the
characters seen, never on where deltas were split.
"""
from __future__ import annotations

import math
import re
from typing import Any, Protocol

WS = frozenset(" \t\r\n")
_NUM_CHARS = frozenset("0123456789+-.eE")
_NUM_START = frozenset("0123456789+-.")
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_KEY_CHARS = _WORD_START | frozenset("0123456789$-")
_VALUE_START = frozenset('{["\'') | _NUM_START | _WORD_START
_STR_STOP = {'"': re.compile(r'["\\]'), "'": re.compile(r"['\\]")}
_WORD_RE = re.compile(r"[A-Za-z0-9_]*")
_BARE_RE = re.compile(r"[^,}\]\n]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\", '"': '"', "'": "'"}
_LITERALS: dict[str, Any] = {"true": True, "True": True, "TRUE": True, "false": False, "False": False,
                             "FALSE": False, "null": None, "None": None, "NULL": None, "undefined": None}
MAX_KEY = 256

# container frame states
O_KEY, O_COLON, O_VALUE, O_NEXT, A_VALUE, A_NEXT = range(6)
# scalar modes
NONE, STR, ESC, UNI, NUM, WORD, BARE, KEY = range(8)


class Sink(Protocol):
    def begin_object(self) -> None: ...
    def end_object(self) -> None: ...
    def begin_array(self) -> None: ...
    def end_array(self) -> None: ...
    def key(self, name: str) -> None: ...
    def begin_string(self) -> None: ...
    def string_chunk(self, text: str) -> None: ...
    def end_string(self) -> None: ...
    def scalar(self, value: Any) -> None: ...


class LenientReader:
    """Reads one JSON value. `feed` returns where it stopped: at the end of the text, after
    the value's last character (`done`), at a character it cannot read (`failed`), or right
    after the event during which the sink called `stop()`."""

    __slots__ = ("sink", "stack", "mode", "quote", "is_key", "buf", "high", "done", "failed",
                 "stopped", "repaired", "started")

    def __init__(self, sink: Sink):
        self.sink = sink
        self.stack: list[int] = []
        self.mode = NONE
        self.quote = '"'
        self.is_key = False
        self.buf: list[str] = []
        self.high = ""  # pending high surrogate from a \\u escape
        self.done = self.failed = self.stopped = self.repaired = self.started = False

    def stop(self) -> None:
        """Read no further (the sink has decided the text is not what it wants)."""
        self.stopped = True

    # -- driving -----------------------------------------------------------------------
    def feed(self, s: str, i: int = 0) -> int:
        n = len(s)
        stack = self.stack
        sink = self.sink
        while i < n and not (self.done or self.failed or self.stopped):
            mode = self.mode
            if mode == STR:
                m = _STR_STOP[self.quote].search(s, i)
                j = m.start() if m else n
                if j > i:
                    self._text(s[i:j])
                if m is None:
                    return n
                i = j + 1
                if s[j] == "\\":
                    self.mode = ESC
                else:
                    self._end_string()
                continue
            if mode == ESC:
                c = s[i]
                i += 1
                if c == "u":
                    self.mode = UNI
                    self.buf = []
                else:
                    self.mode = STR
                    self._text(_ESCAPES.get(c) or "\\" + c)
                continue
            if mode == UNI:
                c = s[i]
                if c in "0123456789abcdefABCDEF":
                    self.buf.append(c)
                    i += 1
                    if len(self.buf) == 4:
                        self.mode = STR
                        self._codepoint(int("".join(self.buf), 16))
                else:
                    self.mode = STR
                    self._text("\\u" + "".join(self.buf))
                continue
            if mode == NUM:
                j = i
                while j < n and s[j] in _NUM_CHARS:
                    j += 1
                self.buf.append(s[i:j])
                i = j
                if j < n:
                    self._end_number()
                continue
            if mode == WORD:
                m = _WORD_RE.match(s, i)
                self.buf.append(m.group())
                i = m.end()
                if i < n:
                    self._end_word()
                continue
            if mode == BARE:
                m = _BARE_RE.match(s, i)
                self.buf.append(m.group())
                i = m.end()
                if i < n:
                    self._end_bare()
                continue
            if mode == KEY:
                j = i
                while j < n and s[j] in _KEY_CHARS:
                    j += 1
                self.buf.append(s[i:j])
                i = j
                if sum(map(len, self.buf)) > MAX_KEY:
                    self.failed = True
                    return i
                if j < n:
                    self.mode = NONE
                    stack[-1] = O_COLON
                    sink.key("".join(self.buf))
                continue

            c = s[i]
            if c in WS:
                i += 1
                continue
            state = stack[-1] if stack else -1
            if state == O_KEY:
                if c == '"' or c == "'":
                    self._begin_string(c, True)
                elif c == "}":
                    self._close()
                elif c == ",":
                    pass
                elif c in _KEY_CHARS:
                    self.mode = KEY
                    self.buf = []
                    continue
                elif c == "]":
                    if not self._mismatched(c):
                        return i
                    continue
                else:
                    self.failed = True
                    return i
                i += 1
            elif state == O_COLON:
                if c == ":" or c == "=":
                    stack[-1] = O_VALUE
                    i += 1
                elif c in _VALUE_START:
                    stack[-1] = O_VALUE
                elif c == "}":
                    self._close()
                    i += 1
                else:
                    self.failed = True
                    return i
            elif state == O_NEXT or state == A_NEXT:
                closer = "}" if state == O_NEXT else "]"
                if c == ",":
                    stack[-1] = O_KEY if state == O_NEXT else A_VALUE
                    i += 1
                elif c == closer:
                    self._close()
                    i += 1
                elif c in "}]":
                    if not self._mismatched(c):
                        return i
                elif c in _VALUE_START:
                    stack[-1] = O_KEY if state == O_NEXT else A_VALUE  # a missing comma
                else:
                    self.failed = True
                    return i
            else:  # a value is expected: top level, O_VALUE or A_VALUE
                if c in "}]":
                    if state == A_VALUE and c == "]":
                        self._close()
                    elif state == O_VALUE and c == "}":
                        sink.scalar(None)
                        self._close()
                    elif state in (A_VALUE, O_VALUE):
                        if not self._mismatched(c):
                            return i
                        continue
                    else:
                        self.failed = True
                        return i
                    i += 1
                elif not self._begin_value(c):
                    self.failed = True
                    return i
                elif c in '{["\'':
                    i += 1
        return i

    def finish(self) -> None:
        """The text has ended: close whatever is open (that is the repair of a cut-off value)."""
        if self.done or self.failed:
            return
        mode = self.mode
        if mode != NONE:
            self.repaired = self.repaired or mode in (STR, ESC, UNI)
            if mode == ESC:
                self.mode = STR
                self._text("\\")
            elif mode == UNI:
                self.mode = STR
                self._text("\\u" + "".join(self.buf))
            if self.mode == STR:
                self._end_string()
            elif mode == NUM:
                self._end_number()
            elif mode == WORD:
                self._end_word()
                if self.mode == BARE:
                    self._end_bare()
            elif mode == BARE:
                self._end_bare()
            elif mode == KEY:
                self.mode = NONE
                self.stack[-1] = O_COLON
                self.sink.key("".join(self.buf))
        while self.stack and not self.failed:
            self.repaired = True
            self._close()
        if not self.started:
            self.failed = True

    # -- values --------------------------------------------------------------------------
    def _begin_value(self, c: str) -> bool:
        self.started = True
        if c == "{":
            self.stack.append(O_KEY)
            self.sink.begin_object()
        elif c == "[":
            self.stack.append(A_VALUE)
            self.sink.begin_array()
        elif c == '"' or c == "'":
            self._begin_string(c, False)
        elif c in _NUM_START:
            self.mode = NUM
            self.buf = []
        elif c in _WORD_START:
            self.mode = WORD
            self.buf = []
        else:
            return False
        return True

    def _value_done(self) -> None:
        if not self.stack:
            self.done = True
        elif self.stack[-1] == O_VALUE:
            self.stack[-1] = O_NEXT
        else:
            self.stack[-1] = A_NEXT

    def _close(self) -> None:
        state = self.stack.pop()
        if state <= O_NEXT:
            self.sink.end_object()
        else:
            self.sink.end_array()
        self._value_done()

    def _mismatched(self, c: str) -> bool:
        """A closer of the wrong kind: close up to the matching container if there is one."""
        want = (O_KEY, O_COLON, O_VALUE, O_NEXT) if c == "}" else (A_VALUE, A_NEXT)
        if not any(st in want for st in self.stack):
            self.failed = True
            return False
        while self.stack[-1] not in want:
            if self.stack[-1] == O_VALUE:
                self.sink.scalar(None)
            self._close()
        return True

    # -- strings ---------------------------------------------------------------------------
    def _begin_string(self, quote: str, is_key: bool) -> None:
        self.started = True
        self.mode = STR
        self.quote = quote
        self.is_key = is_key
        if is_key:
            self.buf = []
        else:
            self.sink.begin_string()

    def _text(self, t: str) -> None:
        if self.high:
            t = "\ufffd" + t
            self.high = ""
        if self.is_key:
            self.buf.append(t)
            if sum(map(len, self.buf)) > MAX_KEY:
                self.failed = True
        else:
            self.sink.string_chunk(t)

    def _codepoint(self, cp: int) -> None:
        if 0xD800 <= cp < 0xDC00:
            if self.high:
                self._text("")
            self.high = chr(cp)
        elif 0xDC00 <= cp < 0xE000:
            if self.high:
                hi = ord(self.high)
                self.high = ""
                self._text(chr(0x10000 + ((hi - 0xD800) << 10) + (cp - 0xDC00)))
            else:
                self._text("\ufffd")
        else:
            self._text(chr(cp))

    def _end_string(self) -> None:
        if self.high:
            self._text("")
        self.mode = NONE
        if self.is_key:
            self.is_key = False
            self.stack[-1] = O_COLON
            self.sink.key("".join(self.buf))
        else:
            self.sink.end_string()
            self._value_done()

    def _emit_string(self, text: str) -> None:
        self.sink.begin_string()
        if text:
            self.sink.string_chunk(text)
        self.sink.end_string()
        self._value_done()

    # -- numbers and words -------------------------------------------------------------------
    def _end_number(self) -> None:
        self.mode = NONE
        text = "".join(self.buf)
        value = parse_number(text)
        if value is None:
            self._emit_string(text)
        else:
            self.sink.scalar(value)
            self._value_done()

    def _end_word(self) -> None:
        word = "".join(self.buf)
        if word in _LITERALS:
            self.mode = NONE
            self.sink.scalar(_LITERALS[word])
            self._value_done()
        else:
            self.mode = BARE  # an unquoted string: read on to the next delimiter

    def _end_bare(self) -> None:
        self.mode = NONE
        self._emit_string("".join(self.buf).rstrip())


_INT_RE = re.compile(r"[-+]?\d+")


def parse_number(text: str) -> int | float | None:
    """A JSON-ish number, or None when `text` is not one (or not finite)."""
    if _INT_RE.fullmatch(text):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
