"""A leading thinking block split from the answer: its text as `Reasoning` events, the rest handed
to the answer's parser (toolbridge.parsing.stream.StreamParser, or plain text).

Where the template's generation prompt opened the block (`opened`), the model's text starts inside
it; otherwise a block opens only where the answer's first characters (whitespace aside) are the open
marker. Thinking is never content, and a call written inside it is not a call: only the text after
the close marker is the answer. A block the text never closes (cut by max_tokens, or ended by the
model) is thinking to its end. Every decision depends on the characters seen so far, so a stream
split anywhere gives the same events as the whole text; a possible marker is held back until decided.
"""
from __future__ import annotations

from typing import Protocol

from ..events import Content, Event, Reasoning
from ..thinking import DEFAULT_THINKING, Thinking

BEFORE, INSIDE, ANSWER = range(3)


class AnswerParser(Protocol):
    def feed(self, delta: str) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


class PlainText:
    """The answer's parser for a plain answer: its text is content."""

    def feed(self, delta: str) -> list[Event]:
        return [Content(delta)] if delta else []

    def finish(self) -> list[Event]:
        return []


class ThinkingSplit:
    """Feed deltas, get events; call `finish` when the text ends (the answer parser's interface)."""

    def __init__(self, answer: AnswerParser, thinking: Thinking = DEFAULT_THINKING, opened: bool = False):
        self.answer, self.thinking = answer, thinking
        self.state = INSIDE if opened else BEFORE
        self.pending = ""
        self.trim = False  # whitespace right after the close marker is not the answer's

    def feed(self, delta: str) -> list[Event]:
        if self.state == ANSWER:
            return self._answer(delta)
        self.pending += delta
        return self._scan(final=False)

    def finish(self) -> list[Event]:
        return (self._scan(final=True) if self.state != ANSWER else []) + self.answer.finish()

    def _scan(self, final: bool) -> list[Event]:
        if self.state == BEFORE:
            head = self.pending.lstrip()
            opener = self.thinking.open
            if head.startswith(opener):
                self.state, self.pending = INSIDE, head[len(opener):]
            elif opener.startswith(head) and not final:
                return []  # whitespace, or the open marker's beginning: not decided yet
            else:
                self.state, text, self.pending = ANSWER, self.pending, ""
                return self._answer(text)
        close = self.thinking.close
        at = self.pending.find(close)
        if at >= 0:
            text, rest = self.pending[:at], self.pending[at + len(close):]
            self.state, self.pending, self.trim = ANSWER, "", True
            return ([Reasoning(text)] if text else []) + self._answer(rest)
        keep = 0 if final else _held(self.pending, close)
        text = self.pending[:len(self.pending) - keep]
        self.pending = self.pending[len(text):]
        return [Reasoning(text)] if text else []

    def _answer(self, text: str) -> list[Event]:
        if self.trim:
            text = text.lstrip()
            if not text:
                return []
            self.trim = False
        return self.answer.feed(text) if text else []


def _held(text: str, marker: str) -> int:
    """How many characters at the end of `text` may begin `marker` (held back until decided)."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0
