"""Every request-level decision, made once per request, in one place, for both engines.

A request's plan is built in two steps, each run once (llama.cpp's `common_chat_params` is the
model: one plan per request, built by one function):
- `check` reads what an OpenAI chat request says about tools (tools or the legacy functions,
  tool_choice, parallel_tool_calls, the message history, stop strings) into a `CheckedRequest`;
  it needs nothing of the model, so a server's request check runs it before the route and hands
  the result on;
- `plan` adds what the served model and the request's options decide: the toolbridge options
  (template kwargs, environment, the model's kind), whether the user constrained the output
  themselves, and so the dialect, how the answer is generated (`mode`), the stops, the steering
  and the call guard: a `ToolRequest`, which the engine adapters keep for the whole answer.
`prepare` is both at once. A bad request raises BadRequest.

Work that depends only on the tool set (checking and compiling schemas, and whatever an
engine derives from the tools: grammars, structural tags, compile checks) is done once per
distinct set: `toolset` finds a set sent before by comparing content (not object identity),
and `ToolSet.memo` keeps each engine's artefacts with the set.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Hashable, Mapping, Sequence, TypeVar

from .jsondata import plain_data
from .parsing.markers import TurnCut, plain_stops
from .memo import Memo
from .dialects import Dialect
from .errors import BadRequest
from .events import ToolCall, new_call_id
from .constrain.grammar import Entry, call_starts, entries
from .steer.callguard import CallGuard
from .steer.ending import Follow, closes
from .options import Options, resolve
from .steer.policy import Decisions, Policy
from .parsing.answer import ParseResult, TextOnly, parse
from .steer.grounding import conversation_marks, invented
from .steer.relevance import asked_for, own_words, tool_words, unrelated, user_words
from .steer.args import to_args
from .steer.rules import AnswerRules
from .steer.steering import Steering
from .steer.thinking import ThinkingEnd
from .steer.vocab import Vocabulary
from .thinking import DEFAULT_THINKING, with_budget
from .parsing.stream import StreamParser
from .tools import (Tool, ToolChoice, check_tool_results, compile_schema, legacy_tools, normalize_tool_choice,
                    normalize_tools, tool_fields)

T = TypeVar("T")

# How an answer is generated.
PLAIN = "plain"  # no tools, or tool_choice none: text, as without toolbridge
USER = "user"  # the request constrains the output itself (response_format, grammar): calls are parsed from it
STRICT = "strict"  # required or a named tool: the whole answer is constrained to calls
LAZY = "lazy"  # auto: free text; a call is constrained from its start marker on
EITHER = "either"  # auto beside the request's own JSON response format: calls, or a final answer in that format

TOOLSET_CACHE_SIZE = 64
MEMO_SIZE = 256


class ToolSet:
    """The checked tools of a request, shared by every request that sends the same tools."""

    def __init__(self, raw: list, signature: list[tuple], tools: Sequence[Tool]):
        self.raw = raw  # the tools as the first request sent them
        self.signature = signature  # what toolbridge reads of them, compared with later requests
        self.tools = tuple(tools)
        self._memo: Memo[Any] = Memo(MEMO_SIZE)

    @cached_property
    def specs(self) -> list[dict]:
        """The tools as plain OpenAI dicts (what the prompt renders)."""
        return [plain_data(t) for t in self.raw]

    @cached_property
    def words(self) -> tuple[frozenset[str], ...]:
        """Each tool's words (toolbridge.steer.relevance.tool_words)."""
        return tuple(tool_words(t) for t in self.tools)

    @cached_property
    def own_words(self) -> tuple[frozenset[str], ...]:
        """Each tool's words that no other tool here has (toolbridge.steer.relevance.own_words)."""
        return own_words(self.words)

    def memo(self, key: Hashable, build: Callable[[], T]) -> T:
        """`build()`, computed once per key for this tool set (what an engine derives from it)."""
        return self._memo.get(key, build)


# Tool sets by the names of their tools; a request's tools are then compared with each set of
# those names by signature (type, name, description, parameters: all toolbridge reads of a
# tool), one comparison of plain lists, tuples and dicts, done in C.
_SETS: Memo[list[ToolSet]] = Memo(TOOLSET_CACHE_SIZE)
_SETS_LOCK = threading.Lock()  # guards the lists
SETS_PER_NAMES = 4


