"""toolbridge's per-request options, read alike by both engines.

From the request's chat-template kwargs (vLLM `chat_template_kwargs`; llama.cpp the model's
`chat_template_kwargs`), else the environment, else the defaults for the kind of model served
(`DEFAULTS`, each chosen on bench/accuracy with the model it names):

- `tb_dialect` / TOOLBRIDGE_DIALECT: the call format prompts ask for (grammars follow it;
  the parser reads every dialect anyway).
- `tb_call_bias` / TOOLBRIDGE_CALL_BIAS: for `auto`, how many nats the call marker's first
  token is favoured at the answer's first position (toolbridge.steer); 0 turns it off.
- `tb_result_bias` / TOOLBRIDGE_RESULT_BIAS: the same steering for an `auto` answer that follows
  tool results, where a model should mostly answer; negative disfavours a call (a small model
  otherwise writes the result, or the call, again); 0 turns it off.
- `tb_next_bias` / TOOLBRIDGE_NEXT_BIAS: right after a call in an `auto` answer that may hold
  several (parallel_tool_calls not false), how many nats every call start's first token is
  favoured, against ending the answer there (toolbridge.steer); 0 turns it off.
- `tb_unrelated_bias` / TOOLBRIDGE_UNRELATED_BIAS: for `auto` after a user turn whose words meet
  none of the tools' words (toolbridge.relevance), added to the call bias; negative disfavours a
  call; 0 turns it off.
- `tb_close_bias` / TOOLBRIDGE_CLOSE_BIAS: inside a call, how many nats closing the arguments is
  favoured when the model would go on to an optional argument after every required one
  (toolbridge.callguard); 0 turns it off.
- `tb_example`, `tb_system_role`: what the template prelude shows (toolbridge.render): the call
  example (default on), the system turn (default: as the stock template supports it);
  `tb_template`: the llama.cpp adapter's choice of stock template.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from .dialects import Dialect, get_dialect

KEYS = ("tb_template", "tb_dialect", "tb_example", "tb_system_role", "tb_call_bias", "tb_result_bias", "tb_close_bias",
        "tb_next_bias", "tb_unrelated_bias")


@dataclass(frozen=True)
class Defaults:
    """toolbridge's defaults for one kind of model, and the model they were measured on."""

    measured_on: str
    call_bias: float
    close_bias: float
    result_bias: float
    next_bias: float
    unrelated_bias: float


# By whether the model's own chat template renders tools (toolbridge.chat_templates.renders_tools), that
# is, whether the model was trained for tool calls. A tool-trained model starts calls more
# readily, so it needs a smaller push to call: at 5 nats Qwen2.5-Coder-0.5B also called on 3 of the
# 12 questions that need no tool, at 3 on none (the README's tables). After tool results,
# SmolLM2-135M wrote the result again (`<tool_response>...`) or repeated the call instead of
# answering; at -3 or -5 on the call starts it answered from the result. Tool-trained models keep
# their own judgement there (not measured: 0). Against a call on a question whose words meet no tool's
# (toolbridge.relevance): from Qwen2.5-Coder-0.5B's first-token log-probabilities on 36 live irrelevance
# and 72 live simple and multiple questions of BFCL (bench/decisions.py), it calls on 26 of the 36 at a
# call bias of 3; 8 nats against the call where no word meets leave 16, 5 leave 21, 12 no fewer than 8,
# and 67 of the 72 that want a call still call (69 without). SmolLM2's kind is not measured with it (0).
DEFAULTS: dict[bool, Defaults] = {
    False: Defaults("SmolLM2-135M-Instruct", call_bias=5.0, close_bias=0.0, result_bias=-5.0, next_bias=0.0,
                    unrelated_bias=0.0),
    True: Defaults("Qwen2.5-Coder-0.5B-Instruct", call_bias=3.0, close_bias=5.5, result_bias=0.0, next_bias=7.0,
                   unrelated_bias=-8.0),
}


@dataclass(frozen=True)
class Options:
    dialect: Dialect
    call_bias: float
    close_bias: float = 0.0
    result_bias: float = 0.0
    next_bias: float = 0.0
    unrelated_bias: float = 0.0
    example: bool = True  # the prelude shows a call example
    system_role: bool | None = None  # the prelude's tools go in a system turn (None: as the template allows)
    template: str | None = None  # llama.cpp: the stock template's source (None: the model's own)


def resolve(kwargs: Mapping[str, Any] | None = None, env: Mapping[str, str] = os.environ,
            tool_trained: bool = False) -> Options:
    """Options from template kwargs, then environment, then the defaults for the kind of model
    (ValueError when unknown)."""
    kwargs = kwargs or {}
    dialect = get_dialect(kwargs.get("tb_dialect") or env.get("TOOLBRIDGE_DIALECT") or None)
    defaults = DEFAULTS[tool_trained]
    system_role = kwargs.get("tb_system_role")
    return Options(dialect, _number(kwargs, env, "tb_call_bias", defaults.call_bias),
                   _number(kwargs, env, "tb_close_bias", defaults.close_bias),
                   _number(kwargs, env, "tb_result_bias", defaults.result_bias),
                   _number(kwargs, env, "tb_next_bias", defaults.next_bias),
                   _number(kwargs, env, "tb_unrelated_bias", defaults.unrelated_bias),
                   example=kwargs.get("tb_example", True) is not False,
                   system_role=None if system_role is None else bool(system_role),
                   template=kwargs.get("tb_template") or None)


def _number(kwargs: Mapping[str, Any], env: Mapping[str, str], key: str, default: float) -> float:
    value = kwargs.get(key, env.get("TOOLBRIDGE_" + key[3:].upper(), default))
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, not {value!r}") from None
