"""The loop guard: a string value of a constrained call that has started to repeat itself is
closed, so that the call can finish within max_tokens.

Under a call's constraint a weak model can loop inside a string value (SmolLM2-135M under
`required`: `"symbol": "NVDA_SCOPE_1_2_2023_2023_2023_2023...`) until max_tokens, and a call cut
off is no call. The guard reads the generated text after a call starts (from the answer's start
when the whole answer is constrained, else from the first call start: `starts`) and tracks the
JSON string it is in. When that string ends in one unit repeated (at least MIN_COPIES copies, over
at least MIN_RUN characters), the engines favour the tokens that begin with a quote for the next
token: the grammar allows a quote there only as the string's end, so the value is closed with what
was written so far and the call goes on under its constraint. A value that merely contains a
repeat shorter than MIN_RUN (`"1000000"`, `"ha ha ha"`) is left alone.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

MIN_RUN = 48  # characters at the end of a string that must be one unit repeated
MIN_COPIES = 3  # ... at least this many times (so units up to MIN_RUN // MIN_COPIES at MIN_RUN)
MAX_UNIT = 32  # the longest unit looked for (its run is MIN_COPIES * MAX_UNIT characters)
CLOSE_BIAS = 100.0  # added to the closing tokens' logits: finite, so a grammar's -inf stays -inf

ARG_GUARD = "toolbridge_loop_guard"  # per-request argument: the call starts ([]: armed at once)

# Texts whose first token closes a string (a tokenizer may merge the quote with what follows).
_CLOSING = ('"', '",', '", "', '"}', '"}}', '"]', '"},', '"\n')


def closers(encode: Callable[[str], list[int]]) -> tuple[int, ...]:
    """The token ids that begin with a string's closing quote, in a tokenizer's ids."""
    return tuple(dict.fromkeys(ids[0] for ids in map(encode, _CLOSING) if ids))


def loops(value: str) -> bool:
    """Whether `value` ends in one unit repeated over at least MIN_RUN characters."""
    for unit in range(1, MAX_UNIT + 1):
        run = max(MIN_RUN, MIN_COPIES * unit)
        if len(value) < run:
            return False
        tail = value[-run:]
        if tail[unit:] == tail[:-unit]:
            return True
    return False


class LoopGuard:
    """Feed the answer's text as it is generated; `looping` says when to close the string."""

    def __init__(self, starts: Sequence[str] = ()):
        self.starts = tuple(s for s in starts if s)
        self.armed = not self.starts  # no starts: the whole answer is a call
        self.before = ""  # unarmed: the end of the text, where a start may be forming
        self.in_string = False
        self.escape = False
        self.value = ""  # the current string's text so far

    def to_args(self) -> dict:
        return {ARG_GUARD: list(self.starts)}

    @classmethod
    def from_args(cls, args: Mapping[str, Any] | None) -> "LoopGuard | None":
        """A new guard for the request that carries one, or None."""
        starts = (args or {}).get(ARG_GUARD)
        return None if starts is None else cls([str(s) for s in starts])

    def feed(self, text: str) -> None:
        if not self.armed:
            text = self._arm(text)
        for c in text:
            if not self.in_string:
                if c == '"':
                    self.in_string, self.value = True, ""
            elif self.escape:
                self.escape = False
                self.value += c
            elif c == "\\":
                self.escape = True
                self.value += c
            elif c == '"':
                self.in_string = False
            else:
                self.value += c

    def _arm(self, text: str) -> str:
        """The part of `text` after the first call start (all of it is then read), or ''."""
        seen = self.before + text
        found = [(at, s) for s in self.starts if (at := seen.find(s)) >= 0]
        if not found:
            self.before = seen[-max(map(len, self.starts)):]
            return ""
        at, start = min(found)
        self.armed = True
        return seen[at + len(start):]

    @property
    def looping(self) -> bool:
        return self.in_string and not self.escape and len(self.value) >= MIN_RUN and loops(self.value)
