"""The agent-API readers and writers (toolbridge.apis): Responses and Messages bodies into chat
requests, chat answers and chunks back; a stream's events add up to the whole answer."""
from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolbridge import BadRequest, custom
from toolbridge.apis import anthropic, responses, responses_stream
from toolbridge.serving.asgi import check_messages, check_responses

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def test_responses_reader_items_tools_and_choice():
    chat = responses.chat_request({
        "model": "m", "instructions": "Be brief.", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False, "max_output_tokens": 9, "stream": True,
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
                  {"type": "reasoning", "summary": []},
                  {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                  {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                  {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city": "Rome"}'},
                  {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                  {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]}]})
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "rain"}]
    assert chat["tools"] == [{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["max_tokens"] == 9 and chat["parallel_tool_calls"] is False
    assert chat["response_format"]["type"] == "json_schema"
    assert chat["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("body", [
    {"input": []}, {"input": 3}, {"input": [{"type": "local_shell_call"}]}, {"input": "x", "tools": [{"type": None}]},
    {"input": [{"role": "wizard", "content": "x"}]}, {"input": "x", "tool_choice": {"type": "file_search"}},
    {"input": [{"type": "function_call", "call_id": 1, "name": "f", "arguments": "{}"}]}, {"input": "x", "background": True},
    {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
])
def test_responses_reader_refuses(body):
    with pytest.raises(BadRequest):
        responses.chat_request(body)


def test_responses_namespace_custom_and_builtin_tools():
    """Shown to the model as vLLM's own Responses serving shows them; calls written back as the
    client declared them."""
    tools = [{"type": "namespace", "name": "agents", "description": "d", "tools": [dict(WEATHER, name="spawn")]},
             {"type": "custom", "name": "apply_patch", "description": "Patch files"}, {"type": "web_search"}, WEATHER]
    chat = responses.chat_request({"input": [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin"},
        {"type": "web_search_call", "id": "ws", "status": "completed"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"}], "tools": tools})
    assert [t["function"]["name"] for t in chat["tools"]] == ["agents__spawn", "apply_patch", "get_weather"]
    assert chat["tools"][1]["function"]["parameters"] == custom.TEXT_PARAMETERS
    assert [c["function"] for c in chat["messages"][1]["tool_calls"]] == [
        {"name": "agents__spawn", "arguments": "{}"}, {"name": "apply_patch", "arguments": '{"input": "*** Begin"}'}]
    completion = {"model": "m", "choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
        {"id": "c3", "type": "function", "function": {"name": "agents__spawn", "arguments": '{"city": "x"}'}},
        {"id": "c4", "type": "function", "function": {"name": "apply_patch", "arguments": '{"input": "diff"}'}}]}}]}
    whole = responses.response(completion, {"tools": tools})["output"]
    assert (whole[0]["type"], whole[0]["namespace"], whole[0]["name"]) == ("function_call", "agents", "spawn")
    assert (whole[1]["type"], whole[1]["input"]) == ("custom_tool_call", "diff")
    stream = responses_stream.ResponseStream({"tools": tools})
    events = [e for c in chunks(completion, [3]) for e in stream.feed(c)] + stream.finish_events()
    assert strip_ids(events[-1]["response"]["output"]) == strip_ids(whole)
    assert "response.custom_tool_call_input.done" in [e["type"] for e in events]


def test_responses_continued_result_answers_a_call_the_engine_keeps():
    body = {"previous_response_id": "resp_1", "tools": [WEATHER],
            "input": [{"type": "function_call_output", "call_id": "c9", "output": "sunny"}]}
    check_responses(body)  # a result for a call made in the stored response
    with pytest.raises(BadRequest):  # without a previous response it answers nothing
        check_responses({k: v for k, v in body.items() if k != "previous_response_id"})


def test_messages_reader_blocks_tools_and_choice():
    chat = anthropic.chat_request({
        "model": "m", "max_tokens": 20, "system": [{"type": "text", "text": "Be brief."}], "stop_sequences": ["END"],
        "tools": [{"name": "get_weather", "description": "Weather", "input_schema": WEATHER["parameters"]}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [{"role": "user", "content": "Paris?"},
                     {"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                                                       {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                        "input": {"city": "Paris"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                   "content": [{"type": "text", "text": "sunny"}]},
                                                  {"type": "text", "text": "And Rome?"}]}]})
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Paris?"},
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "user", "content": "And Rome?"}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["stop"] == ["END"] and chat["max_tokens"] == 20
    assert anthropic.chat_tool_choice({"type": "tool", "name": "f"})[0] == {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize("body", [
    {"messages": [{"role": "user", "content": "x"}]}, {"max_tokens": 5, "messages": []},
    {"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
    {"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document"}]}]},
    {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305"}]},
    {"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "tool"}},
    {"max_tokens": True, "messages": [{"role": "user", "content": "x"}]},
])
def test_messages_reader_refuses(body):
    with pytest.raises(BadRequest):
        anthropic.chat_request(body)


def test_messages_check_runs_the_core_tool_checks():
    with pytest.raises(BadRequest, match="toolu_zz"):
        check_messages({"max_tokens": 5, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_zz", "content": "x"}]}]})


# -- writers: a stream's events add up to the whole answer, for any split -------------------------

COMPLETION = {"model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 5}, "choices": [{
    "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]}}]}


def chunks(completion: dict, cuts: list[int]) -> list[dict]:
    """The completion as chat stream chunks: content then each call, each string cut at `cuts`."""
    msg = completion["choices"][0]["message"]
    out = [{"choices": [{"delta": {"content": p}}]} for p in split(msg.get("content") or "", cuts)]
    for i, tc in enumerate(msg.get("tool_calls") or ()):
        parts = split(tc["function"]["arguments"], cuts)
        out.append({"choices": [{"delta": {"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                                           "function": {"name": tc["function"]["name"], "arguments": ""}}]}}]})
        out += [{"choices": [{"delta": {"tool_calls": [{"index": i, "function": {"arguments": p}}]}}]} for p in parts]
    out.append({"choices": [{"delta": {}, "finish_reason": completion["choices"][0]["finish_reason"]}]})
    out.append({"choices": [], "usage": completion.get("usage")})
    return out


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:]) if b > a]


def strip_ids(items: list[dict]) -> list[dict]:
    return [{k: v for k, v in i.items() if k != "id"} for i in items]


@settings(max_examples=60)
@given(st.lists(st.integers(0, 40), max_size=6))
def test_responses_stream_adds_up_to_the_response(cuts):
    stream = responses_stream.ResponseStream({"model": "m"})
    events = [e for c in chunks(COMPLETION, cuts) for e in stream.feed(c)] + stream.finish_events()
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    whole = responses.response(COMPLETION, {"model": "m"})
    assert strip_ids(events[-1]["response"]["output"]) == strip_ids(whole["output"])
    assert events[-1]["response"]["usage"] == whole["usage"]
    added = {e["item"]["id"]: "" for e in events if e["type"] == "response.output_item.added"}
    for e in events:
        if e["type"] == "response.function_call_arguments.delta":
            added[e["item_id"]] += e["delta"]
    done = {e["item"]["id"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    assert set(done) == set(added)
    for item_id, item in done.items():
        if item["type"] == "function_call":
            assert added[item_id] == item["arguments"]


@settings(max_examples=60)
@given(st.lists(st.integers(0, 40), max_size=6))
def test_messages_stream_adds_up_to_the_message(cuts):
    stream = anthropic.MessageStream({"model": "m"})
    events = [e for c in chunks(COMPLETION, cuts) for e in stream.feed(c)] + stream.finish_events()
    blocks: dict[int, dict] = {}
    for e in events:
        if e["type"] == "content_block_start":
            blocks[e["index"]] = dict(e["content_block"], _json="")
        elif e["type"] == "content_block_delta":
            d = e["delta"]
            if d["type"] == "text_delta":
                blocks[e["index"]]["text"] += d["text"]
            else:
                blocks[e["index"]]["_json"] += d["partial_json"]
    content = [{k: v for k, v in b.items() if k != "_json"} | ({"input": json.loads(b["_json"])} if b["type"] == "tool_use" else {})
               for _, b in sorted(blocks.items())]
    whole = anthropic.message(COMPLETION, {"model": "m"})
    assert content == whole["content"]
    assert events[-2]["delta"]["stop_reason"] == whole["stop_reason"] == "tool_use"
    assert events[-2]["usage"] == whole["usage"]
    assert [e["type"] for e in events][0] == "message_start" and events[-1]["type"] == "message_stop"


def test_writers_cut_off_and_named():
    cut = {"model": "m", "choices": [{"finish_reason": "length", "message": {"role": "assistant", "content": "Par"}}]}
    assert responses.response(cut, {})["status"] == "incomplete"
    assert anthropic.message(cut, {})["stop_reason"] == "max_tokens"
    named = {"model": "m", "choices": [{"finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "tool_calls": COMPLETION["choices"][0]["message"]["tool_calls"][:1]}}]}
    assert anthropic.message(named, {})["stop_reason"] == "tool_use"
    assert anthropic.message(named, {})["content"][0]["id"].startswith("toolu_")


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(
                                                ["type", "role", "content", "input", "tools", "text", "format",
                                                 "source", "name", "call_id", "output", "tool_choice", "messages",
                                                 "max_tokens", "system", "parameters", "arguments", "tool_use_id"]),
                                                inner, max_size=4)),
                    max_leaves=12)


BASES = {"responses": ({"input": "hi"}, "input"),
         "messages": ({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}, "messages")}


@settings(max_examples=600, deadline=None)
@example("responses", {"text": {"format": "x"}}, [])  # each once a 500
@example("responses", {}, [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}, 5]}])
@example("messages", {}, [{"type": "image", "source": "x"}])
@given(st.sampled_from(["responses", "messages"]), st.dictionaries(st.sampled_from(
    ["text", "tools", "tool_choice", "instructions", "system", "input", "messages", "stop_sequences",
     "parallel_tool_calls", "previous_response_id"]), JSON, max_size=3), st.lists(JSON, max_size=3))
def test_readers_raise_only_bad_request(api, fields, items):
    """A valid body with any fields and any input items or turns: a chat request or a BadRequest
    (a 400), never another exception (a 500)."""
    base, key = BASES[api]
    body = {**base, **fields}
    if items and key not in fields:
        body[key] = items if api == "responses" else [{"role": "user", "content": items}]
    try:
        (check_responses if api == "responses" else check_messages)(body)
    except BadRequest:
        pass
