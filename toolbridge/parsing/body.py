"""The stream parser's part around a call body (toolbridge.parsing.stream.StreamParser): what
follows a marker up to the call's JSON (whitespace, a code fence and its language tag), the body read
by `callobj.CallObjectReader` over a `lenient.LenientReader`, and what follows it (stray closers, the
fence's end and the close marker); where it turns out not to be a call, the held text is content."""
from __future__ import annotations

import re
from typing import Any

from .callobj import CallObjectReader
from ..dialects import BARE_JSON, FENCE, Dialect
from ..lenient import WS, LenientReader

# An answer that ends inside a call's start (`<tool_c`, `{"na`; cut by max_tokens, or ended there) shows none
# of it: a start is no content. At least two characters of it, as one `<` or `{` also ends plain text.
MIN_PARTIAL = 2

# what the scanner is reading
CONTENT, OPEN, JSON_BODY, AFTER, REACT, DISCARD = range(6)
_LANG = re.compile(r"[A-Za-z0-9_-]*")  # a code fence's language tag


class BodyScanning:
    def _open(self, s: str, i: int, final: bool) -> int:
        """Between a marker and its JSON: whitespace, and maybe a code fence with a language tag."""
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
                self._begin_body(self.dialect, keep_held=True)
                return i
            if c == "`" and not self.fenced:
                if s.startswith(FENCE, i):
                    i += len(FENCE)
                    self.fenced = self.lang = True
                    continue
                if not final and FENCE.startswith(s[i:]):
                    break
            self.held.append(s[start:i])
            self._fail()
            return i
        self.held.append(s[start:i])
        return i

    def _begin_body(self, dialect: Dialect, keep_held: bool = False, slot: Any = None) -> None:
        self.dialect = dialect
        if not keep_held:
            self.held = []
            self.fenced = False
        self.body = CallObjectReader(self.book, slot, bare=not (dialect.open or keep_held))
        self.reader = LenientReader(self.body)
        self.body.reader = self.reader
        self.mode = JSON_BODY

    def _json(self, s: str, i: int) -> int:
        j = self.reader.feed(s, i)
        if not self.body.committed:
            self.held.append(s[i:j])
        self._after_body(final=False)
        return j

    def _after_body(self, final: bool) -> None:
        body, reader = self.body, self.reader
        if body.failed or (reader.failed and not body.committed):
            self._fail()
            return
        if not (reader.failed or reader.done or final):
            return
        body.abort()
        if self.react is not None:
            self._end_react(complete=reader.done and not reader.repaired)
        elif reader.done and (self.dialect.close or self.fenced):
            self.mode = AFTER
        else:
            self._to_content()

    def _to_content(self) -> None:
        self.mode = CONTENT
        self.held = []
        self.fenced = False
        self.line_start = False

    def _tagged_start(self) -> bool:
        """The text ended after a call tag before a call in it counted (cut before the tool's name)."""
        d = self.dialect
        return (d is not None and bool(d.open) and d.open.startswith("<") and "".join(self.held).startswith(d.open)
                and not (self.mode == JSON_BODY and self.body.committed))

    def _partial_start(self) -> bool:
        """The text ended inside a bare JSON call's opening (`{"na`): at least MIN_PARTIAL characters
        of `{"name": "`, and no more."""
        held = "".join(self.held).lstrip()
        opening = BARE_JSON.call[0]
        return (self.mode == JSON_BODY and not self.body.committed and MIN_PARTIAL <= len(held) < len(opening)
                and opening.startswith(held))

    def _drop_start(self) -> None:
        self.held = []
        self.ws = ""
        self.mode = CONTENT
        self.fenced = self.lang = False

    def _fail(self) -> None:
        """The held text was not a call after all: it is content."""
        held = "".join(self.held)
        self.held = []
        d = self.dialect
        if d is not None and d.open and d.close and held.startswith(d.open):
            self.unclosed = d.close
        self.mode = CONTENT
        self.fenced = self.lang = False
        self.react = None
        if held:
            self._plain(held)

    def _after(self, s: str, i: int, final: bool) -> int:
        """After a call's JSON: stray closers and whitespace, then the fence and close markers."""
        n = len(s)
        while i < n:
            c = s[i]
            if c in WS:
                i = self._space_run(s, i)
                continue
            if c == "}" or c == "]":
                i += 1
                continue
            if self.fenced:
                if s.startswith(FENCE, i):
                    self.fenced = False
                    self.ws = ""
                    i += len(FENCE)
                    if not self.dialect.close:
                        self._to_content()
                        return i
                    continue
                if FENCE.startswith(s[i:]):
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
