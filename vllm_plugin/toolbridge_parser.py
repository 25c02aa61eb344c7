"""vLLM tool parser `toolbridge`: a thin adapter over toolbridge's core.

Loadable three ways: `--tool-parser-plugin vllm_plugin`, `--tool-parser-plugin
/path/to/vllm_plugin/toolbridge_parser.py` (run as a standalone file: absolute imports only,
and safe to execute twice), or the `vllm.general_plugins` entry point once installed. Importing it
registers the parser, as vLLM's plugin loading expects, and installs the one seam it needs in vLLM
(`register`).

A request's plan (toolbridge.request) is made once, in adjust_request, and kept with the request
object for the answer (extract_tool_calls, or the stream): vLLM hands the same object to each.
"""
from __future__ import annotations

import weakref
from functools import partial
from typing import Any, Sequence

from toolbridge.engine import (ARG, EFFORT_BUDGETS, PLAIN, USER, BadRequest, CallArgs, CallEnd, CallStart, Event,
                               StreamParser, ToolRequest, check_environment, delta, hf_vocabulary, plain_data,
                               renders_tools, text_only)
from toolbridge.apis import responses
from vllm_plugin.constraint import memoize_validation, planned, response_format, structural_tag, user_constraint
from vllm_plugin.middleware import AGAIN, IN_TEXT, UNBIASED, WATCHED, choice_of, handed, install as install_request_check

try:  # vLLM >= 0.11 with the unified parser layout (0.32: vllm.tool_parsers)
    from vllm.tool_parsers import ToolParser, ToolParserManager
except ImportError:  # older releases
    from vllm.entrypoints.openai.tool_parsers import ToolParser, ToolParserManager  # type: ignore
try:
    from vllm.entrypoints.generate.base.protocol import (DeltaMessage, ExtractedToolCallInformation, FunctionCall,
                                                         ToolCall)
except ImportError:
    from vllm.entrypoints.openai.protocol import (DeltaMessage, ExtractedToolCallInformation,  # type: ignore
                                                  FunctionCall, ToolCall)
try:
    from vllm.sampling_params import StructuredOutputsParams
except ImportError:  # a release without structured outputs: parse only, never constrain
    StructuredOutputsParams = None  # type: ignore

NAME = "toolbridge"


class ToolbridgeToolParser(ToolParser):
    """Calls in any toolbridge dialect -> OpenAI tool_calls, streamed or not."""

    # required and named choices come through this parser, constrained by adjust_request
    supports_required_and_named = False
    structural_tag_model = None
    # vLLM then calls finish_streaming() at the end, and passes only the delta (O(1) per delta)
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, tools: Sequence[Any] | None = None, *args: Any, **kwargs: Any):
        try:
            super().__init__(tokenizer, tools)
        except TypeError:  # releases before 0.12 take only the tokenizer
            super().__init__(tokenizer)
        self._stream: StreamParser | None = None
        self._passthrough: Any = None  # a plain answer's reader (text_only)
        self._finished = False

    # -- request ---------------------------------------------------------------------------
    def adjust_request(self, request: Any) -> Any:
        """The request's stop strings, its `auto` steering, and its constraint: calls to the
        tools' schemas, lazily for auto, strictly for required and named. A user's own
        response_format or structured output is left alone."""
        if not getattr(request, "tools", None):
            return request
        req = _plan(request, self.model_tokenizer)
        request.stop = list(req.stop)
        if req.mode in (PLAIN, USER):
            return request
        tag = structural_tag(req) if StructuredOutputsParams is not None else None  # kept with the tool set
        sent = getattr(request, "vllm_xargs", None) or {}
        request.vllm_xargs = {k: v for k, v in sent.items() if k not in (ARG, AGAIN)}  # the rules' and the check's
        vocab = hf_vocabulary(self.model_tokenizer) if self.model_tokenizer is not None else None
        how = sent.get(AGAIN)
        if how == IN_TEXT:  # the request check asks for this answer again, in text: every call opening banned
            request.vllm_xargs.update(req.in_text().logit_args(vocab))
            return request
        if how == UNBIASED:  # ... without the start bias: the start it chose was left half-written
            req = req.unbiased_start()
        request.vllm_xargs.update(req.logit_args(vocab, start_held=how == WATCHED))  # ... and asks again if so
        if vocab is not None and getattr(request, "thinking_token_budget", None) is not None:
            request.thinking_token_budget = None  # the budget is the logits processor's now, not also vLLM's
        if tag is not None:
            request.structured_outputs = StructuredOutputsParams(structural_tag=tag)
            if hasattr(request, "response_format"):
                request.response_format = None
            else:  # a Responses request: its text format would be a second constraint
                request.text = None
        return request

    # -- non-streaming --------------------------------------------------------------------------
    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        req = _plan(request, self.model_tokenizer) if request.tools else None
        if req is None or req.mode == PLAIN:
            return ExtractedToolCallInformation(tools_called=False, tool_calls=[],
                                                content=text_only(req).whole(model_output))
        result = req.parse(model_output)
        calls = result.calls
        return ExtractedToolCallInformation(
            tools_called=bool(calls),
            tool_calls=[ToolCall(id=c.id, type="function", function=FunctionCall(name=c.name, arguments=c.arguments))
                        for c in calls],
            content=result.content)

    # -- streaming ----------------------------------------------------------------------------------
    def extract_tool_calls_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                     previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                     delta_token_ids: Sequence[int], request: Any) -> DeltaMessage | None:
        if self._stream is None and self._passthrough is None:
            req = _plan(request, self.model_tokenizer) if request.tools else None
            if req is None or req.mode == PLAIN:
                self._passthrough = text_only(req)
            else:
                self._stream = req.parser()
        if self._passthrough is not None:
            text = self._passthrough.feed(delta_text)
            return DeltaMessage(content=text) if text else None
        events = self._stream.feed(delta_text)
        eos = getattr(self.model_tokenizer, "eos_token_id", None)
        if eos is not None and eos in delta_token_ids:  # releases without finish_streaming()
            events += self._finish()
        return self._delta(events)

    def finish_streaming(self) -> DeltaMessage | None:
        """The stream ended: what the core held back (a possible marker, a call to close)."""
        if self._passthrough is not None:
            text = self._passthrough.finish()
            return DeltaMessage(content=text) if text else None
        return self._delta(self._finish()) if self._stream is not None else None

    def _finish(self) -> list[Event]:
        if self._finished:
            return []
        self._finished = True
        return self._stream.finish()

    def _delta(self, events: list[Event]) -> DeltaMessage | None:
        """Core events -> one DeltaMessage, with vLLM's bookkeeping lists kept in step so its
        end-of-stream flush finds nothing left to add."""
        for e in events:
            if type(e) is CallStart:
                self.current_tool_id = e.index
                self.current_tool_name_sent = True
                self.prev_tool_call_arr.append({"name": e.name, "arguments": ""})
                self.streamed_args_for_tool.append("")
            elif type(e) is CallArgs:
                self.streamed_args_for_tool[e.index] += e.text
                self.prev_tool_call_arr[e.index]["arguments"] = self.streamed_args_for_tool[e.index]
            elif type(e) is CallEnd:
                self.prev_tool_call_arr[e.index]["arguments"] = e.call.arguments
        d = delta(events)
        return DeltaMessage.model_validate(d) if d is not None else None


