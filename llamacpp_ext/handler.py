"""The `toolbridge` chat handler: OpenAI tool calls from a model whose template has none.

A request goes top down, each step handed what the one before decided: the model's facts, read once
(model.py) -> the request's plan (`prepare_answer`: the request's own constraint, the core's decision,
400 on bad input; the prompt, the model's template behind the core's prelude, prompt.py; the grammar
the answer is generated under) -> generation (generate.Session: lazy grammar for `auto`, strict for
`required` and named, none for plain text) -> the core's parser -> an OpenAI response, or chunks.
The core is reached through toolbridge.engine.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Iterator, Mapping

import llama_cpp
from llama_cpp import LlamaGrammar

from toolbridge.engine import (BUDGET_OPTION, BadRequest, CallEnd, CheckedRequest, DEFAULT_THINKING, Entry, Event,
                               PLAIN, PlainText, ThinkingSplit, ToolCall, ToolRequest, check, collect, delta, message,
                               opened_by, plan, with_budget)

from . import prompt
from .compat import end_tokens
from .generate import EOG, LENGTH, TRIGGER, Sampling, Session, logit_bias_ids
from .grammar import answer_grammar, entry_grammar, user_grammar
from .interrupt import Interrupt, Interrupted, error_body, logged
from .model import Model, model_of

REQUEST_KEYS = ("parallel_tool_calls", "stream_options", "reasoning_effort", "chat_template_kwargs")


@dataclass(frozen=True)
class ChatContext:
    """What the handler's arguments lack of a chat request: the request fields llama-cpp-python's
    request model drops (REQUEST_KEYS), and its tool fields as the server checked them (`checked`,
    toolbridge.request.check: the handler plans from them, not checking again), and the answer's
    `interrupt` (set when its client leaves: interrupt.py). The server's chat route passes it
    (server.py); a caller of Llama.create_chat_completion passes the fields as keywords."""

    checked: CheckedRequest | None = None
    interrupt: Interrupt | None = None
    parallel_tool_calls: Any = None
    stream_options: Any = None
    reasoning_effort: Any = None
    chat_template_kwargs: Any = None

    @classmethod
    def read(cls, data: Mapping[str, Any], checked: CheckedRequest | None = None) -> ChatContext:
        """The context of a request body (or keywords) `data`."""
        return cls(checked, **{k: data[k] for k in REQUEST_KEYS if k in data})


ERROR_PREFIX = "toolbridge_invalid_request: "


class RequestError(ValueError):
    """A BadRequest, raised in a form the server answers with 400 (see server.py)."""

    def __init__(self, error: BadRequest):
        super().__init__(ERROR_PREFIX + json.dumps(error.body()["error"]))
        self.error = error


def toolbridge_chat_handler(
    *, llama: llama_cpp.Llama, messages: list, functions: Any = None, function_call: Any = None,
    tools: Any = None, tool_choice: Any = None, temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40,
    stream: bool = False, stop: Any = None, seed: int | None = None, response_format: Any = None,
    max_tokens: int | None = None, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.1, model: str | None = None, logit_bias: dict | None = None, min_p: float = 0.05,
    typical_p: float = 1.0, tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_tau: float = 5.0,
    mirostat_eta: float = 0.1, logits_processor: Any = None, grammar: LlamaGrammar | None = None,
    logprobs: bool | None = None, top_logprobs: int | None = None, context: ChatContext | None = None,
    **kwargs: Any,
) -> dict | Iterator[dict]:
    """llama-cpp-python's chat handler protocol. `kwargs` are the model's chat_template_kwargs
    (toolbridge options tb_*, other template variables), and the REQUEST_KEYS of a caller that passes
    no `context` (they take the place of the context's)."""
    context = replace(context or ChatContext(), **{k: kwargs.pop(k) for k in REQUEST_KEYS if k in kwargs})
    try:
        kwargs = with_request_options(kwargs, context)
        p = prepare_answer(llama, messages=messages, tools=tools, tool_choice=tool_choice, functions=functions,
                           function_call=function_call, parallel_tool_calls=context.parallel_tool_calls,
                           stop=stop, grammar=grammar, response_format=response_format, logit_bias=logit_bias,
                           options=kwargs, checked=context.checked)
    except BadRequest as e:
        if stream:
            return iter([e.body()])
        raise RequestError(e) from None

    sampling = Sampling(temp=temperature, top_p=top_p, top_k=top_k, min_p=min_p, typical_p=typical_p,
                        repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                        frequency_penalty=frequency_penalty, mirostat_mode=mirostat_mode,
                        mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                        logit_bias=p.logit_bias, processors=list(logits_processor or []))
    req, vocab, eos = p.req, p.model.vocab, p.model.eos
    session = Session(llama, p.text, p.tokens, sampling, seed=seed, max_tokens=max_tokens,
                      stop=[*req.stop, *([eos] if eos else [])],
                      rules=req.rules(vocab, end_tokens(llama), p.thinking), interrupt=context.interrupt)
    answer = Completion(session, req, p.grammar, p.entries, model or llama.model_path, thinking=p.thinking)
    if stream:
        return answer.chunks(bool((context.stream_options or {}).get("include_usage")))
    return answer.response()


def with_request_options(options: dict, context: ChatContext) -> dict:
    """The model's options under the request's own, as on vLLM: the toolbridge options (`tb_*`) of its
    `chat_template_kwargs` (what a Messages `thinking.budget_tokens` becomes, too), and a thinking budget
    from its `reasoning_effort` where it names none (toolbridge.thinking.EFFORT_BUDGETS). The stock
    template (`tb_template`) names a file or family on the server: it is the model's setting only, and
    a request that sets it is refused. The request's other keys are not template variables here."""
    own = context.chat_template_kwargs if isinstance(context.chat_template_kwargs, dict) else {}
    if TEMPLATE_OPTION in own:
        raise BadRequest(f"{TEMPLATE_OPTION} is the served model's setting (--chat_template_kwargs, or the config "
                         "file's chat_template_kwargs), not a request's.", param="chat_template_kwargs")
    mine = {k: v for k, v in own.items() if k.startswith("tb_")}
    try:
        budget = (with_budget(mine, effort=context.reasoning_effort) or {}).get(BUDGET_OPTION)
    except ValueError as e:
        raise BadRequest(str(e), param="reasoning_effort") from None
    merged = {**options, **mine}
    return merged if budget is None else {**merged, BUDGET_OPTION: budget}


TEMPLATE_OPTION = "tb_template"


@dataclass(frozen=True)
class Prepared:
    """Everything decided before generation starts, made once (`prepare_answer`)."""

    model: Model
    req: ToolRequest
    grammar: LlamaGrammar | None  # the constraint the whole answer is generated under
    entries: list[Entry]  # auto: the triggers that arm a call's constraint (lazy), else none
    logit_bias: dict[int, float]
    text: str  # the prompt
    tokens: list[int]
    thinking: bool  # the prompt opened a thinking block: the model's text starts inside it


def prepare_answer(llama: llama_cpp.Llama, *, messages: list, tools: Any, tool_choice: Any, functions: Any,
                   function_call: Any, parallel_tool_calls: Any, stop: Any, grammar: LlamaGrammar | None,
                   response_format: Any, logit_bias: Any, options: dict,
                   checked: CheckedRequest | None = None) -> Prepared:
    """The request's plan, constraint and prompt (BadRequest for a request that must be 400).
    `checked`: the request's tool fields as the server's request check read them (else read here)."""
    model = model_of(llama)
    try:
        user = user_grammar(model, grammar, response_format)
        if checked is None:
            checked = check(tools=tools, tool_choice=tool_choice, messages=messages, functions=functions,
                            function_call=function_call, parallel_tool_calls=parallel_tool_calls, stop=stop)
        req = plan(checked, template_kwargs=options, user_constraint=grammar is not None,
                   response_format=response_format, tool_trained=model.tool_trained)
        bias = logit_bias_ids(llama, logit_bias)
        text, tokens = prompt.build(model, messages, req, options)
    except ValueError as e:  # BadRequest included
        raise e if isinstance(e, BadRequest) else BadRequest(str(e)) from None
    if len(tokens) >= llama.n_ctx():
        raise BadRequest(f"Requested tokens ({len(tokens)}) exceed context window of {llama.n_ctx()}",
                         param="messages", code="context_length_exceeded")
    return Prepared(model, req, answer_grammar(model, req, user), req.entries, bias, text, tokens, opened_by(text))


class Completion:
    """Generated text -> parser events -> an OpenAI response, or stream chunks."""

    def __init__(self, session: Session, req: ToolRequest, grammar: LlamaGrammar | None, lazy: list[Entry],
                 model: str, thinking: bool = False):
        self.session = session
        self.thinking = thinking  # the prompt opened a thinking block: the model's text starts inside it
        self.req = req
        self.grammar = grammar
        self.entries = {e.trigger: e for e in lazy}
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model

    def _texts(self) -> Iterator[str]:
        s, req = self.session, self.req
        if self.thinking:  # the answer, its steering, triggers and grammar start after the thinking
            yield from s.think(DEFAULT_THINKING.close)
            if s.ended != TRIGGER:
                return
        if not self.entries:
            yield from s.phase(grammar=self.grammar)
            return
        triggers = {t: e.dialect.line_start for t, e in self.entries.items()}
        called = False
        while True:
            # after a call, a model that starts writing the tool's result itself is done calling
            stop = (req.dialect.result_marker,) if called else ()
            held: list[str] = []  # the last piece, which may be the trigger of a first call to check
            for piece in s.phase(triggers=triggers, stop=stop):
                yield from held
                held = [piece]
            checked = (s.ended == TRIGGER and req.grounded and not called
                       and not s.text[s.text_start:-len(s.trigger)].strip())
            if not checked:
                yield from held
            if s.ended != TRIGGER:
                return
            # the call, constrained from the trigger on (unconstrained if no grammar can be built)
            call = s.phase(grammar=entry_grammar(s.llama, req.toolset, self.entries[s.trigger], req.choice))
            if checked:  # held whole until its values are checked (toolbridge.steer.grounding)
                text = "".join([*held, *call])
                if s.ended == EOG and any(map(req.invented, req.parse(text).calls)):  # made up: answered anew
                    yield from s.again(req.in_text().rules(s.rules.vocab, s.rules.ends, thinking=False))
                    return
                yield text
            else:
                yield from call
            if s.ended != EOG or not req.parallel:
                return
            called = True

    def _event_batches(self) -> Iterator[list[Event]]:
        parser = ThinkingSplit(PlainText() if self.req.mode == PLAIN else self.req.parser(), opened=self.thinking)
        for text in self._texts():
            yield parser.feed(text)
        yield parser.finish()

    def finish_reason(self, calls: list[ToolCall]) -> str:
        return self.req.finish_reason(calls, truncated=self.session.ended == LENGTH)

    def usage(self) -> dict:
        s = self.session
        return {"prompt_tokens": s.n_prompt, "completion_tokens": s.completion_tokens,
                "total_tokens": s.n_prompt + s.completion_tokens}

    def response(self) -> dict:
        result = collect(e for batch in self._event_batches() for e in batch)
        calls = result.calls
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message(result.content, calls, result.reasoning), "logprobs": None,
                             "finish_reason": self.finish_reason(calls)}],
                "usage": self.usage()}

    def _chunk(self, delta: dict, finish: str | None = None) -> dict:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def chunks(self, include_usage: bool = False) -> Iterator[dict]:
        """The answer's stream chunks. Ended early (interrupt.py), it stops: where the server is
        stopping, with an error chunk its client reads as the stream's error."""
        try:
            yield from self._chunks(include_usage)
        except Interrupted as e:
            if e.stopping:
                logged(e.reason, e.tokens)
                yield error_body(e.reason)

    def _chunks(self, include_usage: bool) -> Iterator[dict]:
        self.session.prefill()
        yield self._chunk({"role": "assistant", "content": ""} if self.req.mode == PLAIN else {"role": "assistant"})
        calls: list[ToolCall] = []
        for batch in self._event_batches():
            calls += [e.call for e in batch if type(e) is CallEnd]
            d = delta(batch)
            if d is not None:
                yield self._chunk(d)
        yield self._chunk({}, self.finish_reason(calls))
        if include_usage:
            yield {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                   "choices": [], "usage": self.usage()}
