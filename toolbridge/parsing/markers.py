"""The markers of a set of dialects, in one table the scanner (stream.py) looks them up in.

A marker opens a call (`<tool_call>`, `TOOL_CALL:`, `Action:`, a code fence), is a label
dropped from content (`Thought:`), is a call's close marker with no call open or a thinking marker
after the thinking (dropped), or is
history markup the model should not write: a tool result's marker or tags (`<tool_response>`,
`</tool_response>`) or a chat format's turn marker (TURN_MARKERS). At history markup the
answer ends. The table is built once per set of dialects.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ..dialects import DIALECTS, Dialect
from ..lenient import WS
from ..memo import Memo
from ..thinking import THINKING

# marker kinds
K_OPEN, K_LABEL, K_END, K_STRAY = range(4)

# The turn markup of the chat formats toolbridge serves (ChatML, Phi-3, Zephyr, OLMo 2, Llama 2
# and 3, Mistral, Gemma). A model writing one has ended its turn: what follows is not its answer.
# render.GUARDED breaks each of them in prompt content (tests/test_parse.py checks that).
TURN_MARKERS = ("<|im_start|>", "<|im_end|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>",
                "<|endoftext|>", "<|eot_id|>", "<|start_header_id|>", "<start_of_turn>", "<end_of_turn>",
                "[INST]", "[/INST]", "<</SYS>>", "</s>")

# Plain words ("Result of ", "Observation") may open an ordinary answer: as history markup they
# count only once a call has started.
_PROSE = re.compile(r"[A-Za-z][A-Za-z ]*")
_TAG = re.compile(r"<[^<>\s]+>")


@dataclass(frozen=True)
class Marker:
    text: str
    kind: int
    dialect: Dialect | None  # None for a turn marker
    line_start: bool
    after_call: bool = False  # counts only once a call has started


def history(d: Dialect) -> list[str]:
    """The markup a dialect writes a tool result in: its result marker and the tags around a result."""
    return ([d.result_marker] if d.result_marker else []) + _TAG.findall("".join(d.result))


def plain_stops(d: Dialect) -> list[str]:
    """Where an answer without calls (tool_choice `none` with tools in play) ends: the dialect's
    call and result tags, which a model that copies its history writes (plain words and code fences
    are left to the answer)."""
    return [m for m in dict.fromkeys([d.open, *history(d)]) if m and _TAG.fullmatch(m)]


class MarkerTable:
    """The marker table for a set of dialects, built once per set."""

    def __init__(self, dialects: Iterable[Dialect]):
        found: dict[tuple[str, int], Marker] = {}
        self.bare: Dialect | None = None  # the dialect whose calls may start with a bare { or [
        for d in dialects:
            if d.open:
                found.setdefault((d.open, K_OPEN), Marker(d.open, K_OPEN, d, d.line_start))
            if d.close:
                found.setdefault((d.close, K_STRAY), Marker(d.close, K_STRAY, d, False))
            for label in d.labels:
                found.setdefault((label, K_LABEL), Marker(label, K_LABEL, d, True))
            for text in history(d):
                found.setdefault((text, K_END), Marker(text, K_END, d, d.line_start, bool(_PROSE.fullmatch(text))))
            if d.bare and self.bare is None:
                self.bare = d
        for text in TURN_MARKERS:
            found.setdefault((text, K_END), Marker(text, K_END, None, False))
        for t in THINKING.values():  # a thinking marker in the answer is markup, never content
            for text in (t.open, t.close):
                found.setdefault((text, K_STRAY), Marker(text, K_STRAY, None, False))
        self.by_first: dict[str, list[Marker]] = {}
        self.by_two: dict[str, list[Marker]] = {}  # every marker is at least two characters long
        for m in found.values():
            self.by_first.setdefault(m.text[0], []).append(m)
            self.by_two.setdefault(m.text[:2], []).append(m)
        chars = set(self.by_first) | set(WS) | ({"{", "["} if self.bare else set())
        self.trigger = re.compile("[" + re.escape("".join(sorted(chars))) + "]")
        # what ContentGuard looks for: the history markup that ends an answer wherever it is
        ends = sorted({m.text for m in found.values() if m.kind == K_END and not (m.line_start or m.after_call)},
                      key=len, reverse=True)
        self.end_texts = tuple(ends)  # longest first, so that the pattern takes the longest
        self.ends = re.compile("|".join(map(re.escape, self.end_texts)))
        self.end_first = re.compile("[" + re.escape("".join(sorted({e[0] for e in ends}))) + "]")
        # where one may begin: its first two characters, or its first at the end of the text
        near = {re.escape(e[:2]) for e in ends} | {re.escape(e[0]) + r"\Z" for e in ends}
        self.end_near = re.compile("|".join(sorted(near)))
        self.end_prefixes = frozenset(e[:k] for e in ends for k in range(1, len(e)))
        self.end_reach = max(map(len, ends)) - 1  # the longest proper prefix


_TABLES: Memo[MarkerTable] = Memo(16)


def markers(dialects: Iterable[Dialect] | None) -> MarkerTable:
    """The marker table of these dialects (default: all), built once per set of dialects."""
    ds = tuple(dialects) if dialects is not None else tuple(DIALECTS.values())
    return _TABLES.get(tuple(d.name for d in ds), lambda: MarkerTable(ds))


class ContentGuard:
    """Content on its way out, cut at the first history markup in it.

    The scanner ends the answer at history markup in the model's text; the guard catches what
    forms only in the content itself: held text released as content once it was no call, and
    content put together across a call or a dropped marker. The end of the content that may
    begin a marker is held until the next content (or the end of the text) decides it.
    """

    __slots__ = ("table", "hold")

    def __init__(self, table: MarkerTable):
        self.table = table
        self.hold = ""

    def feed(self, t: str) -> tuple[str, bool]:
        """The content that can go out now, and whether history markup cut it there."""
        tb = self.table
        if not self.hold and tb.end_near.search(t) is None:
            return t, False
        s = self.hold + t
        m = tb.ends.search(s)
        if m is not None:
            self.hold = ""
            return s[:m.start()], True
        k = len(s)
        for f in tb.end_first.finditer(s, max(0, k - tb.end_reach)):
            if s[f.start():] in tb.end_prefixes:
                k = f.start()
                break
        self.hold = s[k:]
        return s[:k], False

    def flush(self) -> str:
        """The text has ended: what is held is content."""
        out, self.hold = self.hold, ""
        return out


class TurnCut:
    """Text answered without tools (no parser in play), cut at the first chat turn marker: an
    engine that keeps special tokens in its text (vLLM's /derender does when a tool parser is
    configured) would otherwise show the model's `<|im_end|>` to the user."""

    __slots__ = ("guard", "cut")

    def __init__(self) -> None:
        self.guard = ContentGuard(markers(()))  # no dialects: the table of turn markers alone
        self.cut = False

    def feed(self, text: str) -> str:
        """What of this piece of text goes out now."""
        if self.cut:
            return ""
        out, self.cut = self.guard.feed(text)
        return out

    def finish(self) -> str:
        """The text has ended: what was held back."""
        return "" if self.cut else self.guard.flush()

    @classmethod
    def whole(cls, text: str) -> str:
        cut = cls()
        return cut.feed(text) + cut.finish()


class _Wait:
    pass


WAIT = _Wait()  # a longer marker may still come: wait for more text
