"""toolbridge's per-request options, read alike by both engines.

From the request's chat-template kwargs (vLLM `chat_template_kwargs`; llama.cpp the model's
`chat_template_kwargs`), else the environment, else the defaults:

- `tb_dialect` / TOOLBRIDGE_DIALECT: the call format prompts ask for (grammars follow it;
  the parser reads every dialect anyway).
- `tb_call_bias` / TOOLBRIDGE_CALL_BIAS: for `auto`, how many nats the call marker's first
  token is favoured at the answer's first position. Small models rank "start a call" well but
  rarely enough to win greedy decoding; the bias turns that ranking into a decision (bench/
  accuracy measured it). With it, a tool result the model starts writing itself at the
  answer's start (`<tool_response>`, which shares `<tool_call>`'s first tokens) is cut where
  the two markers part: a model never writes tool results. Both apply only when the answer
  follows a user turn: after tool results the model should mostly answer, not call again.
  0 turns both off.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .dialects import Dialect, get_dialect
from .tools import _as_dict

DEFAULT_CALL_BIAS = 5.0


@dataclass(frozen=True)
class Options:
    dialect: Dialect
    call_bias: float


def resolve(kwargs: Mapping[str, Any] | None = None, env: Mapping[str, str] = os.environ) -> Options:
    """Options from template kwargs, then environment, then defaults (ValueError when unknown)."""
    kwargs = kwargs or {}
    dialect = get_dialect(kwargs.get("tb_dialect") or env.get("TOOLBRIDGE_DIALECT") or None)
    bias = kwargs.get("tb_call_bias", env.get("TOOLBRIDGE_CALL_BIAS", DEFAULT_CALL_BIAS))
    try:
        bias = float(bias)
    except (TypeError, ValueError):
        raise ValueError(f"tb_call_bias must be a number, not {bias!r}") from None
    return Options(dialect, bias)


def call_bias_tokens(dialect: Dialect, encode: Callable[[str], list[int]]) -> list[int]:
    """The tokens a call starts with in this dialect (its trigger), in order."""
    return list(encode(dialect.grammar_trigger))


def steers(messages: Sequence[Any]) -> bool:
    """Whether the `auto` call bias applies: the answer follows a user turn."""
    for m in reversed(list(messages or ())):
        m = _as_dict(m)
        role = m.get("role") if isinstance(m, Mapping) else None
        if role != "system":
            return role == "user"
    return False


def result_tokens(dialect: Dialect, encode: Callable[[str], list[int]]) -> list[int]:
    """The tokens a tool result starts with in this dialect."""
    return list(encode(dialect.result_marker)) if dialect.result_marker else []


def steer(call: Sequence[int], result: Sequence[int], bias: float, output: Sequence[int]) -> list[tuple[int, float]]:
    """(token, logit change) for the next token of an `auto` answer, given the answer so far:
    the call marker's first token favoured at the start; the token where a tool result's marker
    leaves the call marker banned while the answer is a prefix of it."""
    n = len(output)
    changes = [(call[0], bias)] if n == 0 and call else []
    if n < len(result) and list(output) == list(result[:n]):
        on_call_path = n < len(call) and list(output) == list(call[:n]) and call[n] == result[n]
        if not on_call_path:
            changes.append((result[n], -math.inf))
    return changes
