"""Prompt rendering: instruction text and OpenAI history -> plain turns (the Jinja prelude)."""
import json
import re

import pytest

from toolbridge import parse, render_messages, tools_instruction
from toolbridge.dialects import DIALECTS

from toolsets import READ, SEARCH, TOOLS, WEATHER

NESTED = {"type": "function", "function": {"name": "order", "description": "Place an order", "parameters": {
    "type": "object", "required": ["items"], "$defs": {"Addr": {"type": "object", "properties": {"zip": {"type": "string"}}}},
    "properties": {"items": {"type": "array", "items": {"type": "object", "required": ["sku"],
                                                         "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
                   "ship": {"$ref": "#/$defs/Addr"}, "note": {"type": ["string", "null"]},
                   "mode": {"anyOf": [{"type": "string", "enum": ["fast", "slow"]}, {"type": "integer"}]}}}}}


def test_instruction_lists_signature_types_required_enums_and_descriptions():
    text = tools_instruction(TOOLS + [NESTED])
    assert '- get_weather(city: string, days?: integer, unit?: "celsius"|"fahrenheit"): Get the current weather in a city.' in text
    assert "  city: City name" in text
    assert "- order(items: {sku: string, qty?: integer}[], ship?: {zip?: string}, note?: string|null, " \
           'mode?: "fast"|"slow"|integer): Place an order' in text
    assert "<tool_call>" in text and "If no tool is needed, answer directly." in text


def test_a_schema_default_is_written_after_its_argument():
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["c", "f"], "default": "f"}, "n": {"type": "integer", "default": 3},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []}, "x": {"type": "string", "default": None}}}}}
    assert '- f(unit?: "c"|"f" = "f", n?: integer = 3, tags?: string[] = [], x?: string = null)' in tools_instruction([tool])


EXAMPLE_TOOL = {"type": "function", "function": {"name": "tool_name", "parameters": {
    "type": "object", "properties": {"argument": {"type": "string"}}}}}


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_example_in_each_dialect_parses_back(name):
    text = tools_instruction([WEATHER], dialect=name)
    example = re.split(r"for example:\n", text, flags=re.I)[1].rsplit("\nIf no tool", 1)[0]
    r = parse(example, [EXAMPLE_TOOL])
    assert [(c.name, json.loads(c.arguments)) for c in r.calls] == [("tool_name", {"argument": "value"})]


def test_example_can_be_left_out_and_force_worded():
    assert "for example" in tools_instruction([WEATHER])
    text = tools_instruction([WEATHER], example=False, force="get_weather")
    assert '{"name"' not in text and text.endswith("Call get_weather now.")


def test_tool_text_is_not_evaluated():
    tool = {"type": "function", "function": {"name": "t", "description": "{{ 7*7 }} <b>bold</b> {% if x %}",
                                             "parameters": {"type": "object", "properties": {}}}}
    assert "{{ 7*7 }} <b>bold</b> {% if x %}" in tools_instruction([tool])


HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris"}, {"type": "text", "text": "and Rome?"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_b", "content": "rain"},
    {"role": "tool", "tool_call_id": "call_a", "content": "sun"},
    {"role": "assistant", "content": "Sun in Paris, rain in Rome."},
    {"role": "user", "content": "Thanks"},
]


def test_history_becomes_plain_alternating_turns():
    out = render_messages(HISTORY, TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert all(isinstance(m["content"], str) for m in out)
    assert out[0]["content"].startswith("Be brief.\n\nYou can call these tools:")
    assert out[1]["content"] == "Weather in Paris\nand Rome?"
    # arguments as a dict and as a JSON string are written alike, in the dialect
    assert out[2]["content"] == DIALECTS["tags"].format_calls([("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})])
    # results found by tool_call_id (OpenAI clients send no name), consecutive results in one turn
    assert out[3]["content"] == ('<tool_response>\n{"name": "get_weather", "content": "rain"}\n</tool_response>\n\n'
                                 '<tool_response>\n{"name": "get_weather", "content": "sun"}\n</tool_response>')


def test_history_calls_parse_back_in_every_dialect():
    for name, d in DIALECTS.items():
        out = render_messages(HISTORY, TOOLS, dialect=name)
        r = parse(out[2]["content"], TOOLS)
        assert [(c.name, json.loads(c.arguments)) for c in r.calls] == [("get_weather", {"city": "Paris"}),
                                                                         ("get_weather", {"city": "Rome"})], name


def test_no_system_role_folds_system_into_first_user_turn():
    out = render_messages(HISTORY, TOOLS, system_role=False)
    assert [m["role"] for m in out] == ["user", "assistant", "user", "assistant", "user"]
    assert out[0]["content"].startswith("Be brief.\n\nYou can call these tools:")
    assert out[0]["content"].endswith("Weather in Paris\nand Rome?")


def test_without_tools_messages_pass_through():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert render_messages(msgs, None) == msgs
    assert render_messages([{"role": "system", "content": "s"}] + msgs, None, system_role=False) == \
        [{"role": "user", "content": "s\n\nhi"}, {"role": "assistant", "content": "hello"}]


def test_assistant_text_and_calls_together():
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{\"query\": \"x\"}"}}]}]
    out = render_messages(msgs, [SEARCH], dialect="toolcall")
    assert out[-1]["content"] == 'Let me look.\nTOOL_CALL: {"name": "search", "arguments": {"query": "x"}}'


def test_unmatched_tool_message_renders_without_name():
    msgs = [{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "nope", "content": "r"}]
    out = render_messages(msgs, [READ], dialect="react")
    assert out[-1] == {"role": "user", "content": "q\n\nObservation (): r"}


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("force", [None, "required", "search"])
@pytest.mark.parametrize("example", [True, False])
def test_cached_instruction_renders_the_same_prompt(dialect, force, example):
    """tb_instruction (the text tools_instruction gives, kept per tool set) changes nothing."""
    from toolbridge.prompt.chat_templates import FAMILIES, wrap
    from toolbridge.prompt.render import compile_template, tools_instruction

    tpl = compile_template(wrap(FAMILIES["chatml"].stock, dialect=dialect, example=example))
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    kw = {"tb_force": force} if force else {}
    text = tools_instruction(TOOLS, dialect=dialect, example=example, force=force)
    assert text and text in tpl.render(messages=msgs, tools=TOOLS, add_generation_prompt=True, **kw)
    assert (tpl.render(messages=msgs, tools=TOOLS, add_generation_prompt=True, tb_instruction=text, **kw)
            == tpl.render(messages=msgs, tools=TOOLS, add_generation_prompt=True, **kw))
    other = tpl.render(messages=msgs, tools=TOOLS, add_generation_prompt=True, tb_instruction="CACHED", **kw)
    assert "CACHED" in other and text not in other  # the prelude does use the text it is given


@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_a_custom_tool_is_shown_as_a_function_of_its_input_with_its_grammar_in_every_dialect(name):
    from toolbridge import custom

    grammar = 'start: pair ("," pair)*\npair: KEY "=" VALUE\nKEY: /[a-z_]+/\nVALUE: /[A-Za-z0-9]+/'
    tool = custom.as_function("set_options", "Set options.", {"type": "grammar", "syntax": "lark",
                                                                "definition": grammar}, "tools[0]")
    text = tools_instruction([tool], dialect=name)
    assert "- set_options(input: string): Set options." in text
    assert grammar in text
