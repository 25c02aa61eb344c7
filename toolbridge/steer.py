"""The `auto` call steering: small models rank "start a call" well but rarely enough to win
greedy decoding, so the call marker's first token gets a bias at the answer's first position
(bench/accuracy measured it). With it, a tool result the model starts writing itself
(`<tool_response>`, which shares `<tool_call>`'s first tokens) is cut where the two markers
part: a model never writes tool results. Both apply only at the answer's start, and only when
the answer follows a user turn (after tool results the model should mostly answer, not call
again); a bias of 0 turns both off.

Each engine applies `Steering.changes` in its own logits processor; the steering travels to
it as per-request arguments (`to_args` / `from_args`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .data import plain_data
from .dialects import Dialect

ARG_BIAS, ARG_CALL, ARG_RESULT = "toolbridge_bias", "toolbridge_bias_ids", "toolbridge_result_ids"


@dataclass(frozen=True)
class Steering:
    call: tuple[int, ...]  # the tokens a call starts with (the dialect's trigger)
    result: tuple[int, ...]  # the tokens a tool result starts with
    bias: float

    @classmethod
    def for_dialect(cls, dialect: Dialect, bias: float, encode: Callable[[str], list[int]]) -> "Steering":
        return cls(tuple(encode(dialect.grammar_trigger)),
                   tuple(encode(dialect.result_marker)) if dialect.result_marker else (), float(bias))

    @property
    def horizon(self) -> int:
        """How many output tokens steering can touch: past it, `changes` is always empty."""
        return max(1, len(self.result))

    def changes(self, output: Sequence[int]) -> list[tuple[int, float]]:
        """(token, logit change) for the next token, given the answer's tokens so far: the call
        marker's first token favoured at the start; the token where a tool result's marker
        leaves the call marker banned while the answer is a prefix of it."""
        n = len(output)
        if n >= self.horizon:
            return []
        call, result = self.call, self.result
        changes = [(call[0], self.bias)] if n == 0 and call else []
        if n < len(result) and tuple(output) == result[:n]:
            on_call_path = n < len(call) and tuple(output) == call[:n] and call[n] == result[n]
            if not on_call_path:
                changes.append((result[n], -math.inf))
        return changes

    def to_args(self) -> dict:
        return {ARG_BIAS: self.bias, ARG_CALL: list(self.call), ARG_RESULT: list(self.result)}

    @classmethod
    def from_args(cls, args: Mapping[str, Any] | None) -> "Steering | None":
        """The steering a request carries, or None (none asked for, or turned off)."""
        args = args or {}
        call, bias = args.get(ARG_CALL), args.get(ARG_BIAS)
        if not call or not bias:
            return None
        return cls(tuple(int(t) for t in call), tuple(int(t) for t in args.get(ARG_RESULT) or ()), float(bias))


def follows_user_turn(messages: Sequence[Any]) -> bool:
    """Whether the answer follows a user turn (system turns aside)."""
    for m in reversed(list(messages or ())):
        m = plain_data(m)
        role = m.get("role") if isinstance(m, Mapping) else None
        if role != "system":
            return role == "user"
    return False
