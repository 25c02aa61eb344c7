"""Where a thinking block the prompt opened ends, read token by token as an engine generates it, and
its budget: past `budget` tokens the close marker is written for the model (the answer held to its
tokens one at a time), so that the answer comes, and a forced call with it. Where the answer must call
(`forced`), the model may not end inside the thinking either: it thinks on to the marker or the budget.

A logits processor that steers or guards an answer starts all of that at the thinking's end: the
answer's first token is the one after the token that completes the close marker. llama.cpp's session
does the same in its own loop (llamacpp_ext.generate.Session.think); this is the engine-neutral part a
batch processor carries per request (vllm_plugin.processor), packed as plain data with the request's
other rules (toolbridge.steer.args).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ..thinking import THINKING, Thinking, opened_by

# How many of a prompt's last tokens are read to see whether it leaves a thinking block open: the
# open marker and the whitespace after it fit in far fewer.
PROMPT_TAIL = 16


class ThinkingEnd:
    """One answer's thinking, fed the text of each token the model writes inside it."""

    __slots__ = ("thinking", "close", "tokens", "budget", "forced", "count", "closed", "_seen")

    def __init__(self, thinking: Thinking, tokens: tuple[int, ...], budget: int | None, forced: bool = False):
        self.thinking = thinking
        self.close = thinking.close
        self.tokens = tokens  # the close marker in the model's tokens, written for it at the budget
        self.budget = budget
        self.forced = forced  # the answer must call: no end of the answer inside the thinking
        self.count = 0  # tokens read inside the thinking
        self.closed = False
        self._seen = ""  # the end of the text read, one character short of the marker

    @classmethod
    def for_thinking(cls, thinking: Thinking, encode: Callable[[str], Sequence[int]], budget: int | None,
                     forced: bool = False) -> "ThinkingEnd":
        return cls(thinking, tuple(encode(thinking.close)), budget, forced)

    def opened_by(self, prompt_tail: str) -> bool:
        """Whether a prompt whose last tokens (PROMPT_TAIL) read `prompt_tail` leaves the block open."""
        return opened_by(prompt_tail, self.thinking)

    def feed(self, text: str) -> bool:
        """Read one token's text; True once the close marker is complete (the answer starts after it)."""
        self.count += 1
        seen = self._seen + text
        if self.close in seen:
            self.closed = True
        else:
            self._seen = seen[max(0, len(seen) - len(self.close) + 1):]
        return self.closed

    def only(self) -> tuple[int, ...] | None:
        """The token the model is held to next: past the budget, the close marker's next token (None:
        any token)."""
        if self.closed or self.budget is None or not self.tokens:
            return None
        k = self.count - self.budget
        return (self.tokens[k],) if 0 <= k < len(self.tokens) else None

    def pack(self) -> dict:
        return {"thinking": self.thinking.name, "tokens": list(self.tokens), "budget": self.budget,
                "forced": self.forced}

    @classmethod
    def unpack(cls, data: Mapping[str, Any] | None) -> "ThinkingEnd | None":
        """The packed thinking end; None for anything not of `pack`'s making."""
        if not isinstance(data, Mapping):
            return None
        name, tokens, budget = data.get("thinking"), data.get("tokens"), data.get("budget")
        thinking = THINKING.get(name) if isinstance(name, str) else None
        if thinking is None or not isinstance(tokens, list):
            return None
        if not all(type(t) is int and t >= 0 for t in tokens):
            return None
        if budget is not None and (type(budget) is not int or budget < 0):
            return None
        return cls(thinking, tuple(tokens), budget, data.get("forced") is True)