def toolset(tools: Sequence[Any] | None) -> ToolSet:
    """The checked tool set for these OpenAI tools (dicts or pydantic models); BadRequest when
    they are malformed. A set seen before (same content) is found, not checked again."""
    if tools is not None and not isinstance(tools, (list, tuple)):
        raise BadRequest("tools must be an array of tool objects.", param="tools")
    tools = list(tools or ())
    signature = [tool_fields(t) for t in tools]
    names = tuple(s[1] if s is not None and isinstance(s[1], str) else None for s in signature)
    bucket = _SETS.get(names, list)
    with _SETS_LOCK:
        for found in bucket:
            if found.signature == signature:
                return found
    made = ToolSet(tools, signature, normalize_tools(tools))
    with _SETS_LOCK:
        bucket.append(made)
        del bucket[:-SETS_PER_NAMES]
    return made


@dataclass(frozen=True)
class CheckedRequest:
    """A request's tool fields, checked: the same whatever model answers it. `toolset`: the tools
    the answer may call; `declared`: every tool the request sent (what the prompt shows), the same
    set unless `allowed_tools` restricts the calls."""

    toolset: ToolSet
    choice: ToolChoice
    parallel: bool
    stop: tuple[str, ...]  # the request's own stop strings
    after_user: bool  # the answer follows a user turn (not tool results)
    messages: Sequence[Any] = field(default=(), repr=False, compare=False)  # the history, as sent
    declared: ToolSet | None = field(default=None, repr=False)

    @cached_property
    def unrelated(self) -> bool:
        """The answer follows user turns that share no word with the tools (toolbridge.steer.relevance):
        read only where a plan can use it, since it reads every user turn."""
        return self.after_user and bool(self.toolset.tools) and unrelated(self.said[0], self.toolset.words)

    @cached_property
    def asked(self) -> frozenset[str]:
        """The tools the user turns ask for by name (toolbridge.steer.relevance.asked_for): read only where
        a plan can use it."""
        ts = self.toolset
        return asked_for(self.said[1], [t.name for t in ts.tools], ts.own_words) if self.after_user else frozenset()

    @cached_property
    def said(self) -> tuple[frozenset[str], frozenset[str]]:
        """The words of the user turns, all and the latest (toolbridge.steer.relevance.user_words): read
        once, by whichever check needs them first."""
        return user_words(self.messages)

    @cached_property
    def seen(self) -> frozenset[str]:
        """The words and numbers of every turn (toolbridge.steer.grounding): read only where a call's values
        are checked."""
        return conversation_marks(self.messages)


