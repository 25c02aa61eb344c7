"""An answer ends after its calls: once a call is complete, an `auto` answer may only go on with
another call (where parallel calls are allowed) or end.

A model without a tool template does not stop after its call: it explains it, or writes the call's
result itself before any tool has run ("The weather in Paris is 22°C"). Here the engines hold the
next token, after a complete call, to what may lead to another call or to the end:
- whitespace and what separates or closes calls (`,` `]` `}` between bare JSON calls, the dialect's
  closing markup such as `</tool_call>`, a code fence's close): the `gaps`;
- the texts that arm a call's constraint (toolbridge.constrain.grammar.entries: the dialect's trigger, and a
  bare JSON call naming a declared tool), written from their start; none when parallel calls are off;
- the end of the turn (the engine's end tokens).
Once a trigger is written, the call's constraint takes over until the call is complete; text that can
lead nowhere else (more than MAX_GAP characters of gaps, or a start no trigger has) leaves only the
end. Which texts may follow is decided on the text after the last call (`tail`), so every tokenization
of a trigger is read alike; the tokens tried are those the triggers and closing markup encode to.
"""
from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from ..memo import Memo

# One piece of what may separate calls: whitespace, a list's comma or close, a stray closing brace.
_GAP_CHARS = re.compile(r"[\s,\]}]+")
MAX_GAP = 48  # characters of separating text after a call: past them only the end may follow

GAP, PART, ARMED, END = "gap", "part", "armed", "end"


@dataclass(frozen=True)
class Follow:
    """What may follow a complete call: `closes`, the closing markup a call may end with; `triggers`,
    the texts that start another call (empty: the answer ends after its first call)."""

    closes: tuple[str, ...]
    triggers: tuple[str, ...]

    @cached_property
    def _prefixes(self) -> frozenset[str]:
        return frozenset(t[:k] for t in (*self.closes, *self.triggers) for k in range(1, len(t)))

    @cached_property
    def _triggers(self) -> frozenset[str]:
        return frozenset(self.triggers)

    @cached_property
    def _longest(self) -> int:
        return max(map(len, self.triggers), default=0)

    def state(self, tail: str) -> tuple[str, str]:
        """What the text after the last complete call is: (GAP, ""): separating text only; (PART,
        rest): then `rest`, the start of a closing markup or a trigger; (ARMED, ""): a trigger is
        written, the call's constraint takes over; (END, ""): nothing but the end may follow."""
        i, n = 0, len(tail)
        while i < n:
            m = _GAP_CHARS.match(tail, i)
            if m is not None:
                i = m.end()
                continue
            close = next((c for c in self.closes if tail.startswith(c, i)), None)
            if close is None:
                break
            i += len(close)
        if i == n:
            return (GAP, "") if n <= MAX_GAP else (END, "")
        rest = tail[i:]
        triggers = self._triggers
        if any(rest[:k] in triggers for k in range(1, min(len(rest), self._longest) + 1)):
            return ARMED, ""
        return (PART, rest) if rest in self._prefixes else (END, "")


@dataclass(frozen=True)
class Ending:
    """A vocabulary's tokens for one `Follow`: `gaps`, the tokens whose text is separating text
    only; `pieces`, each token a closing markup or a trigger is written with, and its text;
    `index`, the vocabulary's texts sorted, with their ids (`Vocabulary.by_text`): the tokens that
    finish a closing markup or a trigger and run past its end (`",` after a bare call's name) are
    looked up there."""

    follow: Follow
    gaps: tuple[int, ...]
    pieces: tuple[tuple[int, str], ...]
    index: tuple[Sequence[str], Sequence[int]] = ((), ())

    def __post_init__(self) -> None:
        object.__setattr__(self, "_after", Memo(256))

    @classmethod
    def build(cls, follow: Follow, texts: Sequence[str], index: tuple[Sequence[str], Sequence[int]] = ((), ()),
              gaps: tuple[int, ...] | None = None) -> "Ending":
        """The tables for `follow` in a vocabulary (`texts`: each token's text; `gaps`: its
        `gap_tokens`, kept per vocabulary, else found here): a token is a piece when its text occurs
        in a closing markup or a trigger (with a space or a newline before it), so every tokenization
        of them is tried, not only the tokenizer's own."""
        if gaps is None:
            gaps = gap_tokens(texts)
        inside = {w[i:j] for text in (*follow.closes, *follow.triggers) for w in (text, " " + text, "\n" + text)
                  for i in range(len(w)) for j in range(i + 1, len(w) + 1)}
        pieces = tuple((t, text) for t, text in enumerate(texts) if text in inside and not _GAP_CHARS.fullmatch(text))
        return cls(follow, gaps, pieces, index)

    def allowed(self, tail: str) -> tuple[int, ...] | None:
        """The tokens (besides the end) that may come next after `tail`, the text after the
        answer's last complete call; None where no hold applies (a trigger is written)."""
        kind, rest = self.follow.state(tail)
        if kind == ARMED:
            return None
        if kind == END:
            return ()
        room = MAX_GAP - len(tail)
        return self._after.get((kind, rest, room > 0), lambda: self._next(kind, rest, room > 0))  # type: ignore[attr-defined]

    def _next(self, kind: str, rest: str, room: bool) -> tuple[int, ...]:
        state, follow = self.follow.state, self.follow
        tried = dict(self.pieces)
        keys, ids = self.index
        for text in (*follow.closes, *follow.triggers):
            if len(text) > len(rest) and text.startswith(rest):  # tokens that finish it and go on
                left = text[len(rest):]
                lo, hi = bisect_left(keys, left), bisect_left(keys, left + "\U0010ffff")
                tried.update((ids[k], keys[k]) for k in range(lo, hi))
        ok = [t for t, text in tried.items() if state(rest + text)[0] != END]
        return (*self.gaps, *ok) if kind == GAP and room else tuple(ok)


def gap_tokens(texts: Sequence[str]) -> tuple[int, ...]:
    """The tokens whose text is separating text only (whitespace, `,` `]` `}`): the same for every
    Follow of a vocabulary."""
    return tuple(t for t, text in enumerate(texts) if text and _GAP_CHARS.fullmatch(text))


def closes(close: str, calls_close: str) -> tuple[str, ...]:
    """The closing markup a dialect's call may end with (its close marker, the calls' close), and a
    code fence's close (a model may fence its call)."""
    return tuple(dict.fromkeys(c.strip() for c in (close, calls_close, "```") if c.strip()))
