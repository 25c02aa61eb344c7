"""The agent APIs' schema check (toolbridge.apis.validate) without a server: what it refuses, with
which field named, what it lets through (the official SDKs' types), and that a wrongly typed field
is always a BadRequest (a 400), whichever field and whatever value."""
from __future__ import annotations

import typing

from pathlib import Path

import pytest
from hypothesis import given, settings

from agent_apis import ASK, FIELD_BASES, FIELD_TYPES, MESSAGES_TOOLS, RESPONSES_TOOLS, TYPED_BAD, field_cases
from toolbridge import BadRequest
from toolbridge.apis import validate
from toolbridge.serving.asgi import check_count_tokens, check_messages, check_responses

CHECK = {"responses": validate.responses_body, "messages": validate.messages_body}
WHERE = {"responses": ["max_output_tokens", "stream", "store", "parallel_tool_calls", "metadata", "text",
                       "text.format.schema", "tools[0].type", "input[0].content"],
         "messages": ["tools[0].input_schema", "tool_choice.disable_parallel_tool_use", "stop_sequences[0]"]}


def refused(api: str, body: dict) -> BadRequest:
    with pytest.raises(BadRequest) as e:
        CHECK[api](body)
    return e.value


@pytest.mark.parametrize("api", list(TYPED_BAD))
def test_the_issues_cases_name_their_field(api):
    base = {"max_tokens": 16} if api == "messages" else {}
    for body, where in zip(TYPED_BAD[api], WHERE[api]):
        e = refused(api, {"model": "m", **base, **body})
        assert e.param == where and f"'{where}'" in e.message, (body, e.message, e.param)


def test_messages_say_what_was_expected_and_what_came():
    e = refused("responses", {"input": ASK, "max_output_tokens": "48"})
    assert e.message == "Invalid 'max_output_tokens': expected an integer (got '48').", e.message
    e = refused("responses", {"input": ASK, "tools": [{"type": "banana"}]})
    assert "unknown type" in e.message and "'function'" in e.message and "banana" not in e.param, e.message
    # of a union's members, the deepest error tells what is wrong
    e = refused("responses", {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]})
    assert e.param == "input[0].content[0].text", e.message
    e = refused("messages", {"max_tokens": 4, "messages": [{"role": "user", "content": ASK}]} | {"max_tokens": True})
    assert e.param == "max_tokens", e.message
    assert refused("messages", {"messages": [{"role": "user", "content": ASK}]}).message == \
        "Invalid 'max_tokens': this field is required."


def test_a_count_tokens_body_is_a_messages_body_without_max_tokens():
    body = {"model": "m", "messages": [{"role": "user", "content": ASK}], "tools": MESSAGES_TOOLS}
    validate.count_tokens_body(body)
    check_count_tokens(body)
    with pytest.raises(BadRequest):
        check_count_tokens({**body, "tools": [{"name": "f"}]})
    with pytest.raises(BadRequest):  # the tools are checked as for the answer
        check_count_tokens({**body, "tool_choice": {"type": "tool", "name": "nope"}})