@dataclass(frozen=True)
class ToolRequest:
    toolset: ToolSet
    choice: ToolChoice
    options: Options
    parallel: bool
    mode: str
    stop: tuple[str, ...]  # the request's stop strings, and the dialect's when the prompt asks for it
    decisions: Decisions = Decisions()  # the policy's, for this answer (toolbridge.steer.policy.Policy.decide)
    checked: CheckedRequest | None = field(default=None, repr=False, compare=False)  # what `plan` read
    final: dict | None = None  # EITHER: the JSON schema a final answer (one with no calls) follows

    @property
    def declared(self) -> ToolSet:
        """Every tool the request sent, which the prompt shows; `toolset` holds the ones the answer
        may call (fewer where `allowed_tools` restricts them: the prompt, and so the cached prefix,
        stays the same)."""
        declared = self.checked.declared if self.checked is not None else None
        return declared if declared is not None else self.toolset

    @property
    def grounded(self) -> bool:
        """An `auto` answer's first call must take its values from the conversation (the policy's
        `grounded` word check)."""
        return self.decisions.grounded and self.checked is not None

    def invented(self, call: ToolCall) -> tuple[str, ...]:
        """The arguments of `call` whose values the conversation does not hold (toolbridge.steer.grounding);
        none where the plan does not check them. The conversation is read at the first call checked."""
        tool = next((t for t in self.tools if t.name == call.name), None)
        if not self.grounded or tool is None:
            return ()
        try:
            arguments = json.loads(call.arguments)
        except ValueError:
            return ()
        return invented(arguments, tool.parameters, self.checked.seen)

    def in_text(self) -> "ToolRequest":
        """The plan for this answer asked again in text (its first call made its values up:
        toolbridge.steer.grounding): no steering or call guard, every call opening banned at every step."""
        return replace(self, decisions=replace(self.decisions, steers=False, in_text=True))

    def unbiased_start(self) -> "ToolRequest":
        """The plan for this answer asked again without the start bias toward calls (a start the bias
        chose was left half-written: toolbridge.steer.logits.start_hold); a bias against them stays."""
        d = self.decisions
        start = min(d.start_bias, 0.0)
        steers = d.steers and bool(start or d.next_bias or d.asked)
        return replace(self, decisions=replace(d, start_bias=start, steers=steers))

    @property
    def steer(self) -> bool:
        """The `auto` steering applies (toolbridge.steer.steering)."""
        return self.decisions.steers

    @property
    def policy(self) -> Policy:
        return self.options.policy

    @property
    def tools(self) -> tuple[Tool, ...]:
        return self.toolset.tools

    @property
    def dialect(self) -> Dialect:
        return self.options.dialect

    @property
    def max_calls(self) -> int | None:
        return None if self.parallel else 1

    @property
    def force(self) -> str | None:
        """What the prompt says must be called: "required", a tool's name, or nothing."""
        if self.mode == PLAIN:
            return None
        return "required" if self.choice.mode == "required" else self.choice.name if self.choice.mode == "named" else None

    @property
    def entries(self) -> list[Entry]:
        """`auto`: what arms a call's constraint (toolbridge.constrain.grammar.entries), kept with the tool
        set; other modes: none."""
        if self.mode != LAZY:
            return []
        f = self.decisions.formats
        return self.toolset.memo(("entries", self.dialect.name, f), lambda: entries(self.tools, self.dialect, f))

    def steering(self, vocab: Vocabulary, start_held: bool = True) -> Steering:
        """The `auto` steering in a vocabulary's ids (toolbridge.steer.steering), kept with the tool set;
        without the call starts' texts where a start the bias chose is not checked (`start_held` False)."""
        d = self.decisions
        key = ("steering", vocab.key, self.dialect.name, d.start_bias, d.next_bias)
        steering = self.toolset.memo(key, lambda: Steering.for_dialect(
            self.dialect, vocab.encode, [t.name for t in self.tools], start_bias=d.start_bias, next_bias=d.next_bias))
        if not start_held:
            held = steering
            steering = self.toolset.memo((*key, "unheld"), lambda: replace(held, texts=()))
        if not d.asked:
            return steering
        return replace(steering, asked=d.asked, again=d.again, enough=d.enough)

    def logit_args(self, vocab: Vocabulary | None, start_held: bool = False) -> dict:
        """The answer's per-token rules (`rules`) for an engine's logits processor, packed as one argument
        (toolbridge.steer.args; the processor unpacks them, AnswerRules.unpack): the call guard, and in a
        vocabulary's ids (where the engine's front has one) the `auto` steering and the end of a thinking
        block the prompt may open. `start_held`: a start the bias chose ends the answer where the model
        does not go on with it (the engine's front asks again: toolbridge.steer.logits.start_hold); else
        the steering carries no call starts' texts."""
        return to_args(*self._rule_parts(vocab, start_held))

    def rules(self, vocab: Vocabulary, ends: Sequence[int], thinking: bool) -> AnswerRules:
        """One answer's per-token rules (toolbridge.steer.rules), for an engine that runs them in its own
        loop: the call guard, the `auto` steering, and where the prompt opened a thinking block
        (`thinking`), its end: the policy's budget, and no end inside it where the answer must call
        (`ends`: the engine's end tokens); an answer asked again in text (`in_text`), its bans."""
        steering, guard, end, banned = self._rule_parts(vocab, start_held=True)
        return AnswerRules(steering, guard, vocab, ends, end if thinking else None, banned)

    def _rule_parts(self, vocab: Vocabulary | None, start_held: bool) -> tuple[
            Steering | None, CallGuard | None, ThinkingEnd | None, tuple[int, ...]]:
        if self.decisions.in_text:
            return None, None, None, self.steering(vocab).openings if vocab is not None else ()
        guard = self.call_guard()
        steering = self.steering(vocab, start_held) if vocab is not None and self.steer else None
        end = None if vocab is None else ThinkingEnd.for_thinking(
            DEFAULT_THINKING, vocab.marker, self.decisions.thinking_budget, forced=self.force is not None)
        return steering, guard, end, ()

    def call_guard(self) -> CallGuard | None:
        """A call guard for one answer (toolbridge.steer.callguard): read from the answer's start when the
        whole answer is calls, from the first call start under `auto`; none for other answers."""
        if self.mode not in (STRICT, LAZY, EITHER):
            return None
        required = self.toolset.memo(("required",), lambda: {t.name: _required(t) for t in self.tools})
        return CallGuard(call_starts(self.dialect) if self.mode != STRICT else (), required,
                         close_bias=self.decisions.close_bias, follow=self.follow, names=list(required))

    @property
    def follow(self) -> Follow | None:
        """What may follow an `auto` answer's complete call (toolbridge.steer.ending): its closing markup,
        then another call's trigger where parallel calls are allowed, or the end; None where the
        answer is not ended after its calls (the option is off; strict answers end by their grammar)."""
        if not self.decisions.hold_after_calls:
            return None
        d = self.dialect
        return self.toolset.memo(("follow", d.name, self.parallel), lambda: Follow(
            closes(d.close, d.calls_close), tuple(e.trigger for e in self.entries) if self.parallel else ()))

    def parser(self, id_factory: Callable[[], str] = new_call_id) -> StreamParser:
        return StreamParser(self.tools, choice=self.choice, max_calls=self.max_calls, id_factory=id_factory,
                            end_after_calls=self.decisions.end_after_calls)

    def parse(self, text: str) -> ParseResult:
        return parse(text, self.tools, choice=self.choice, max_calls=self.max_calls,
                     end_after_calls=self.decisions.end_after_calls)

    def finish_reason(self, calls: Sequence[ToolCall], truncated: bool) -> str:
        """OpenAI's: `length` when cut off, `tool_calls` for calls under auto or required,
        `stop` otherwise (a named choice too, as OpenAI answers it). A call that max_tokens cut off
        is returned as far as it was written (its arguments closed by repair), as it was streamed,
        with `length`: the client sees what the model wrote and that it is incomplete, as OpenAI
        answers a cut-off call; an empty answer would say neither. Where the answer ends after its
        calls, a cut in the text after complete calls cut nothing the answer holds: `tool_calls`."""
        if truncated and not (calls and calls[-1].complete and self.decisions.end_after_calls):
            return "length"
        return "tool_calls" if calls and self.choice.mode in ("auto", "required") else "stop"


