"""The JSON structure of an answer's calls, read character by character as they are generated.

The engines' logit rules inside a call (toolbridge.steer.callguard) need to know where generation is: in a
string, at the arguments object's level after a value, which tool is called, which of its
arguments are written. Every dialect whose call is a JSON object holding the name and the
arguments (tags, json, toolcall, and the bare JSON call) is read alike; text outside a JSON
object, and other dialects' calls, only leave the reader where it was.

Only a call counts: where the reader knows the request's tools (`names`), an object that names
another tool, or none, is text like any other (the parser keeps it as text too), so no rule that
counts calls (the end after calls, the next-call bias, the repeat rule) starts after it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..dialects import ARGS_KEYS, NAME_KEYS

KEY, COLON, VALUE, AFTER = "key", "colon", "value", "after"  # what an object expects next
_PLAIN = re.compile(r'[^"\\]+')  # inside a string: characters that neither end it nor escape
OUTSIDE_KEPT = 32  # how much text after a call `outside` keeps (a call's closing markup is shorter)


@dataclass
class Level:
    object: bool
    expect: str = KEY
    key: str | None = None


@dataclass
class CallReader:
    stack: list[Level] = field(default_factory=list)
    in_string: bool = False
    escape: bool = False
    value: str = ""  # the current string's text so far
    name: str | None = None  # the tool the current call names
    args_depth: int = 0  # the arguments object's depth in the stack (0: not open)
    keys: set[str] = field(default_factory=set)  # the arguments written so far (their keys)
    outside: str = ""  # the text outside any object since the last call closed (longer than OUTSIDE_KEPT: cut there, +1)
    text: str = ""  # the current top-level object's text so far, whitespace outside strings left out
    written: set[str] = field(default_factory=set)  # the text of each call closed so far
    repeated: bool = False  # the last call closed has the same text as an earlier one
    called: list[str] = field(default_factory=list)  # the name of each call closed so far ("" for none)
    names: frozenset[str] | None = None  # the declared tools: an object naming another is no call (None: any)

    def copy(self) -> "CallReader":
        return CallReader([Level(lv.object, lv.expect, lv.key) for lv in self.stack], self.in_string, self.escape,
                          self.value, self.name, self.args_depth, set(self.keys), self.outside,
                          self.text, set(self.written), self.repeated, list(self.called), self.names)

    @property
    def calls(self) -> int:
        """Call objects closed so far."""
        return len(self.called)

    @property
    def in_arguments(self) -> bool:
        """Whether generation is at the arguments object's own level (not in a nested value)."""
        return bool(self.args_depth) and len(self.stack) == self.args_depth

    @property
    def key(self) -> str | None:
        """At the arguments' level: the key of the value being written."""
        return self.stack[-1].key if self.in_arguments else None

    def feed(self, text: str) -> None:
        i, n = 0, len(text)
        while i < n:
            if self.in_string:
                if not self.escape:  # a string's plain run, read at once
                    plain = _PLAIN.match(text, i)
                    if plain is not None:
                        self.value += plain.group()
                        self.text += plain.group()
                        i = plain.end()
                        continue
            elif not self.stack:  # outside any object only an opening brace counts
                at = text.find("{", i)
                if self.calls:
                    self.outside = (self.outside + text[i:at if at >= 0 else n])[:OUTSIDE_KEPT + 1]
                if at < 0:
                    return
                i = at
            self.step(text[i])
            i += 1

    def step(self, c: str) -> None:
        if (self.stack or c == "{") and (self.in_string or not c.isspace()):
            self.text += c
        if self.in_string:
            self._in_string(c)
            return
        top = self.stack[-1] if self.stack else None
        if top is None:
            if c == "{":
                self.stack.append(Level(True))
                self.name, self.args_depth, self.keys, self.text = None, 0, set(), "{"
        elif c == '"':
            self.in_string, self.value = True, ""
        elif c in "{[":
            parent_key = top.key if top.object else None
            top.expect = AFTER if top.object else top.expect
            self.stack.append(Level(c == "{"))
            if c == "{" and len(self.stack) == 2 and parent_key in ARGS_KEYS:
                self.args_depth = 2
        elif c in "}]":
            if len(self.stack) == self.args_depth:
                self.args_depth = -1  # closed: the call is written
            self.stack.pop()
            if self.stack:
                return
            if self.args_depth == -1 and (self.names is None or self.name in self.names):
                self.called.append(self.name or "")
                self.outside = ""
                self.repeated = self.text in self.written
                self.written.add(self.text)
            elif self.calls:  # an object that is no call: text after the last call like any other
                self.outside = (self.outside + self.text)[:OUTSIDE_KEPT + 1]
        elif c == ":" and top.object:
            top.expect = VALUE
        elif c == ",":
            if top.object:
                top.expect = KEY
        elif not c.isspace() and top.object and top.expect == VALUE:
            top.expect = AFTER  # a number or literal

    def _in_string(self, c: str) -> None:
        if self.escape:
            self.escape = False
            self.value += c
        elif c == "\\":
            self.escape = True
            self.value += c
        elif c == '"':
            self.in_string = False
            self._string_ended()
        else:
            self.value += c

    def _string_ended(self) -> None:
        top = self.stack[-1]
        if not top.object:
            return
        if top.expect == KEY:
            top.key, top.expect = self.value, COLON
            if self.in_arguments:
                self.keys.add(self.value)
        elif top.expect == VALUE:
            top.expect = AFTER
            if len(self.stack) == 1 and top.key in NAME_KEYS:
                self.name = self.value
