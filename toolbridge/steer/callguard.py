"""The guard of a call being generated: a string value that has started to repeat itself is
closed, so that the call can finish within max_tokens; and the arguments are closed, not extended
with optional ones nobody asked for, when the model only narrowly prefers going on.

Both read the generated text after a call starts (from the answer's start when the whole answer is
constrained, else from the first call start: `starts`) with one toolbridge.steer.callreader.CallReader.

Loops. Under a call's constraint a weak model can loop inside a string value (SmolLM2-135M under
`required`: `"symbol": "NVDA_SCOPE_1_2_2023_2023_2023_2023...`) until max_tokens, and a call cut
off is no call. When the string ends in one unit repeated (at least MIN_COPIES copies, over at
least MIN_RUN characters), the engines favour the tokens that begin with a quote for the next
token: the grammar allows a quote there only as the string's end, so the value is closed with what
was written so far and the call goes on under its constraint. A value that merely contains a
repeat shorter than MIN_RUN (`"1000000"`, `"ha ha ha"`) is left alone.

Optional arguments. A tool-trained model fills in optional arguments the user never gave
(Qwen2.5-Coder-0.5B: `"max_results": 10`, `"count": 5`, `"time": "14:00"`), whatever the prompt
says. Once every required argument is written, at a value's end, if the model's highest-ranked
token goes on to another argument (`",`), the tokens that end the arguments (`"}}`) get
`close_bias` nats (the policy's `close`; docs/steering.md has the margins it was set from). Only the
reader's own dialects are touched (a call object holding name and arguments); 0 turns it off.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from .callreader import AFTER, OUTSIDE_KEPT, VALUE, CallReader
from .ending import ARMED, Follow

MIN_RUN = 48  # characters at the end of a string that must be one unit repeated
MIN_COPIES = 3  # ... at least this many times (so units up to MIN_RUN // MIN_COPIES at MIN_RUN)
MAX_UNIT = 32  # the longest unit looked for (its run is MIN_COPIES * MAX_UNIT characters)
CLOSE_BIAS = 100.0  # added to the closing tokens' logits: finite, so a grammar's -inf stays -inf

# What may follow a call before another one starts: whitespace, and closing markup whole or begun (a
# dialect's end tag such as `</tool_call>`, a code fence).
_BETWEEN = re.compile(r"(?:\s|<(?:/[A-Za-z_]*>?)?|`{1,3})*")

# Texts whose first token closes a string (a tokenizer may merge the quote with what follows).
_CLOSING = ('"', '",', '", "', '"}', '"}}', '"]', '"},', '"\n')


# Texts whose first token may end a call's arguments (after a value, or closing a string value).
_ENDING = ("}", "}}", "}\n", "}}\n", "}}}", " }", " }}", '"}', '"}}', '"}\n', '"}}\n', '"}}}', '" }')


def closers(encode: Callable[[str], list[int]]) -> tuple[int, ...]:
    """The token ids that begin with a string's closing quote, in a tokenizer's ids."""
    return tuple(dict.fromkeys(ids[0] for ids in map(encode, _CLOSING) if ids))


def enders(encode: Callable[[str], list[int]], decode: Callable[[int], str]) -> tuple[tuple[int, str], ...]:
    """The tokens that may end a call's arguments, with their texts, in a tokenizer's ids."""
    ids = dict.fromkeys(ids[0] for ids in map(encode, _ENDING) if ids)
    return tuple((t, decode(t)) for t in ids)


def loops(value: str) -> bool:
    """Whether `value` ends in one unit repeated over at least MIN_RUN characters. (It runs at
    every token of a long string value: only the units after which the last character comes
    again are tried.)"""
    n = len(value)
    if n < MIN_RUN:
        return False
    last, lo = value[-1], max(0, n - 1 - MAX_UNIT)
    at = value.rfind(last, lo, n - 1)
    while at >= 0:
        unit = n - 1 - at
        run = max(MIN_RUN, MIN_COPIES * unit)
        if n >= run:
            tail = value[-run:]
            if tail[unit:] == tail[:-unit]:
                return True
        at = value.rfind(last, lo, at)
    return False


class CallGuard:
    """Feed the answer's text as it is generated; `changes` says what the next token's logits
    need: the string's closing quotes when it loops, the arguments' end when the model would go on
    past the required ones. `required`: each tool's required arguments (kept with the tool set,
    so taken as given)."""

    def __init__(self, starts: Sequence[str] = (), required: Mapping[str, Sequence[str]] | None = None,
                 close_bias: float = 0.0, follow: Follow | None = None, names: Sequence[str] | None = None):
        self.starts = tuple(s for s in starts if s)
        self.firsts = "".join(dict.fromkeys(s[0] for s in self.starts))  # a start begins with one of these
        self.armed = not self.starts  # no starts: the whole answer is a call
        self.before = ""  # unarmed: the end of the text, where a start may be forming
        self.names = None if names is None else tuple(names)  # the declared tools (None: any name is a call)
        self.reader = CallReader(names=None if names is None else frozenset(names))
        self.required = required or {}
        self.close_bias = float(close_bias)
        self.follow = follow  # what may follow a complete call (toolbridge.steer.ending); None: anything
        self.tail: str | None = None  # the text after the last complete call, until another call is armed

    def pack(self) -> dict:
        """The guard's settings as plain data, for `unpack`: "starts" (the call starts, []: armed at
        once), "names" (the declared tools, where known), "close" ([bias, {tool: its required arguments}],
        where the bias is not 0), "follow" ([closes, triggers]: toolbridge.steer.ending.Follow, where one is set)."""
        data: dict[str, Any] = {"starts": list(self.starts)}
        if self.names is not None:
            data["names"] = list(self.names)
        if self.close_bias:
            data["close"] = [self.close_bias, self.required]
        if self.follow is not None:
            data["follow"] = [list(self.follow.closes), list(self.follow.triggers)]
        return data

    @classmethod
    def unpack(cls, data: Mapping[str, Any] | None) -> "CallGuard | None":
        """A new guard with the settings `pack` made, or None (also for data not of toolbridge's
        making, as toolbridge.steer.steering.Steering.unpack)."""
        if not isinstance(data, Mapping):
            return None
        starts = data.get("starts")
        if starts is None:
            return None
        try:
            bias, required = data.get("close") or (0.0, {})
            follow = data.get("follow")
            if follow is not None:
                follow = Follow(tuple(str(c) for c in follow[0]), tuple(str(t) for t in follow[1]))
            names = data.get("names")
            return cls([str(s) for s in starts], {str(n): [str(k) for k in keys] for n, keys in required.items()},
                       float(bias), follow, None if names is None else [str(n) for n in names])
        except (TypeError, ValueError, AttributeError, IndexError, KeyError):
            return None

    def feed(self, text: str) -> None:
        if not self.armed:
            text = self._arm(text)
        calls = self.reader.calls
        self.reader.feed(text)
        if self.follow is not None:
            self._follow(text, calls)

    def _follow(self, text: str, calls: int) -> None:
        """Keep the text after the last complete call (`tail`) while it decides what may follow."""
        if self.reader.calls != calls:
            self.tail = text[text.rfind("}") + 1:]
        elif self.tail is None:
            return
        else:
            self.tail += text
        if self.follow.state(self.tail)[0] == ARMED:
            self.tail = None  # another call: its constraint speaks until it is complete

    def _arm(self, text: str) -> str:
        """The part of `text` from the first call start on (all of it is then read), or ''."""
        seen = self.before + text
        found = [(at, s) for s in self.starts if (at := seen.find(s)) >= 0]
        if not found:
            self.before = seen[-max(map(len, self.starts)):]
            return ""
        at, start = min(found)
        self.armed = True
        return seen[at:]

    @property
    def waiting(self) -> bool:
        """Unarmed, with no call start forming at the end of the text read: text that holds none
        of `firsts` then cannot arm the guard, and may go unread (toolbridge.steer.logits.start_marks)."""
        if self.armed:
            return False
        before = self.before
        return not any(before.endswith(s[:k]) for s in self.starts for k in range(1, len(s)))

    @property
    def calls(self) -> int:
        """How many calls the answer has written."""
        return self.reader.calls

    @property
    def called(self) -> tuple[str, ...]:
        """The names of the calls the answer has written, in order."""
        return tuple(self.reader.called)

    @property
    def between(self) -> bool:
        """Whether a call has been written and nothing but closing markup follows it: where the
        answer may end or start another call (toolbridge.steer.steering's next-call bias speaks here)."""
        r = self.reader
        return bool(r.calls) and not r.stack and len(r.outside) <= OUTSIDE_KEPT and _BETWEEN.fullmatch(r.outside) is not None

    @property
    def repeated(self) -> bool:
        """Whether the call just written is one the answer already holds (the same text, whitespace aside)."""
        return self.reader.repeated

    @property
    def looping(self) -> bool:
        r = self.reader
        return r.in_string and not r.escape and len(r.value) >= MIN_RUN and loops(r.value)

    @property
    def deciding(self) -> bool:
        """Whether the next token may end the arguments with every required one written (at
        the arguments' level, in or after a value): then `closes` is worth asking."""
        r = self.reader
        if not (self.close_bias and r.in_arguments and r.name in self.required):
            return False
        top = r.stack[-1]
        at_value_end = top.expect == AFTER or (r.in_string and top.expect == VALUE)
        return at_value_end and all(k in r.keys or k == top.key for k in self.required[r.name])

    @property
    def wants_top(self) -> bool:
        """Whether `changes` asks for the model's highest-ranked token now."""
        return bool(self.close_bias) and not self.looping and self.deciding

    def changes(self, top: Callable[[], str], quote: Sequence[int],
                ending: Sequence[tuple[int, str]]) -> list[tuple[int, float]]:
        """(token, logit change) for the next token: the string's closing quotes when it loops;
        the tokens that end the arguments when the model's choice (`top()`: the text of its
        highest-ranked token) would go on to an argument nobody asked for."""
        if self.looping:
            return [(t, CLOSE_BIAS) for t in quote]
        if self.deciding and self._next(top()) == "more":
            return [(t, self.close_bias) for t, text in ending if self.ends(text)]
        return []

    def ends(self, text: str) -> bool:
        """Whether `text` ends the arguments without going on to another one."""
        return self._next(text) == "end"

    def _next(self, text: str) -> str | None:
        """What `text` does to the arguments: "more" (a comma at their level), "end" (closes
        them), or None (neither)."""
        r = self.reader.copy()
        for c in text:
            if not r.in_string and c == "," and r.in_arguments:
                return "more"
            r.step(c)
            if not r.in_arguments:
                return "end"
        return None

    @property
    def decides_at(self) -> str | None:
        """Where `changes` decides on the model's top token (`wants_top`): one of POINTS (after a
        value at the arguments' level, in a string value there, right after a backslash in one), or
        None. From each point a token's text goes on or ends the arguments alike in every call (the
        reader holds nothing else that `_next` reads there), so an engine can tabulate both once per
        vocabulary (`goes_on`, `ending_at`) and decide the argument close on its device."""
        if not self.wants_top:
            return None
        r = self.reader
        return (ESCAPED if r.escape else IN_STRING) if r.in_string else AFTER_VALUE


AFTER_VALUE, IN_STRING, ESCAPED = "after value", "in string", "escaped"
POINTS = (AFTER_VALUE, IN_STRING, ESCAPED)  # CallGuard.decides_at, in the order of an engine's tables
_AT = {AFTER_VALUE: '{"name": "f", "arguments": {"k": 0', IN_STRING: '{"name": "f", "arguments": {"k": "v',
       ESCAPED: '{"name": "f", "arguments": {"k": "v\\'}  # a call that stands at each point


def _guard_at(point: str) -> CallGuard:
    guard = CallGuard([], {"f": []}, 1.0)
    guard.feed(_AT[point])
    return guard


def goes_on(texts: Sequence[str], point: str) -> tuple[int, ...]:
    """The tokens (ids into `texts`, each token's text) that go on to another argument from `point`
    (CallGuard.decides_at): where the model's top token is one of them, `changes` adds the close
    bias to the enders that end the arguments there (`ending_at`). Only a text with a comma can."""
    guard = _guard_at(point)
    return tuple(t for t, text in enumerate(texts) if "," in text and guard._next(text) == "more")


def ending_at(ending: Sequence[tuple[int, str]], point: str) -> tuple[int, ...]:
    """The tokens of `ending` (`changes`' enders, with their texts) that end the arguments from `point`."""
    guard = _guard_at(point)
    return tuple(t for t, text in ending if guard.ends(text))
