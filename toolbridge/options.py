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
- `tb_again_bias` / TOOLBRIDGE_AGAIN_BIAS: added to the next-call bias after a first call when
  the user's words still name another tool (a word only that other tool is described by:
  toolbridge.relevance.asked_for); 0 turns it off.
- `tb_enough_bias` / TOOLBRIDGE_ENOUGH_BIAS: on every call start after an answer's second or later
  call, once the question asked for two or more tools by such words and each is called; negative
  disfavours another call; 0 turns it off.
- `tb_grounded` / TOOLBRIDGE_GROUNDED: for `auto`, an answer's first call must take its required
  argument values from the conversation (toolbridge.grounding); where it makes one up, the engine answers
  again without a call (`python -m llamacpp_ext`; vLLM's parser cannot ask for another answer).
  `false` (or 0) turns it off.
- `tb_close_bias` / TOOLBRIDGE_CLOSE_BIAS: inside a call, how many nats closing the arguments is
  favoured when the model would go on to an optional argument after every required one
  (toolbridge.callguard); 0 turns it off.
- `tb_end_after_calls` / TOOLBRIDGE_END_AFTER_CALLS: an answer ends after its calls: once a call is
  complete, only another call or the end of the turn may follow (the engines hold the next tokens
  to those, toolbridge.callguard.CallGuard.ending; the parser shows no text after a call). `false`
  lets text after calls through, as content. The same default for every kind of model.
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
        "tb_next_bias", "tb_unrelated_bias", "tb_again_bias", "tb_enough_bias", "tb_grounded",
        "tb_end_after_calls")


@dataclass(frozen=True)
class Defaults:
    """toolbridge's defaults for one kind of model, and the model they were measured on."""

    measured_on: str
    call_bias: float
    close_bias: float
    result_bias: float
    next_bias: float
    unrelated_bias: float
    again_bias: float
    enough_bias: float
    grounded: bool


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
# Right after the first call, where the question names a tool still uncalled by a word only that tool has
# (toolbridge.relevance.asked_for): on BFCL's 24 live parallel-multiple and 60 live multiple questions, the
# next call ranked 7.1-10.5 nats below the end on 6 that want several calls and stopped after one, and
# 9.9-16.4 on the 18 single-call questions where the words named another tool; 3.5 more than the
# next-call bias of 7 makes those 6 second calls (3 makes 4) and adds one to 1 of the 57 single-call
# answers (at 9.9: so does any value from 2.9; from 3.9 on, more). After the second call, with every
# named tool called, a third call ranked at most 0.75 nats above the end (a repeated flip); -5 holds it
# back. A first call whose argument values appear nowhere in the conversation (toolbridge.grounding): on
# BFCL's live questions (36 each of simple, multiple and irrelevance, 12 parallel, 24 parallel multiple),
# 8 of Qwen's 17 false calls on irrelevance questions, none of the calls BFCL counts right, and none of
# bench/accuracy's 45 calls (judging optional arguments too would have cost 4 of those).
AGAIN, ENOUGH = 3.5, -5.0
DEFAULTS: dict[bool, Defaults] = {
    False: Defaults("SmolLM2-135M-Instruct", call_bias=5.0, close_bias=0.0, result_bias=-5.0, next_bias=0.0,
                    unrelated_bias=0.0, again_bias=0.0, enough_bias=0.0, grounded=False),
    True: Defaults("Qwen2.5-Coder-0.5B-Instruct", call_bias=3.0, close_bias=5.5, result_bias=0.0, next_bias=7.0,
                   unrelated_bias=-8.0, again_bias=AGAIN, enough_bias=ENOUGH, grounded=True),
}


@dataclass(frozen=True)
class Options:
    dialect: Dialect
    call_bias: float
    close_bias: float = 0.0
    result_bias: float = 0.0
    next_bias: float = 0.0
    unrelated_bias: float = 0.0
    again_bias: float = 0.0
    enough_bias: float = 0.0
    grounded: bool = False  # an auto answer's first call must take its values from the conversation
    end_after_calls: bool = True  # after a complete call, only another call or the end of the turn
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
                   _number(kwargs, env, "tb_again_bias", defaults.again_bias),
                   _number(kwargs, env, "tb_enough_bias", defaults.enough_bias),
                   _flag(kwargs, env, "tb_grounded", defaults.grounded),
                   _flag(kwargs, env, "tb_end_after_calls", True),
                   example=kwargs.get("tb_example", True) is not False,
                   system_role=None if system_role is None else bool(system_role),
                   template=kwargs.get("tb_template") or None)


def _given(kwargs: Mapping[str, Any], env: Mapping[str, str], key: str, default: Any) -> Any:
    """An option's value: the template kwarg `key`, else TOOLBRIDGE_<KEY> from the environment, else `default`."""
    return kwargs.get(key, env.get("TOOLBRIDGE_" + key[3:].upper(), default))


def _number(kwargs: Mapping[str, Any], env: Mapping[str, str], key: str, default: float) -> float:
    value = _given(kwargs, env, key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be a number, not {value!r}") from None


def _flag(kwargs: Mapping[str, Any], env: Mapping[str, str], key: str, default: bool) -> bool:
    value = _given(kwargs, env, key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{key} must be true or false, not {value!r}")