def check(*, tools: Sequence[Any] | None, tool_choice: Any = None, messages: Sequence[Any] = (),
          functions: Any = None, function_call: Any = None, parallel_tool_calls: Any = None,
          stop: Any = None) -> CheckedRequest:
    """A request's tool fields (plain data), checked; BadRequest for a request that must be
    answered 400."""
    if not tools and functions:
        tools, legacy_choice = legacy_tools(functions, function_call)
        tool_choice = tool_choice if tool_choice is not None else legacy_choice
    declared = toolset(tools)
    choice = normalize_tool_choice(tool_choice, declared.tools)
    ts = declared if choice.allowed is None else toolset(
        [raw for raw, t in zip(declared.raw, declared.tools) if t.name in choice.allowed])
    check_tool_results(messages)
    stops = tuple(dict.fromkeys(s for s in _stop_list(stop) if s))
    return CheckedRequest(ts, choice, parallel_tool_calls is not False, stops, follows_user_turn(messages), messages,
                          declared)


def plan(checked: CheckedRequest, *, template_kwargs: Mapping[str, Any] | None = None,
         user_constraint: bool = False, response_format: Any = None, tool_trained: bool = False,
         thinking_budget: int | None = None, reasoning_effort: Any = None,
         env: Mapping[str, str] | None = None) -> ToolRequest:
    """The request's plan for the served model; raises BadRequest for a request that must be
    answered 400. `user_constraint`: the request constrains the answer by other means (a grammar,
    structured outputs); `response_format`: its own, in the chat or the Responses shape (under `auto`,
    an answer with no calls follows it: EITHER). `tool_trained`: the model's own template renders tools
    (its defaults differ: toolbridge.options.PROFILES). `thinking_budget`, `reasoning_effort`: what the
    request asks of the thinking where its options name no `tb_thinking_budget` (toolbridge.thinking.with_budget)."""
    try:
        template_kwargs = with_budget(template_kwargs, thinking_budget, reasoning_effort)
    except ValueError as e:
        raise BadRequest(str(e), param="reasoning_effort") from None
    try:
        options = resolve(template_kwargs, env, tool_trained)
    except ValueError as e:
        raise BadRequest(str(e), param="chat_template_kwargs") from None
    ts, choice = checked.toolset, checked.choice
    final = final_format(response_format)
    if not ts.tools or choice.mode == "none":
        mode = PLAIN
    elif final is not None and choice.mode == "auto" and not user_constraint:
        mode = EITHER
    elif user_constraint or final is not None:
        mode = USER
    elif choice.forced:
        mode = STRICT
    else:
        mode = LAZY
    stops = list(checked.stop)
    if choice.forced:
        _check_forced(choice, options.dialect, stops, user_constraint or final is not None)
    if mode != PLAIN:
        stops += options.dialect.stop
    elif ts.tools:  # tool_choice none: the answer ends where the model would write call or result markup
        stops += plain_stops(options.dialect)
    decisions = options.policy.decide(lazy=mode == LAZY, after_user=checked.after_user, parallel=checked.parallel,
                                      question=checked)
    return ToolRequest(toolset=ts, choice=choice, options=options, parallel=checked.parallel, mode=mode,
                       stop=tuple(dict.fromkeys(s for s in stops if s)), decisions=decisions, checked=checked,
                       final=final if mode == EITHER else None)


