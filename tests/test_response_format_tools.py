"""`response_format` beside tools under `auto`: the answer is calls, or a final answer that follows the
format (toolbridge.request.EITHER); under `required` or a named tool the two conflict (400).

The plan, the parser and each engine's constraint without a server: llama.cpp's grammar asked character by
character (tests/test_llamacpp_grammar.py's `accepts`), vLLM's structural tag asked through xgrammar. The
answers themselves: tests/agent_apis.py, on both servers.
"""
from __future__ import annotations

import json

import pytest

from servers import require
from toolsets import SEARCH, WEATHER
from toolbridge.errors import BadRequest
from toolbridge.request import EITHER, LAZY, PLAIN, USER, final_format, prepare

TOOLS = [WEATHER, SEARCH]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}, "sure": {"type": "boolean"}},
          "required": ["answer", "sure"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
FINAL = '{"answer": "It is sunny.", "sure": true}'


def planned(choice="auto", response_format=FORMAT, **kw):
    return prepare(tools=TOOLS, tool_choice=choice, messages=ASK, response_format=response_format, env={}, **kw)


def test_auto_beside_a_response_format_is_calls_or_a_final_answer():
    req = planned()
    assert req.mode == EITHER and req.final == ANSWER
    assert not req.steer  # the model chooses between the two; no start bias pushes it to a call
    calls = req.parse(CALL).calls
    assert [c.name for c in calls] == ["get_weather"] and req.finish_reason(calls, False) == "tool_calls"
    final = req.parse(FINAL)
    assert final.calls == [] and json.loads(final.content) == json.loads(FINAL)
    assert req.finish_reason(final.calls, False) == "stop"


@pytest.mark.parametrize("rf, mode", [
    (None, LAZY), ({"type": "text"}, LAZY), ({"type": "json_object"}, EITHER),
    ({"type": "json_schema", "name": "answer", "schema": ANSWER}, EITHER),  # Responses' text.format shape
    ({"type": "json_object", "schema": ANSWER}, EITHER),  # llama-cpp-python's own shape
])
def test_the_formats_read(rf, mode):
    assert planned(response_format=rf).mode == mode


def test_other_choices_and_constraints():
    assert planned(choice="none").mode == PLAIN
    assert planned(user_constraint=True).mode == USER  # a grammar or structured outputs of the user's own
    for choice in ("required", {"type": "function", "function": {"name": "search"}}):
        with pytest.raises(BadRequest) as e:
            planned(choice=choice)
        assert e.value.code == "conflicting_fields" and e.value.param == "response_format"


def test_a_format_that_is_no_schema_is_400():
    with pytest.raises(BadRequest) as e:
        final_format({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}})
    assert e.value.param == "response_format"
    assert final_format({"type": "json_schema", "json_schema": {"name": "x"}}) == {"type": "object"}


def test_the_parser_streams_a_final_answer_as_content():
    from toolbridge.parsing.answer import collect

    req = planned()
    parser = req.parser()
    events = [e for piece in (FINAL[:7], FINAL[7:20], FINAL[20:]) for e in parser.feed(piece)] + parser.finish()
    result = collect(events)
    assert result.calls == [] and json.loads(result.content) == json.loads(FINAL)


# -- llama.cpp: one grammar, calls or the final answer ------------------------------------------------------

def test_llamacpp_grammar_takes_calls_or_the_final_answer_and_nothing_else():
    require("llama_cpp")
    import llama_cpp

    from llamacpp_ext.compat import grammar_text
    from llamacpp_ext.grammar import answer_grammar
    from llamacpp_ext.model import model_of
    from test_llamacpp_grammar import accepts
    from toolbridge.serving.models import gguf_path

    llama = llama_cpp.Llama(str(gguf_path()), vocab_only=True, verbose=False)
    text = grammar_text(answer_grammar(model_of(llama), planned(), None))[0]
    assert accepts(llama, text, CALL) and accepts(llama, text, FINAL)
    assert not accepts(llama, text, "It is sunny.") and not accepts(llama, text, '{"answer": "x"}')


# -- vLLM: one structural tag, `or` of the calls and the format; vLLM's own response_format taken out -------

def test_vllm_tag_takes_calls_or_the_final_answer_and_nothing_else():
    require("vllm")
    import xgrammar as xgr
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from vllm_plugin import ToolbridgeToolParser
    from vllm_plugin.toolbridge_parser import _plan

    request = ChatCompletionRequest.model_validate({"model": "m", "messages": ASK, "tools": TOOLS,
                                                    "response_format": FORMAT})
    ToolbridgeToolParser(None).adjust_request(request)
    assert request.response_format is None and request.structured_outputs.structural_tag
    tag = request.structured_outputs.structural_tag
    assert json.loads(tag)["format"]["type"] == "or"
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_grammar(xgr.Grammar.from_structural_tag(tag))

    def accepts(text: str) -> bool:
        return xgr.GrammarMatcher(compiled, terminate_without_stop_token=True).accept_string(text)

    assert accepts(CALL) and accepts(FINAL)
    assert not accepts("It is sunny.") and not accepts('{"answer": "x"}')
    # the answer read back: the final answer is content, as the request's own plan reads it (the tag
    # carries the format, so a copy of the request planned in another process reads it the same)
    out = ToolbridgeToolParser(None).extract_tool_calls(FINAL, request)
    assert not out.tools_called and json.loads(out.content) == json.loads(FINAL)
    copy = ChatCompletionRequest.model_validate(request.model_dump(exclude={"vllm_xargs"}))
    assert _plan(copy, None).mode == EITHER and _plan(copy, None).final == ANSWER