# Each request's plan while the request lives: by the request object's id, checked against a weak
# reference to it (an id is reused only after its object is gone, and the entry goes with it).
_PLANS: dict[int, tuple[weakref.ref, ToolRequest]] = {}


def _plan(request: Any, tokenizer: Any) -> ToolRequest:
    """The request's plan: the one kept for it, else the one the request check made for its body
    (vllm_plugin.middleware.hand_on), else made now (the core's decision, for a chat or a Responses
    request); then kept. vLLM answers a ValueError with 400."""
    key = id(request)
    kept = _PLANS.get(key)
    if kept is not None and kept[0]() is request:
        return kept[1]
    req = handed(getattr(request, "vllm_xargs", None))  # the request check planned it already
    if req is None:
        try:
            kw = dict(_fields(request), tool_trained=renders_tools(getattr(tokenizer, "chat_template", None)))
            req = planned(kw, user_constraint(request))
        except BadRequest as e:
            raise ValueError(e.message) from None
    try:
        _PLANS[key] = (weakref.ref(request, partial(_forget, key)), req)
    except TypeError:  # an object without weak references: planned again when asked again
        pass
    return req


def _forget(key: int, ref: weakref.ref) -> None:
    """A request is gone: its plan goes with it (unless a newer request took its id already)."""
    if _PLANS.get(key, (None,))[0] is ref:
        del _PLANS[key]


# What the core reads of a Responses request (vLLM keeps a continued conversation itself).
RESPONSES_FIELDS = {"input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "stop",
                    "previous_response_id"}


def _fields(request: Any) -> dict:
    """What `prepare` reads of a request: its chat template kwargs, the thinking budget it asks for
    (vLLM's `thinking_token_budget`, what a Messages `thinking.budget_tokens` becomes; a reasoning
    effort toolbridge has a budget for), and its chat fields as plain data: a chat request's own, or a
    Responses request read by the core's Responses reader (input items, flat function tools, its
    tool_choice shape). Tools stay vLLM's objects: the core reads the four fields it needs of each
    (toolbridge.tools.tool_fields) to find a tool set it has seen, which costs less than converting them all."""
    chat = hasattr(request, "messages")
    effort = request.reasoning_effort if chat else getattr(request.reasoning, "effort", None)
    own = {"template_kwargs": getattr(request, "chat_template_kwargs", None),
           "response_format": response_format(request),
           "thinking_budget": getattr(request, "thinking_token_budget", None),
           "reasoning_effort": effort if effort in EFFORT_BUDGETS else None}  # vLLM checked the others itself
    xargs = getattr(request, "vllm_xargs", None)  # an allowed_tools choice, carried by the request check
    if not chat:
        body = responses.chat_request(request.model_dump(mode="json", include=RESPONSES_FIELDS, exclude_none=True))
        return {**own, **{k: body.get(k) for k in ("tools", "messages", "parallel_tool_calls", "stop")},
                "tool_choice": choice_of(body.get("tool_choice"), xargs)}
    return {**own, "tools": request.tools, "tool_choice": choice_of(plain_data(request.tool_choice), xargs),
            "messages": request.messages,  # vLLM's request model keeps messages as dicts already
            "parallel_tool_calls": request.parallel_tool_calls, "stop": request.stop}


def register() -> None:
    """Register the parser under its name, and install the two seams toolbridge needs in vLLM:
    vLLM's validation of a request's structural tag remembers the tags it passed
    (vllm_plugin.constraint.memoize_validation), and every app vLLM builds answers in each API's
    shape (vllm_plugin.middleware.install). Idempotent; the plugin file may run twice. A bad
    TOOLBRIDGE_* setting stops the server's start (toolbridge.options.check_environment)."""
    check_environment()
    ToolParserManager.register_module(NAME, force=True, module=ToolbridgeToolParser)
    memoize_validation()
    install_request_check()


register()