def prepare(*, template_kwargs: Mapping[str, Any] | None = None, user_constraint: bool = False,
            response_format: Any = None, tool_trained: bool = False, thinking_budget: int | None = None,
            reasoning_effort: Any = None, env: Mapping[str, str] | None = None, **fields: Any) -> ToolRequest:
    """`check` and `plan` at once: the plan of a chat request whose tool fields are `fields`."""
    return plan(check(**fields), template_kwargs=template_kwargs, user_constraint=user_constraint,
                response_format=response_format, tool_trained=tool_trained, thinking_budget=thinking_budget,
                reasoning_effort=reasoning_effort, env=env)


ANY_OBJECT: dict = {"type": "object"}


def final_format(response_format: Any) -> dict | None:
    """The JSON schema a JSON `response_format` asks for (chat: {"type": "json_schema", "json_schema":
    {"schema": ...}}; Responses' text format: {"type": "json_schema", "schema": ...}; {"type":
    "json_object"}, with llama-cpp-python's own "schema"; without a schema: any object); None for text or none.
    BadRequest where the schema is not one."""
    rf = plain_data(response_format) if response_format is not None else None
    if not isinstance(rf, Mapping) or rf.get("type") not in ("json_schema", "json_object"):
        return None
    inner = rf.get("json_schema") if isinstance(rf.get("json_schema"), Mapping) else rf
    schema = inner.get("schema")
    if schema is None:
        return dict(ANY_OBJECT)
    try:
        if not isinstance(schema, Mapping):
            raise ValueError("not an object")
        compile_schema(schema)
    except ValueError as e:
        raise BadRequest(f"response_format's schema is not a valid JSON schema: {e}", param="response_format") from None
    return dict(schema)


def _check_forced(choice: ToolChoice, dialect: Dialect, stops: Sequence[str], user_constraint: bool) -> None:
    """A forced call (required or a named tool) that the request itself makes impossible is a
    bad request, not an answer whose finish reason contradicts its message."""
    what = "a named tool_choice" if choice.mode == "named" else f"tool_choice {choice.mode!r}"
    if user_constraint:
        raise BadRequest(f"{what} constrains the answer to tool calls; response_format (or a grammar) "
                         "constrains it to something else. Send one of them.", param="response_format",
                         code="conflicting_fields")
    fixed = [dialect.open, dialect.close, *dialect.call, dialect.calls_open, dialect.calls_close]
    for s in stops:
        if any(s in part for part in fixed if part):
            raise BadRequest(f"stop string {s!r} is part of every tool call in the {dialect.name!r} format, so "
                             f"{what} could never be answered.", param="stop", code="conflicting_fields")


def _stop_list(stop: Any) -> list[str]:
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise BadRequest("stop must be a string or a list of strings.", param="stop")


def _required(tool: Tool) -> list[str]:
    """The arguments a tool's schema requires (the schema is checked: a list of names)."""
    return list(tool.parameters.get("required") or [])


def follows_user_turn(messages: Sequence[Any]) -> bool:
    """Whether the answer follows a user turn (system turns aside)."""
    for m in reversed(list(messages or ())):
        role = m.get("role") if isinstance(m, Mapping) else None
        if role != "system":
            return role == "user"
    return False


def text_only(req: ToolRequest | None) -> TurnCut | TextOnly:
    """The reader of a plain answer's text: cut at turn markers; with tools in play (tool_choice none),
    read by the plan's parser too, so that call or history markup the model writes is not shown."""
    return TextOnly(req.parser()) if req is not None and req.tools else TurnCut()
