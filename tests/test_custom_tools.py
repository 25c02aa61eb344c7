"""Custom tools (`type: custom`), their engine-neutral part: the function each engine serves for one
(its grammar as the input's pattern), the chat body's rewrite, and the answer's calls written back in the
custom shape, whole and streamed (the same input for any split into deltas)."""
from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbridge import BadRequest, custom
from toolbridge.apis import responses
from toolbridge.serving.custom_calls import CustomCalls
from toolbridge.tools import normalize_tools

ZIP = {"type": "grammar", "syntax": "regex", "definition": "^[0-9]{5}$"}
WEATHER = {"type": "grammar", "syntax": "lark", "definition": 'start: "sunny" | "rainy" | "cloudy"'}


def _tool(fmt: dict, name: str = "t"):
    return normalize_tools([custom.as_function(name, "a tool", fmt, "tools[0]")])[0]


def test_regex_input_is_held_to_the_whole_pattern():
    tool = _tool(ZIP)
    assert tool.parameters["properties"]["input"]["pattern"] == "^(?:[0-9]{5})$"
    assert tool.errors({"input": "90210"}) == []
    assert tool.errors({"input": "902101"}) and tool.errors({"input": "Beverly Hills"})
    assert "[0-9]{5}" in tool.description


def test_lark_input_is_held_to_the_grammar_and_shown_as_written():
    tool = _tool(WEATHER)
    assert tool.errors({"input": "rainy"}) == []
    assert tool.errors({"input": "Paris"})
    assert WEATHER["definition"] in tool.description


def test_text_input_is_free():
    tool = _tool({"type": "text"})
    assert tool.parameters == custom.TEXT_PARAMETERS
    assert tool.errors({"input": "anything at all"}) == []


def test_chat_grammar_shape_is_read_as_the_responses_one():
    chat = {"type": "grammar", "grammar": {"syntax": "regex", "definition": "[0-9]{5}"}}
    assert custom.read_format(chat, "x") == custom.read_format(ZIP, "x")[:1] + ("[0-9]{5}",)


@pytest.mark.parametrize("definition, construct", [
    ("(?=[0-9])[0-9]{5}", "lookahead"), ("([a-z])\\1", "backreference"), ("a\\bb", "anchor"),
    ("(?i)abc", "flag"), ("[0-9", "malformed"),
])
def test_a_regex_no_engine_can_hold_is_a_400_naming_it(definition, construct):
    with pytest.raises(BadRequest) as e:
        custom.as_function("t", "", {"type": "grammar", "syntax": "regex", "definition": definition}, "tools[0]")
    assert construct in e.value.message and e.value.param == "tools[0].format.definition"


@pytest.mark.parametrize("fmt, param", [
    ({"type": "grammar", "syntax": "ebnf", "definition": "x"}, "tools[0].format.syntax"),
    ({"type": "grammar", "syntax": "regex", "definition": ""}, "tools[0].format.definition"),
    ({"type": "json"}, "tools[0].format"),
    ({"type": "grammar", "syntax": "lark", "definition": "start: start_missing_rule"}, "tools[0].format.definition"),
])
def test_a_bad_format_is_a_400_naming_the_field(fmt, param):
    with pytest.raises(BadRequest) as e:
        custom.as_function("t", "", fmt, "tools[0]")
    assert e.value.param == param


def test_responses_tools_carry_the_grammar():
    tools = responses.chat_tools([{"type": "custom", "name": "zip", "format": ZIP}])
    assert tools[0]["function"]["parameters"]["properties"]["input"]["pattern"] == "^(?:[0-9]{5})$"


def test_grammar_tools_become_text_ones_for_a_route_that_refuses_grammars():
    tools = [{"type": "custom", "name": "zip", "description": "zip code", "format": ZIP},
             {"type": "custom", "name": "free"}, {"type": "function", "name": "f"}]
    assert responses.grammars_as_text(tools)
    assert tools[0]["format"] == {"type": "text"} and "[0-9]{5}" in tools[0]["description"]
    assert tools[1:] == [{"type": "custom", "name": "free"}, {"type": "function", "name": "f"}]
    assert not responses.grammars_as_text(tools)


