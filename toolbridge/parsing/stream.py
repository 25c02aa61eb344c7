"""The parser: model text in (whole or in deltas), content and tool-call events out.

One state machine serves both uses: `parse.parse` feeds it the whole text at once, a server
feeds it deltas. Every decision depends on the characters seen so far, never on where the
deltas were split, so a stream and a non-stream give the same answer. Text that cannot begin
a marker goes out as content at once; a possible marker is held back until it is decided,
and released as content when it turns out not to be a call. Work is amortized O(1) per
character: nothing is re-read when a delta arrives.

This module is the scanner (content and markers); what surrounds a call body and the body itself
are `body.BodyScanning`'s (a call body is read by `callobj.CallObjectReader` over a
`lenient.LenientReader`), a ReAct call `react.ReactReader`'s; `calls.CallBook` starts and ends the calls. Every marker comes from the
dialects (dialects.py).

Whitespace next to a call is not content: the run before a call is dropped, and so is the run
after it unless content came before the call and comes after it too.

After its first complete call, the answer may only go on with calls: text after a call is never
content (a model without a tool template goes on to explain its call or to write its result
itself, which no tool has produced); text before the first call stays content. `end_after_calls`
False keeps such text, as it was before this rule.

History markup (a tool result's marker or tags, a chat turn marker: markers.py) ends the answer
wherever the model writes it; the rest of the text is dropped, and so is the whitespace before
it. A call's close marker with no call open is dropped from content. A `markers.ContentGuard`
keeps history markup out of content put together from released or separated pieces.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from . import react
from .body import AFTER, CONTENT, DISCARD, JSON_BODY, MIN_PARTIAL, OPEN, REACT, BodyScanning
from .calls import CallBook
from .callobj import CallObjectReader
from ..dialects import Dialect
from ..events import Content, Event, merge, new_call_id
from ..lenient import WS, LenientReader
from .markers import K_END, K_LABEL, K_OPEN, K_STRAY, WAIT, ContentGuard, Marker, markers
from ..tools import ToolChoice, normalize_tools


PARTIAL = object()  # `_match`: the text ends inside a call's start marker (body.MIN_PARTIAL)


class StreamParser(BodyScanning, react.ReactScanning):
    """Feed deltas, get events; call `finish` when the text ends.

    tools: the declared tools (OpenAI dicts or `Tool`s); only calls naming one of them count.
    choice: a named choice restricts calls to that tool. max_calls: 1 when parallel calls are
    off; later calls are read and dropped. id_factory: makes call ids. dialects: the formats
    read (all of them by default). end_after_calls: text after a complete call is not content.
    """

    def __init__(self, tools: Sequence[Any], *, choice: ToolChoice | None = None,
                 max_calls: int | None = None, id_factory: Callable[[], str] = new_call_id,
                 dialects: Iterable[Dialect] | None = None, end_after_calls: bool = True):
        allowed = {choice.name} if choice is not None and choice.mode == "named" and choice.name else None
        self.events: list[Event] = []
        self.book = CallBook(normalize_tools(tools), allowed, max_calls, id_factory, self.events, self._call_started)
        self.markers = markers(dialects)
        self.guard = ContentGuard(self.markers)
        self.near_end = self.markers.end_near.search  # ContentGuard's quick test, inlined
        self.pending = ""
        self.mode = CONTENT
        self.ws = ""  # whitespace held until it is known whether it is content
        self.line_start = True
        self.after_label = False
        self.content_emitted = False
        self.held: list[str] = []  # a possible call's text so far, content if it is none
        self.unclosed = ""  # the close marker of an open marker that was content: it is content too
        self.dialect: Dialect | None = None
        self.fenced = False
        self.lang = False
        self.reader: LenientReader | None = None
        self.body: CallObjectReader | None = None
        self.react: react.ReactReader | None = None
        self.finished = False
        self.end_after_calls = end_after_calls

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
            if self.mode == REACT:
                self._react("", 0, final=True)
                if self.mode == REACT:
                    self._end_react(complete=True)
            elif self.mode in (JSON_BODY, OPEN) and (self._tagged_start() or self._partial_start()):
                self._drop_start()
            elif self.mode == JSON_BODY:
                self.reader.finish()
                self._after_body(final=True)
            elif self.mode == OPEN:
                self._fail()
            if self.pending:
                self._run(final=True)
            if self.ws and not self.book.started:
                self._text("")
            rest = self.guard.flush()
            if rest and not self._closed:
                self.events.append(Content(rest))
        return self._take()

    @property
    def _closed(self) -> bool:
        """Whether content is over: a call has ended, and text after calls is not content."""
        return self.end_after_calls and bool(self.book.ended)

    # -- the loop -----------------------------------------------------------------------------
    def _take(self) -> list[Event]:
        out = merge(self.events[:])
        self.events.clear()
        return out

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
            elif mode == REACT:
                j = self._react(s, i, final)
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
            if self.content_emitted or not self.book.started:
                t = self.ws + t
            self.ws = ""
        if t:
            closed = self._closed  # text after a call is still read for history markup, not shown
            if self.guard.hold or self.near_end(t) is not None:
                out, cut = self.guard.feed(t)
                if out and not closed:
                    self.events.append(Content(out))
                if cut:
                    self._end()
            elif not closed:
                self.events.append(Content(t))
            self.content_emitted = True
            k = t.rfind("\n")
            if k >= 0:
                self.line_start = not t[k + 1:].strip(" \t")
            elif t.strip(" \t"):
                self.line_start = False

    def _space_run(self, s: str, i: int) -> int:
        """Hold the whitespace run starting at s[i]; returns where it ends."""
        k = i + 1
        n = len(s)
        while k < n and s[k] in WS:
            k += 1
        self._space(s[i:k])
        return k

    def _space(self, run: str) -> None:
        if self.after_label:
            run = run.lstrip(" \t")
            if not run:
                return
            self.after_label = False
        self.ws += run
        if "\n" in run:
            self.line_start = True

    def _call_started(self) -> None:
        self.ws = ""  # whitespace before a call is not content
        self.unclosed = ""
        if self.end_after_calls and not self._closed:  # no later content can complete markup held back
            rest = self.guard.flush()
            if rest:
                self.events.append(Content(rest))

    def _content(self, s: str, i: int, final: bool) -> int:
        n = len(s)
        trigger = self.markers.trigger
        bare = self.markers.bare is not None
        start = i  # s[start:i] is content not yet emitted; it holds no whitespace
        while True:
            m = trigger.search(s, i)
            if m is None:
                break
            j = m.start()
            c = s[j]
            if c in WS:
                if start < j:
                    self._plain(s[start:j])
                    if self.mode != CONTENT:  # history markup in the content (ContentGuard)
                        return j
                i = start = self._space_run(s, j)
                continue
            if start < j:
                self.line_start = False  # s[j] comes after plain text on its line
            marker = self._match(s, j, final)
            if marker is None and not (bare and (c == "{" or c == "[")):
                i = j + 1  # plain after all
                continue
            if start < j:
                self._plain(s[start:j])
                if self.mode != CONTENT:
                    return j
            if marker is WAIT:
                return j
            if marker is PARTIAL:  # the text ends inside a call's start marker: none of it is content
                self.ws = ""
                return n
            if marker is not None:
                return self._on_marker(marker, s, j)
            self._begin_body(self.markers.bare)
            return j
        if start < n:
            self._plain(s[start:])
        return n

    def _plain(self, t: str) -> None:
        if self.after_label:
            self.after_label = False
        self._text(t)

    def _match(self, s: str, j: int, final: bool) -> Any:
        """The longest marker at s[j:], WAIT while a longer one may still come, or None."""
        best: Marker | None = None
        rest = len(s) - j
        table = self.markers
        for mk in table.by_two.get(s[j:j + 2], ()) if rest > 1 else table.by_first.get(s[j], ()):
            if (mk.line_start and not self.line_start) or (mk.after_call and not self.book.started):
                continue
            t = mk.text
            if rest >= len(t):
                if s.startswith(t, j) and (best is None or len(t) > len(best.text)):
                    best = mk
            elif t.startswith(s[j:]):
                if not final:
                    return WAIT
                if mk.kind == K_OPEN and rest >= MIN_PARTIAL:
                    return PARTIAL
        return best

    def _on_marker(self, mk: Marker, s: str, j: int) -> int:
        end = j + len(mk.text)
        if mk.kind == K_LABEL:
            self.after_label = True
            return end
        if mk.kind == K_STRAY:  # a close marker with no call open
            if mk.text == self.unclosed:
                self.unclosed = ""
                self._plain(mk.text)
            return end
        if mk.kind == K_END:
            self._end()
            return len(s)
        d = mk.dialect
        self.dialect = d
        self.held = [mk.text]
        if d.react:
            self.mode = REACT
            self.react = react.ReactReader(d, self.book)
        else:
            self.mode = OPEN
            self.fenced = self.lang = d.fenced
        return end

    def _end(self) -> None:
        """History markup: the model writes a tool's result or a new turn itself, so its answer has ended."""
        self.mode = DISCARD
        self.ws = ""
