"""The `toolbridge` chat handler: OpenAI tool calls from a model whose template has none.

A request goes: checks (400 on bad input) -> prompt (the model's template behind the core's
prelude) -> generation (generate.Session: lazy grammar for `auto`, strict for `required` and
named, none for `none` or no tools) -> the core's StreamParser -> OpenAI response or chunks.
"""
from __future__ import annotations

import json
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

import llama_cpp
from llama_cpp import LlamaGrammar
from toolbridge import BadRequest, Tool, ToolChoice
from toolbridge.dialects import Dialect
from toolbridge.options import call_bias_tokens, resolve, result_tokens, steers
from toolbridge.parse import collect
from toolbridge.render import plain_data
from toolbridge.stream import CallArgs, CallEnd, CallStart, Content, Event, StreamParser

from . import prompt
from .generate import EOG, LENGTH, TRIGGER, Sampling, Session, marker_bias, with_logit_bias
from .grammar import compiles, response_grammar, tool_grammar
from .validate import check_request

# Request fields llama-cpp-python's request model drops; the server middleware puts them here.
REQUEST_OPTIONS: ContextVar[dict] = ContextVar("toolbridge_request_options", default={})
REQUEST_KEYS = ("parallel_tool_calls", "stream_options")
ERROR_PREFIX = "toolbridge_invalid_request: "


class RequestError(ValueError):
    """A BadRequest, raised in a form the server answers with 400 (see server.py)."""

    def __init__(self, error: BadRequest):
        super().__init__(ERROR_PREFIX + json.dumps(error.body()["error"]))
        self.error = error


@dataclass
class Plan:
    """What to generate: `plain` (no tools, or tool_choice none), `user` (the request's own
    grammar, calls parsed from the output), `strict` (required/named), `lazy` (auto)."""

    mode: str
    tools: list[Tool]
    choice: ToolChoice
    dialect: Dialect
    parallel: bool
    grammar: LlamaGrammar | None = None


def toolbridge_chat_handler(
    *, llama: llama_cpp.Llama, messages: list, functions: Any = None, function_call: Any = None,
    tools: Any = None, tool_choice: Any = None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
    stream: bool = False, stop: Any = None, seed: int | None = None, response_format: Any = None,
    max_tokens: int | None = None, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.1, model: str | None = None, logit_bias: dict | None = None, min_p: float = 0.05,
    typical_p: float = 1.0, tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_tau: float = 5.0,
    mirostat_eta: float = 0.1, logits_processor: Any = None, grammar: LlamaGrammar | None = None,
    logprobs: bool | None = None, top_logprobs: int | None = None, **kwargs: Any,
) -> dict | Iterator[dict]:
    """llama-cpp-python's chat handler protocol. `kwargs` are the model's chat_template_kwargs
    (toolbridge options tb_*, other template variables); per-request options that the
    server's request model drops come from REQUEST_OPTIONS."""
    request = {**REQUEST_OPTIONS.get(), **{k: kwargs.pop(k) for k in REQUEST_KEYS if k in kwargs}}
    try:
        found_tools, choice = check_request({"tools": tools, "tool_choice": tool_choice, "functions": functions,
                                             "function_call": function_call, "messages": messages})
        user = _user_grammar(llama, grammar, response_format)
        opts = resolve(kwargs)
        dialect = opts.dialect
        parallel = request.get("parallel_tool_calls") is not False
        plan = _plan(llama, found_tools, choice, dialect, parallel, user)
        text = prompt.render(llama, messages, found_tools if plan.mode != "plain" else [], kwargs,
                             force=_force(choice) if plan.mode != "plain" else None, variables=kwargs)
        tokens = prompt.tokenize(llama, text)
        if len(tokens) >= llama.n_ctx():
            raise BadRequest(f"Requested tokens ({len(tokens)}) exceed context window of {llama.n_ctx()}",
                             param="messages", code="context_length_exceeded")
    except (BadRequest, ValueError) as e:
        e = e if isinstance(e, BadRequest) else BadRequest(str(e))
        if stream:
            return iter([e.body()])
        raise RequestError(e) from None

    eos = prompt.special_text(llama, llama.token_eos())
    stops = ([stop] if isinstance(stop, str) else list(stop or [])) + list(dialect.stop) + ([eos] if eos else [])
    sampling = Sampling(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p,
                        repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                        mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                        logits_processor=with_logit_bias(logits_processor, logit_bias))
    if plan.mode == "lazy" and opts.call_bias and steers(messages):
        encode = lambda t: llama.tokenize(t.encode("utf-8"), add_bos=False, special=False)  # noqa: E731
        bias = marker_bias(call_bias_tokens(dialect, encode), result_tokens(dialect, encode), opts.call_bias, len(tokens))
        sampling.logits_processor = llama_cpp.LogitsProcessorList([*(sampling.logits_processor or []), bias])
    session = Session(llama, text, tokens, sampling, seed=seed, max_tokens=max_tokens, stop=stops)
    answer = Answer(session, plan, model or llama.model_path)
    if stream:
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        return answer.chunks(include_usage)
    return answer.response()


