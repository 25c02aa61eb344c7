"""vLLM tool parser `toolbridge`: a thin adapter over toolbridge's core.

Loadable three ways: `--tool-parser-plugin vllm_plugin`, `--tool-parser-plugin
/path/to/vllm_plugin/toolbridge_parser.py` (run as a standalone file: absolute imports only,
and safe to execute twice), or the `vllm.general_plugins` entry point once installed.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Sequence

from toolbridge import BadRequest, ToolChoice, check_tool_results, normalize_tool_choice, normalize_tools, parse
from toolbridge.grammar import relax, structural_tag
from toolbridge.options import call_bias_tokens, resolve, result_tokens, steers
from toolbridge.stream import CallArgs, CallEnd, CallStart, Content, StreamParser

try:  # vLLM >= 0.11 with the unified parser layout (0.32: vllm.tool_parsers)
    from vllm.tool_parsers import ToolParser, ToolParserManager
except ImportError:  # older releases
    from vllm.entrypoints.openai.tool_parsers import ToolParser, ToolParserManager  # type: ignore
try:
    from vllm.entrypoints.generate.base.protocol import (DeltaFunctionCall, DeltaMessage, DeltaToolCall,
                                                         ExtractedToolCallInformation, FunctionCall, ToolCall)
except ImportError:
    from vllm.entrypoints.openai.protocol import (DeltaFunctionCall, DeltaMessage, DeltaToolCall,  # type: ignore
                                                  ExtractedToolCallInformation, FunctionCall, ToolCall)
try:
    from vllm.sampling_params import StructuredOutputsParams
except ImportError:  # a release without structured outputs: parse only, never constrain
    StructuredOutputsParams = None  # type: ignore

log = logging.getLogger("toolbridge.vllm")
NAME = "toolbridge"
BIAS_IDS, RESULT_IDS, BIAS = "toolbridge_bias_ids", "toolbridge_result_ids", "toolbridge_bias"  # read by vllm_plugin.bias


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
        self._passthrough = False
        self._finished = False

    # -- request ---------------------------------------------------------------------------
    def adjust_request(self, request: Any) -> Any:
        """Constrain calls to the tools' schemas: lazily for auto, strictly for required and
        named; for auto, ask for the first-position call bias. A user's own response_format
        or structured output is left alone."""
        if not getattr(request, "tools", None) or request.tool_choice == "none":
            return request
        try:
            check_tool_results(request.messages)
            tools = normalize_tools(request.tools)
            choice = normalize_tool_choice(request.tool_choice, tools)
            opts = resolve(getattr(request, "chat_template_kwargs", None))
        except (BadRequest, ValueError) as e:
            raise ValueError(str(e)) from None  # vLLM answers ValueError with 400
        dialect = opts.dialect
        if dialect.stop:
            request.stop = list(dict.fromkeys(list(_as_list(request.stop)) + list(dialect.stop)))
        if _user_constrained(request):
            return request
        if choice.mode == "auto" and opts.call_bias and self.model_tokenizer is not None and steers(request.messages):
            encode = lambda t: self.model_tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
            request.vllm_xargs = {**(getattr(request, "vllm_xargs", None) or {}), BIAS: opts.call_bias,
                                  BIAS_IDS: call_bias_tokens(dialect, encode), RESULT_IDS: result_tokens(dialect, encode)}
        if StructuredOutputsParams is None:
            return request
        one = ToolChoice("auto")
        tools = relax(tools, lambda t: _compiles(structural_tag([t], dialect, one)))
        spec = json.dumps(structural_tag(tools, dialect, choice, parallel=request.parallel_tool_calls is not False),
                          ensure_ascii=False)
        if not _compiles(spec):
            log.warning("toolbridge: the structured-output backend cannot take this tool constraint; "
                        "calls are parsed unconstrained")
            return request
        request.structured_outputs = StructuredOutputsParams(structural_tag=spec)
        request.response_format = None
        return request

    # -- non-streaming --------------------------------------------------------------------------
    def extract_tool_calls(self, model_output: str, request: Any) -> ExtractedToolCallInformation:
        if request.tool_choice == "none" or not request.tools:
            return ExtractedToolCallInformation(tools_called=False, tool_calls=[], content=model_output)
        tools, choice, max_calls = self._request_setup(request)
        result = parse(model_output, tools, choice=choice, max_calls=max_calls)
        calls = [c for c in result.calls if c.complete]  # a call cut off by max_tokens is not a call
        return ExtractedToolCallInformation(
            tools_called=bool(calls),
            tool_calls=[ToolCall(id=c.id, type="function", function=FunctionCall(name=c.name, arguments=c.arguments))
                        for c in calls],
            content=result.content)

    # -- streaming ----------------------------------------------------------------------------------
    def extract_tool_calls_streaming(self, previous_text: str, current_text: str, delta_text: str,
                                     previous_token_ids: Sequence[int], current_token_ids: Sequence[int],
                                     delta_token_ids: Sequence[int], request: Any) -> DeltaMessage | None:
        if self._stream is None and not self._passthrough:
            if request.tool_choice == "none" or not request.tools:
                self._passthrough = True
            else:
                tools, choice, max_calls = self._request_setup(request)
                self._stream = StreamParser(tools, choice=choice, max_calls=max_calls)
        if self._passthrough:
            return DeltaMessage(content=delta_text) if delta_text else None
        events = self._stream.feed(delta_text)
        eos = getattr(self.model_tokenizer, "eos_token_id", None)
        if eos is not None and eos in delta_token_ids:  # releases without finish_streaming()
            events += self._finish()
        return self._delta(events)

    def finish_streaming(self) -> DeltaMessage | None:
        """The stream ended: what the core held back (a possible marker, a call to close)."""
        return self._delta(self._finish()) if self._stream is not None else None

    def _finish(self) -> list:
        if self._finished:
            return []
        self._finished = True
        return self._stream.finish()

    def _request_setup(self, request: Any):
        tools = normalize_tools(request.tools)
        choice = normalize_tool_choice(request.tool_choice, tools)
        return tools, choice, (1 if request.parallel_tool_calls is False else None)

    def _delta(self, events: list) -> DeltaMessage | None:
        """Core events -> one DeltaMessage; vLLM's bookkeeping lists kept in step so its
        end-of-stream flush finds nothing left to add."""
        if not events:
            return None
        content: list[str] = []
        calls: dict[int, DeltaToolCall] = {}
        for e in events:
            if type(e) is Content:
                content.append(e.text)
            elif type(e) is CallStart:
                self.current_tool_id = e.index
                self.current_tool_name_sent = True
                self.prev_tool_call_arr.append({"name": e.name, "arguments": ""})
                self.streamed_args_for_tool.append("")
                calls[e.index] = DeltaToolCall(index=e.index, id=e.id, type="function",
                                               function=DeltaFunctionCall(name=e.name, arguments=""))
            elif type(e) is CallArgs:
                self.streamed_args_for_tool[e.index] += e.text
                self.prev_tool_call_arr[e.index]["arguments"] = self.streamed_args_for_tool[e.index]
                tc = calls.get(e.index)
                if tc is None:
                    calls[e.index] = DeltaToolCall(index=e.index, function=DeltaFunctionCall(arguments=e.text))
                else:
                    tc.function.arguments = (tc.function.arguments or "") + e.text
            elif type(e) is CallEnd:
                self.prev_tool_call_arr[e.index]["arguments"] = e.call.arguments
        if not content and not calls:
            return None
        return DeltaMessage(content="".join(content) or None, tool_calls=list(calls.values()))


def _as_list(stop: Any) -> list[str]:
    if not stop:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _user_constrained(request: Any) -> bool:
    rf = getattr(request, "response_format", None)
    if rf is not None and getattr(rf, "type", "text") != "text":
        return True
    so = getattr(request, "structured_outputs", None)
    return so is not None and any(getattr(so, k, None) for k in
                                  ("json", "regex", "choice", "grammar", "json_object", "structural_tag"))


def _compiles(tag: dict | str) -> bool:
    """Whether xgrammar takes this structural tag (vLLM's auto backend would otherwise fail
    the request); without xgrammar, let vLLM decide."""
    try:
        import xgrammar
    except ImportError:
        return True
    try:
        xgrammar.Grammar.from_structural_tag(tag if isinstance(tag, str) else json.dumps(tag, ensure_ascii=False))
    except Exception as e:  # xgrammar raises RuntimeError subclasses with the reason
        log.info("toolbridge: structural tag rejected: %s", e)
        return False
    return True


def register() -> None:
    """Register the parser under its name (idempotent; the plugin file may run twice)."""
    ToolParserManager.register_module(NAME, force=True, module=ToolbridgeToolParser)


register()