CODEX_LIKE = {
    "model": "m", "instructions": "You are Codex.", "stream": True, "store": False, "parallel_tool_calls": False,
    "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "medium", "summary": "auto"},
    "prompt_cache_key": "k", "tool_choice": "auto", "text": {"verbosity": "low"},
    "tools": [*RESPONSES_TOOLS, {"type": "web_search"},
              {"type": "custom", "name": "apply_patch", "description": "d",
               "format": {"type": "grammar", "syntax": "lark",
                          "definition": (Path(__file__).parent / "data" / "apply_patch.lark").read_text()}},
              {"type": "namespace", "name": "agents", "description": "d",
               "tools": [{"type": "function", "name": "spawn", "parameters": {"type": "object"}, "strict": False}]}],
    "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
              {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]},
              {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
              {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
              {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
              {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"}],
}
CLAUDE_CODE_LIKE = {
    "model": "m", "max_tokens": 32000, "stream": True, "temperature": 1, "metadata": {"user_id": "u"},
    "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
    "tools": [{**t, "cache_control": {"type": "ephemeral"}} for t in MESSAGES_TOOLS],
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "messages": [{"role": "user", "content": [{"type": "text", "text": ASK}]},
                 {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                                   {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                    "input": {"city": "Paris"}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                               "content": [{"type": "text", "text": "sunny"}], "is_error": False}]}],
}


def test_agent_clients_bodies_pass():
    validate.responses_body(CODEX_LIKE)
    validate.messages_body(CLAUDE_CODE_LIKE)
    check_responses({k: v for k, v in CODEX_LIKE.items() if k != "store"})
    check_messages(CLAUDE_CODE_LIKE)
    for api, base in FIELD_BASES.items():
        CHECK[api]({"model": "m", **base})


def test_extra_fields_pass():
    """Engines take fields of their own (vLLM's top_k, chat_template_kwargs, ...): not the schema's to refuse."""
    validate.responses_body({"input": ASK, "top_k": 5, "chat_template_kwargs": {"tb_dialect": "json"}, "x": [1]})
    validate.messages_body({"max_tokens": 4, "messages": [{"role": "user", "content": ASK}], "min_p": 0.1})


def _sdk_types(union) -> set[str]:
    """The `type` values of the TypedDicts in one of the SDKs' unions."""
    out: set[str] = set()
    for member in typing.get_args(union):
        while typing.get_origin(member) is typing.Annotated:
            member = typing.get_args(member)[0]
        hint = typing.get_type_hints(member).get("type")
        stack = [hint]
        while stack:
            t = stack.pop()
            if isinstance(t, str):
                out.add(t)
            elif t is not None and t is not type(None):
                stack += list(typing.get_args(t))
    return out


def test_every_type_the_openai_sdk_declares_passes_the_schema():
    """Tool and input item types: the reader says which it supports; the schema knows them all."""
    from openai.types.responses import response_input_item_param, tool_param

    for kind in _sdk_types(tool_param.ToolParam):
        validate.responses_body({"input": ASK, "tools": [{"type": kind, "name": "f", "tools": []}]})
    item = {"role": "user", "content": "x", "call_id": "c", "name": "f", "arguments": "{}", "output": "o", "input": "i"}
    for kind in _sdk_types(response_input_item_param.ResponseInputItemParam):
        validate.responses_body({"input": [{**item, "type": kind}]})


def test_every_type_the_anthropic_sdk_declares_passes_the_schema():
    from anthropic.types import content_block_param, tool_choice_param, tool_union_param

    for kind in _sdk_types(tool_union_param.ToolUnionParam):
        validate.messages_body({"max_tokens": 4, "messages": [{"role": "user", "content": ASK}],
                                "tools": [{"type": kind, "name": "f", "input_schema": {"type": "object"}}]})
    block = {"text": "t", "source": {}, "id": "i", "name": "n", "input": {}, "tool_use_id": "i", "thinking": "t",
             "data": "d"}
    for kind in _sdk_types(content_block_param.ContentBlockParam):
        validate.messages_body({"max_tokens": 4, "messages": [{"role": "user", "content": [{**block, "type": kind}]}]})
    for kind in _sdk_types(tool_choice_param.ToolChoiceParam):
        validate.messages_body({"max_tokens": 4, "messages": [{"role": "user", "content": ASK}],
                                "tool_choice": {"type": kind, "name": "f"}})


@pytest.mark.parametrize("api", list(CHECK))
def test_each_field_wrongly_typed_is_a_bad_request(api):
    """Any one field of a well-formed body set to a value of another type: a BadRequest naming it
    (or a field inside it), never a pass and never another exception."""

    @settings(max_examples=400, deadline=None)
    @given(field_cases(api))
    def one(case):
        path, body = case
        with pytest.raises(BadRequest) as e:
            CHECK[api](body)
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
        assert (e.value.param or "").startswith(where), (path, body, e.value.message)

    one()


def test_field_table_covers_the_schema():
    """Every top-level field the schema types has a row in the fuzz table (the shared e2e tests use it)."""
    skip = {"responses": {"stream_options", "background", "conversation", "prompt", "truncation", "service_tier",
                          "safety_identifier", "prompt_cache_key", "max_tool_calls", "top_logprobs"},
            "messages": {"output_config", "service_tier"}}
    models = {"responses": validate.ResponsesBody, "messages": validate.MessagesBody}
    for api, model in models.items():
        typed = set(model.model_fields) - skip[api]
        assert typed <= {p[0] for p in FIELD_TYPES[api]}, typed - {p[0] for p in FIELD_TYPES[api]}