def test_chat_body_is_rewritten_as_functions():
    data = {"tools": [{"type": "custom", "custom": {"name": "zip", "format": {
                "type": "grammar", "grammar": {"syntax": "regex", "definition": "[0-9]{5}"}}}},
                      {"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "custom", "custom": {"name": "zip"}},
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "tool_calls": [
                             {"id": "c1", "type": "custom", "custom": {"name": "zip", "input": "90210"}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}
    assert custom.shim_chat(data) == {"zip"}
    assert data["tools"][0]["function"]["name"] == "zip" and data["tools"][1] == {"type": "function",
                                                                                 "function": {"name": "f"}}
    assert data["tool_choice"] == {"type": "function", "function": {"name": "zip"}}
    call = data["messages"][1]["tool_calls"][0]
    assert call == {"id": "c1", "type": "function", "function": {"name": "zip", "arguments": '{"input": "90210"}'}}


def test_a_body_without_custom_tools_is_left_as_it_is():
    data = {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"}
    assert custom.shim_chat(data) == frozenset() and data["tool_choice"] == "auto"


@settings(max_examples=200, deadline=None)
@given(st.text(), st.data())
def test_an_input_prefix_is_a_prefix_of_the_input(text, data):
    arguments = json.dumps({"input": text}, ensure_ascii=data.draw(st.booleans()))
    cut = data.draw(st.integers(0, len(arguments)))
    assert text.startswith(custom.input_prefix(arguments[:cut]))
    assert custom.input_prefix(arguments) == text == custom.decode_input(arguments)


def _run(wrapper: CustomCalls, messages: list[dict]) -> list[dict]:
    async def go():
        for m in messages:
            await wrapper.send(m)
    asyncio.run(go())
    return messages


class _Sink:
    def __init__(self):
        self.messages: list[dict] = []

    async def send(self, message: dict) -> None:
        self.messages.append(message)


def test_a_whole_answer_writes_custom_calls_in_their_shape():
    sink = _Sink()
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "zip", "arguments": '{"input": "90210"}'}},
        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}
    raw = json.dumps(body).encode()
    _run(CustomCalls(sink.send, frozenset({"zip"})), [
        {"type": "http.response.start", "status": 200,
         "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]},
        {"type": "http.response.body", "body": raw[:10], "more_body": True},
        {"type": "http.response.body", "body": raw[10:], "more_body": False}])
    start, sent = sink.messages
    calls = json.loads(sent["body"])["choices"][0]["message"]["tool_calls"]
    assert calls[0] == {"id": "c1", "type": "custom", "custom": {"name": "zip", "input": "90210"}}
    assert calls[1]["type"] == "function"
    assert dict(start["headers"])[b"content-length"] == str(len(sent["body"])).encode()


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=0, max_size=40), st.lists(st.integers(1, 8), max_size=12), st.integers(1, 30))
def test_a_streamed_custom_call_is_its_whole_input_for_any_split(text, sizes, byte_split):
    arguments = json.dumps({"input": text}, ensure_ascii=False)
    pieces, at = [], 0
    for n in sizes:
        pieces.append(arguments[at:at + n])
        at += n
    pieces.append(arguments[at:])
    chunks = [{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "c1", "type": "function", "function": {"name": "zip", "arguments": ""}}]}}]}]
    chunks += [{"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": p}}]}}]}
               for p in pieces]
    stream = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    sink = _Sink()
    parts = [stream[i:i + byte_split] for i in range(0, len(stream), byte_split)]
    _run(CustomCalls(sink.send, frozenset({"zip"})), [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]},
        *({"type": "http.response.body", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts))])
    events = b"".join(m.get("body", b"") for m in sink.messages[1:]).split(b"\n\n")
    fragments = [tc for e in events if e.startswith(b"data: {")
                 for tc in json.loads(e[6:])["choices"][0]["delta"]["tool_calls"]]
    assert fragments[0]["type"] == "custom" and fragments[0]["custom"]["name"] == "zip"
    assert all("function" not in f for f in fragments)
    assert "".join(f["custom"]["input"] for f in fragments) == text


def test_a_regex_the_translator_cannot_draw_is_a_400_not_free_text():
    """What both engines draw a pattern with decides: a class with no character a JSON string holds raw or as an
    escape the translator writes is refused, where a check of its own would have passed it."""
    with pytest.raises(BadRequest) as e:
        custom.as_function("t", "", {"type": "grammar", "syntax": "regex", "definition": "[\\x00-\\x08]+"}, "tools[0]")
    assert "character class" in e.value.message and e.value.param == "tools[0].format.definition"


def test_a_requests_pattern_is_drawn_once(monkeypatch):
    """The check that refuses what cannot be drawn and the constraint built for the same tool draw its pattern
    once between them (vLLM: the request check's shim, then adjust_request's structural tag)."""
    from toolbridge.constrain import pattern

    drawn = []
    draw = pattern._draw
    monkeypatch.setattr(pattern, "_draw", lambda *a: drawn.append(a) or draw(*a))
    fmt = {"type": "grammar", "syntax": "lark", "definition": 'start: "drawn" "-" ("once" | "only")'}
    function = custom.as_function("t", "", fmt, "tools[0]")
    grammar = custom.input_grammar(function["function"]["parameters"])
    assert len(drawn) == 1 and drawn[0][0] == function["function"]["parameters"]["properties"]["input"]["pattern"]
    assert pattern.pattern_to_gbnf(drawn[0][0]) in grammar


def test_follows_reads_a_grammar_as_its_own_tools_do():
    assert custom.follows("regex", "[0-9]{5}", "90210") and not custom.follows("regex", "[0-9]{5}", "902101")
    assert custom.follows("lark", WEATHER["definition"], "rainy")
    assert not custom.follows("lark", WEATHER["definition"], "Paris")
