"""toolbridge's per-request options: one table (`OPTIONS`) that the request keys, the environment
variables, the resolution order and the README's options table all come from.

An option is read from the request's chat-template kwargs (vLLM `chat_template_kwargs`; llama.cpp
the model's `chat_template_kwargs`), else the environment (`TOOLBRIDGE_<NAME>`), else its default.
A default that depends on the served model is given per profile (`PROFILES`): whether the model's
own chat template renders tools (toolbridge.prompt.chat_templates.renders_tools); each profile's defaults
were measured on one model (docs/measurements.md, "Defaults by kind of model"). The steering options
become one `Policy` (toolbridge.steer.policy), field for option.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from .dialects import DEFAULT_DIALECT, Dialect, get_dialect
from .steer.policy import WORD_CHECKS, Policy

PROFILES = ("no tool template", "tool-trained")  # the kinds of served model, in the defaults' order


def env_name(key: str) -> str:
    """The environment variable of a `tb_*` key: TOOLBRIDGE_<NAME>."""
    return "TOOLBRIDGE_" + key[3:].upper()


@dataclass(frozen=True)
class Option:
    """One option: its request key, type, default (one, or one per profile) and what it moves."""

    key: str
    kind: str  # "text", "dialect", "bool", "number", "count" (a whole number, 1 or more) or "checks"
    default: Any  # a value, or a tuple with one per profile (PROFILES' order)
    moves: str  # the decision it moves, for the README's table
    env: str = field(init=False)  # its environment variable

    def __post_init__(self) -> None:
        object.__setattr__(self, "env", env_name(self.key))

    def default_for(self, tool_trained: bool) -> Any:
        return self.default[int(tool_trained)] if isinstance(self.default, tuple) else self.default


OPTIONS = (
    Option("tb_dialect", "dialect", DEFAULT_DIALECT, "the call format the prompt asks for (the parser reads every one)"),
    Option("tb_example", "bool", True, "the prompt shows a call example"),
    Option("tb_system_role", "bool", None, "the tool list goes in a system turn (unset: as the template allows)"),
    Option("tb_template", "text", None, "llama.cpp: the stock template (a family, a file, `native`; unset: the model's)"),
    Option("tb_call_bias", "number", (5.0, 3.0), "`auto`, answer start after a user turn: nats on a call's first token"),
    Option("tb_result_bias", "number", (-5.0, 0.0), "`auto`, answer start after tool results (negative: answer)"),
    Option("tb_next_bias", "number", (0.0, 7.0), "`auto`, right after the first call: nats on another call's start"),
    Option("tb_close_bias", "number", (0.0, 5.5), "inside a call, after every required argument: nats on closing it"),
    Option("tb_end_after_calls", "bool", True, "after a complete call only another call or the end may follow"),
    Option("tb_word_checks", "checks", (False, "asked"),
           "English word checks: `unrelated`, `asked`, `grounded` (true: all, false: none, or a list)"),
    Option("tb_formats", "bool", False, "string arguments follow the separators their description's examples show"),
    Option("tb_thinking_budget", "count", None, "a thinking block the prompt opens ends after this many tokens"),
)
KEYS = tuple(o.key for o in OPTIONS)
# Options that are gone, with what moves the same decision now: a request that sends one is told.
RETIRED = {"tb_unrelated_bias": "tb_word_checks", "tb_again_bias": "tb_word_checks",
           "tb_enough_bias": "tb_word_checks", "tb_grounded": "tb_word_checks"}


@dataclass(frozen=True)
class Options:
    dialect: Dialect
    policy: Policy = Policy()
    example: bool = True  # the prelude shows a call example
    system_role: bool | None = None  # the prelude's tools go in a system turn (None: as the template allows)
    template: str | None = None  # llama.cpp: the stock template's source (None: the model's own)


def resolve(kwargs: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
            tool_trained: bool = False) -> Options:
    """Options from template kwargs, then environment, then the profile's defaults (ValueError for
    a value of the wrong kind, an unknown dialect or a retired option in the kwargs). `env`: None for
    the server's environment as it started (check_environment keeps it; os.environ where nothing
    started a server), or a mapping read as it is."""
    kwargs = kwargs or {}
    for key, now in RETIRED.items():
        if key in kwargs:
            raise ValueError(_retired(key, now))
    base = _STARTED[tool_trained] if env is None and _STARTED is not None else \
        _base(os.environ if env is None else env, tool_trained)
    own = [o for o in OPTIONS if o.key in kwargs] if kwargs else ()
    if not own:
        return base.options
    v = dict(base.values)
    for o in own:
        v[o.key] = _value(o, kwargs[o.key], tool_trained)
    return _options(v)


@dataclass(frozen=True)
class _Base:
    values: dict  # each option's value from the environment, else its default
    options: Options  # the same values as Options: what a request that sets no option gets


def _base(env: Mapping[str, str], tool_trained: bool) -> _Base:
    """The options before a request's own: from the environment, else the profile's defaults."""
    v = {o.key: _value(o, env.get(o.env), tool_trained) for o in OPTIONS}
    return _Base(v, _options(v))


def _value(o: Option, value: Any, tool_trained: bool) -> Any:
    return _DEFAULTS[tool_trained][o.key] if value is None else _read(o, value)


def _options(v: Mapping[str, Any]) -> Options:
    return Options(dialect=v["tb_dialect"], policy=Policy.from_options(v), example=v["tb_example"],
                   system_role=v["tb_system_role"], template=v["tb_template"])


def _defaults(tool_trained: bool) -> dict[str, Any]:
    return {o.key: None if (d := o.default_for(tool_trained)) is None else _read(o, d) for o in OPTIONS}


# The options the server's environment gave as it started (check_environment), per profile: a server
# reads its environment once, as vLLM does its own once its engine is up.
_STARTED: tuple[_Base, _Base] | None = None


def check_environment(env: Mapping[str, str] = os.environ) -> None:
    """Refuse a retired option set in the environment (ValueError), and any value of the wrong kind:
    the servers call this as they start, so a bad setting stops the start, not every request. The
    process's own environment, once checked, is the one its requests read (resolve)."""
    global _STARTED
    for key, now in RETIRED.items():
        if env_name(key) in env:
            raise ValueError(_retired(env_name(key), env_name(now)))
    for o in OPTIONS:
        value = env.get(o.env)
        if value is None:
            continue
        try:
            _read(o, value)
        except ValueError as e:
            raise ValueError(f"{o.env}: {e}") from None
    if env is os.environ:
        _STARTED = (_base(env, False), _base(env, True))


