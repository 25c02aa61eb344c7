"""Constraints from tool schemas, described once for both engines.

A call in any dialect is `begin + arguments JSON + end`, where begin names the tool and the
JSON follows the tool's parameter schema: a `Frame`. Each engine renders the frames in its
own constraint format at its edge (vLLM: an xgrammar structural tag, in vllm_plugin; llama.cpp:
GBNF, in llamacpp_ext), `auto` lazily from the dialect's trigger and `required` / named
choices strictly. `constrain` is the one policy for a constraint an engine cannot take.

What arms a lazy constraint is listed once too (`entries`): the prompted dialect's trigger, and a
bare JSON call object that names a declared tool. Models trained for tools write that form
whatever the prompt asks (Qwen2.5-Coder-0.5B answers with ```json {"name": ...}``` under its own
tool template and behind the prelude alike), and the parser reads it as a call; the entry holds
such a call to the tool's schema too. It is anchored on the tool's name, so other JSON in an
answer (`{"name": "Ada"}`) stays free.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

from ..dialects import BARE_JSON, Dialect
from ..schema import engine_schema
from ..tools import Tool, ToolChoice
from .formats import stated

log = logging.getLogger("toolbridge")
T = TypeVar("T")

MAX_WHITESPACE = 2  # inside constrained JSON: a weak model given more fills max_tokens with newlines
GENERIC_OBJECT: dict = {"type": "object"}


@dataclass(frozen=True)
class Frame:
    begin: str  # the dialect's text up to the arguments, the tool's name in it
    schema: dict  # the arguments' schema, in the subset engines share (schema.engine_schema)
    end: str


def frames(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice | None = None,
           formats: bool = False) -> list[Frame]:
    """The call frame of every tool the choice allows, in this dialect; with `formats`, a string
    argument's schema adds the pattern its description states by example (toolbridge.constrain.formats)."""
    allowed = [t for t in tools if choice is None or choice.mode != "named" or t.name == choice.name]
    wrap = dialect.wrap_single
    out = []
    for t in allowed:
        begin = (dialect.calls_open if wrap else "") + dialect.call[0] + t.name + dialect.call[1]
        end = dialect.call[2] + (dialect.calls_close if wrap else "")
        out.append(Frame(begin, engine_schema(stated(t.parameters)) if formats else t.engine_parameters, end))
    return out


@dataclass(frozen=True)
class Entry:
    """One way into an `auto` answer's constraint: the text that arms it, and the calls that may
    follow: calls in `dialect` to `tools` (each call's frame begins with the trigger)."""

    trigger: str
    dialect: Dialect
    tools: tuple[Tool, ...]
    formats: bool = False

    def frames(self, choice: ToolChoice | None = None) -> list[Frame]:
        return frames(self.tools, self.dialect, choice, self.formats)


def entries(tools: Sequence[Tool], dialect: Dialect, formats: bool = False) -> list[Entry]:
    """What arms an `auto` answer's constraint: the dialect's trigger, before a call to any tool;
    then, unless the dialect is bare JSON itself, a bare JSON call naming one tool, from the end of
    the name on (`{"name": "get_weather"` arms `, "arguments": {...}}` for get_weather only)."""
    out = [Entry(dialect.grammar_trigger, dialect, tuple(tools), formats)]
    if not dialect.bare:
        out += [Entry(BARE_JSON.call[0] + t.name + '"', BARE_JSON, (t,), formats) for t in tools]
    return out


def call_starts(dialect: Dialect) -> tuple[str, ...]:
    """The texts an `auto` call may start with (steering favours their first tokens)."""
    return tuple(dict.fromkeys((dialect.grammar_trigger, BARE_JSON.grammar_trigger)))


def separator(dialect: Dialect) -> str:
    """Between strict calls: nothing (a newline would commit a weak model to another call;
    with nothing between, it ends after a call unless it means to go on), except where the
    start marker must begin a line."""
    return "\n" if dialect.line_start else ""


def relax(tools: Sequence[Tool], accepts: Callable[[Tool], bool]) -> list[Tool]:
    """The tools for a constraint, where a schema the engine cannot take is replaced by a
    generic object: the call's frame stays constrained, and the parser still checks the
    arguments against the real schema (validation uses the tool's own validator)."""
    return [t if accepts(t) else dataclasses.replace(t, parameters=GENERIC_OBJECT) for t in tools]


def constrain(tools: Sequence[Tool], choice: ToolChoice,
              build: Callable[[Sequence[Tool], ToolChoice], T | None]) -> T | None:
    """The engine's constraint for these calls; `build` renders and checks it (None when the
    engine cannot take it). Exact if it can be; else with each tool whose own constraint fails
    relaxed to generic-object arguments; else None: calls are generated unconstrained and
    parsed. One tool's unusable schema never costs the other tools their constraint."""
    whole = build(tools, choice)
    if whole is not None:
        return whole
    relaxed = relax(tools, lambda t: build([t], ToolChoice("named", t.name)) is not None)
    for t, r in zip(tools, relaxed):
        if r is not t:
            log.warning("toolbridge: the schema of tool %r cannot be constrained; its arguments are "
                        "constrained to an object and checked against the schema afterwards", t.name)
    whole = build(relaxed, choice) if any(r is not t for t, r in zip(tools, relaxed)) else None
    if whole is None:
        log.warning("toolbridge: the tool constraint cannot be built; calls are generated unconstrained")
    return whole