def _force(choice: ToolChoice) -> str | None:
    return "required" if choice.mode == "required" else choice.name if choice.mode == "named" else None


def _user_grammar(llama: llama_cpp.Llama, grammar: LlamaGrammar | None, response_format: Any) -> LlamaGrammar | None:
    """The request's own constraint, checked (the stock server would crash on a bad grammar)."""
    if grammar is not None:
        if not compiles(llama, grammar._grammar, grammar._root):
            raise BadRequest("grammar is not a valid GBNF grammar.", param="grammar", code="invalid_grammar")
        return grammar
    return response_grammar(llama, plain_data(response_format))


def _plan(llama: llama_cpp.Llama, tools: list[Tool], choice: ToolChoice, dialect: Dialect, parallel: bool,
          user: LlamaGrammar | None) -> Plan:
    if not tools or choice.mode == "none":
        return Plan("plain", tools, choice, dialect, parallel, user)
    if user is not None:
        return Plan("user", tools, choice, dialect, parallel, user)
    if choice.forced:
        g = tool_grammar(llama, tools, dialect, choice, parallel=parallel and choice.mode == "required",
                         after_trigger=False)
        return Plan("strict", tools, choice, dialect, parallel, g)
    g = tool_grammar(llama, tools, dialect, choice, parallel=False, after_trigger=True)
    return Plan("lazy" if g is not None else "strict", tools, choice, dialect, parallel, g)


class Answer:
    """Generated text -> parser events -> an OpenAI response, or stream chunks."""

    def __init__(self, session: Session, plan: Plan, model: str):
        self.session = session
        self.plan = plan
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model

    def _texts(self) -> Iterator[str]:
        s, plan = self.session, self.plan
        if plan.mode != "lazy":
            yield from s.phase(grammar=plan.grammar)
            return
        trigger = plan.dialect.grammar_trigger
        after_call: tuple[str, ...] = ()
        while True:
            yield from s.phase(trigger=trigger, line_start=plan.dialect.line_start, stop=after_call)
            if s.ended != TRIGGER:
                return
            yield from s.phase(grammar=plan.grammar)  # the call, constrained, from the trigger on
            if s.ended != EOG or not plan.parallel:
                return
            # after a call, a model that starts writing the tool's result itself is done calling
            after_call = (plan.dialect.result_marker,)

    def events(self) -> Iterator[Event]:
        if self.plan.mode == "plain":
            for text in self._texts():
                yield Content(text)
            return
        parser = StreamParser(self.plan.tools, choice=self.plan.choice, max_calls=None if self.plan.parallel else 1)
        for text in self._texts():
            yield from parser.feed(text)
        yield from parser.finish()

    def finish_reason(self, calls: int) -> str:
        if self.session.ended == LENGTH:
            return "length"
        return "tool_calls" if calls and self.plan.choice.mode in ("auto", "required") else "stop"

    def usage(self) -> dict:
        s = self.session
        return {"prompt_tokens": s.n_prompt, "completion_tokens": s.completion_tokens,
                "total_tokens": s.n_prompt + s.completion_tokens}

    def response(self) -> dict:
        result = collect(self.events())
        calls = [c for c in result.calls if c.complete]  # a call cut off by max_tokens is no call
        message: dict[str, Any] = {"role": "assistant", "content": result.content if result.content or calls else ""}
        if calls:
            message["tool_calls"] = [c.to_openai() for c in calls]
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": self.finish_reason(len(calls))}],
                "usage": self.usage()}

    def _chunk(self, delta: dict, finish: str | None = None) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def chunks(self, include_usage: bool = False) -> Iterator[dict]:
        yield self._chunk({"role": "assistant", "content": ""} if self.plan.mode == "plain" else {"role": "assistant"})
        calls = 0
        for e in self.events():
            t = type(e)
            if t is Content:
                yield self._chunk({"content": e.text})
            elif t is CallStart:
                yield self._chunk({"tool_calls": [{"index": e.index, "id": e.id, "type": "function",
                                                   "function": {"name": e.name, "arguments": ""}}]})
            elif t is CallArgs:
                yield self._chunk({"tool_calls": [{"index": e.index, "function": {"arguments": e.text}}]})
            elif t is CallEnd and e.call.complete:
                calls += 1
        yield self._chunk({}, self.finish_reason(calls))
        if include_usage:
            yield {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                   "choices": [], "usage": self.usage()}