def _retired(name: str, now: str) -> str:
    return f"{name} is no longer an option; {now} turns the word checks on or off"


def _read(o: Option, value: Any) -> Any:
    if o.kind == "number":
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{o.key} must be a number, not {value!r}") from None
    if o.kind == "count":
        return _count(o.key, value)
    if o.kind == "bool":
        return _flag(o.key, value)
    if o.kind == "checks":
        return _checks(o.key, value)
    if o.kind == "dialect":
        return get_dialect(str(value) or None)
    return str(value) or None


def _count(key: str, value: Any) -> int:
    try:
        n = None if isinstance(value, bool) else int(value) if isinstance(value, float) and value.is_integer() \
            else int(str(value).strip())
    except ValueError:
        n = None
    if n is None or n < 1:
        raise ValueError(f"{key} must be a whole number of tokens, 1 or more, not {value!r}")
    return n


def _flag(key: str, value: Any) -> bool:
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


def _checks(key: str, value: Any) -> frozenset[str]:
    """true / false, or the checks named (a list, or text separated by commas)."""
    names = value if isinstance(value, (list, tuple, set, frozenset)) else None
    if names is None:
        try:
            return frozenset(WORD_CHECKS) if _flag(key, value) else frozenset()
        except ValueError:
            names = [n for n in str(value).replace(" ", "").split(",") if n]
    unknown = [n for n in names if n not in WORD_CHECKS]
    if unknown:
        raise ValueError(f"{key} must be true, false or some of {', '.join(WORD_CHECKS)}, not {value!r}")
    return frozenset(names)


_DEFAULTS = (_defaults(False), _defaults(True))


def markdown_table() -> str:
    """The README's options table, made from `OPTIONS`."""
    rows = ["| key | environment | default (" + " / ".join(PROFILES) + ") | moves |", "|---|---|---|---|"]
    for o in OPTIONS:
        default = " / ".join(map(_shown, o.default)) if isinstance(o.default, tuple) else _shown(o.default)
        rows.append(f"| `{o.key}` | `{o.env}` | {default} | {o.moves} |")
    return "\n".join(rows)


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"
