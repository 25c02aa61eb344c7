"""`tool_choice: allowed_tools`: the prompt shows every tool, and only the allowed ones can be called.

The engine-neutral part (the core's check and plan, the Responses reader) and each engine's part without
a server: llama.cpp's prompt and grammar on the real SmolLM2 GGUF (its vocabulary only), vLLM's request
check, its request model and its parser's constraint. The answers themselves: tests/agent_apis.py, on
both servers.
"""
from __future__ import annotations

import json

import pytest

from servers import require
from toolsets import READ, SEARCH, TOOLS, WEATHER
from toolbridge.apis import responses
from toolbridge.errors import BadRequest
from toolbridge.request import LAZY, STRICT, prepare
from toolbridge.tools import allowed_choice

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CALL = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'


def planned(mode: str, names=("search",), **kw):
    return prepare(tools=TOOLS, tool_choice=allowed_choice(mode, list(names)), messages=ASK, **kw)


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_only_the_allowed_tools_can_be_called(mode):
    req = planned(mode, ("search", "read"))
    assert req.mode == (LAZY if mode == "auto" else STRICT) and req.choice.mode == mode
    assert [t.name for t in req.tools] == ["search", "read"]
    assert [t.name for t in req.declared.tools] == ["get_weather", "search", "read"]  # what the prompt shows
    assert set(req.call_guard().required) == {"search", "read"}
    # a call to a tool left out is no call: the parser keeps it as text, the guard does not count it
    left_out = CALL % ("get_weather", '{"city": "Paris"}')
    assert req.parse(left_out).calls == []
    assert [c.name for c in req.parse(CALL % ("search", '{"query": "x"}')).calls] == ["search"]
    if mode == "auto":  # the bare-JSON triggers name only the allowed tools
        assert not any("get_weather" in e.trigger for e in req.entries)
        assert any("search" in e.trigger for e in req.entries)


def test_the_finish_reason_and_the_rest_of_the_plan_are_the_modes():
    required, plain = planned("required"), prepare(tools=TOOLS, tool_choice="required", messages=ASK)
    assert required.force == plain.force == "required" and required.stop == plain.stop
    call = required.parse(CALL % ("search", '{"query": "x"}')).calls
    assert required.finish_reason(call, False) == "tool_calls"


@pytest.mark.parametrize("choice, param", [
    ({"type": "allowed_tools"}, "tool_choice.allowed_tools"),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "none", "tools": [{"type": "function", "function": {
        "name": "search"}}]}}, "tool_choice.allowed_tools.mode"),
    (allowed_choice("auto", []), "tool_choice.allowed_tools.tools"),
    (allowed_choice("required", ["nope"]), "tool_choice.allowed_tools.tools[0]"),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": ["search"]}},
     "tool_choice.allowed_tools.tools[0]"),
])
def test_a_malformed_allowed_tools_is_400(choice, param):
    with pytest.raises(BadRequest) as e:
        prepare(tools=TOOLS, tool_choice=choice, messages=ASK)
    assert e.value.param == param, e.value.message


def test_the_responses_shape_reads_as_the_chat_shape():
    body = {"input": "hi", "tools": [{"type": "function", **SEARCH["function"]}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function",
                                                                                   "name": "search"}]}}
    assert responses.chat_request(body)["tool_choice"] == allowed_choice("required", ["search"])


# -- llama.cpp: the prompt is the same bytes; the grammar names only the allowed tools ---------------------

@pytest.fixture(scope="module")
def model():
    require("llama_cpp")
    import llama_cpp

    from llamacpp_ext.model import model_of
    from toolbridge.serving.models import gguf_path

    return model_of(llama_cpp.Llama(str(gguf_path()), vocab_only=True, verbose=False))


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_llamacpp_renders_the_same_prompt_with_and_without_it(model, mode):
    from llamacpp_ext import prompt

    without = prompt.render(model, ASK, prepare(tools=TOOLS, tool_choice=mode, messages=ASK), {})
    with_it = prompt.render(model, ASK, planned(mode), {})
    assert with_it.encode() == without.encode()
    assert all(t["function"]["name"] in with_it for t in TOOLS)


def test_llamacpp_grammar_names_only_the_allowed_tools(model):
    from llamacpp_ext.compat import grammar_text
    from llamacpp_ext.grammar import answer_grammar, entry_grammar

    text = grammar_text(answer_grammar(model, planned("required", ("search", "read")), None))[0]
    assert '\\"search\\"' in text and '\\"read\\"' in text and "get_weather" not in text
    lazy = planned("auto", ("search",))
    for entry in lazy.entries:
        assert "get_weather" not in grammar_text(entry_grammar(model.llama, lazy.toolset, entry, lazy.choice))[0]


# -- vLLM: the request check carries it past vLLM's request models; the parser constrains to it ------------

def test_vllm_request_check_carries_it_and_the_parser_constrains_to_it():
    require("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from vllm_plugin import ToolbridgeToolParser
    from vllm_plugin.middleware import ALLOWED, RequestCheck

    body = {"model": "m", "messages": ASK, "tools": [WEATHER, SEARCH, READ],
            "tool_choice": allowed_choice("required", ["search"]), "vllm_xargs": {ALLOWED: ["get_weather"]}}
    assert RequestCheck(None).check(body) is True
    assert body["tool_choice"] == "required" and body["vllm_xargs"][ALLOWED] == ["search"]  # a client's own is replaced
    assert body["tools"] == [WEATHER, SEARCH, READ]  # vLLM renders the prompt from them: every tool, as without it
    request = ChatCompletionRequest.model_validate(body)  # vLLM's model takes the rewritten body
    ToolbridgeToolParser(None).adjust_request(request)
    tag = json.loads(request.structured_outputs.structural_tag)["format"]
    assert tag["tags"] and all('"search"' in t["begin"] for t in tag["tags"]), tag
    assert "get_weather" not in json.dumps(tag)
    # the parser's answer: a call to a tool left out is text
    out = ToolbridgeToolParser(None).extract_tool_calls(CALL % ("get_weather", '{"city": "Paris"}'), request)
    assert not out.tools_called
