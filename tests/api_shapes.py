"""Every error and every cut answer in the shape of the API the client speaks, the same tests for
every server (imported by the engine modules, which provide `server`, `api_model` and `api_refused`:
the cases that server must refuse). Messages errors carry Anthropic's body and the error type Anthropic
uses for the status; a Responses stream cut at max_output_tokens ends with `response.incomplete`.
"""
from __future__ import annotations

import json
import time

import httpx
import pytest

from agent_apis import ASK, MESSAGES_TOOLS, RESPONSES_TOOLS, post
from toolbridge.apis.anthropic import ERROR_TYPES

__all__ = ["test_messages_errors_in_anthropic_shape", "test_count_tokens_errors_in_anthropic_shape",
           "test_anthropic_client_reads_a_context_overflow", "test_responses_cut_stream_ends_incomplete",
           "test_responses_cut_stream_to_a_slow_reader"]

MEGABYTE = "word " * 200_000
ASKED = [{"role": "user", "content": ASK}]


def many_tools(n: int) -> list[dict]:
    return [{"name": f"tool_{i}", "description": f"Look up record {i} of the archive, with every detail it holds.",
             "input_schema": {"type": "object", "properties": {"id": {"type": "string"}, "depth": {"type": "integer"}},
                              "required": ["id"]}} for i in range(n)]


# Each case is merged over {model, max_tokens 16, messages ASKED}; None deletes a key. The names are
# those of the cases measured on vLLM's own route.
MESSAGES_CASES = {
    "missing_model": {"model": None},
    "stop_sequences_100": {"stop_sequences": [f"stop{i}" for i in range(100)]},
    "content_1mb": {"messages": [{"role": "user", "content": MEGABYTE}]},
    "system_1mb": {"system": MEGABYTE},
    "tools_300": {"tools": many_tools(300)},
    "lone_surrogates": {"messages": [{"role": "user", "content": "caf\ud800 \udfff"}]},
    "image_to_text_model": {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAfbLI3wAAAABJRU5ErkJggg=="}},
        {"type": "text", "text": "What is in the picture?"}]}]},
    "empty_content": {"messages": [{"role": "user", "content": []}]},
    "max_tokens_1e9": {"max_tokens": 1_000_000_000},
    "temperature_3": {"temperature": 3},
}
COUNT_TOKENS_CASES = ("missing_model", "lone_surrogates", "empty_content", "image_to_text_model")


def body_of(case: str, model: str, **more) -> bytes:
    body = {"model": model, "max_tokens": 16, "messages": ASKED, **MESSAGES_CASES[case], **more}
    # json.dumps writes a lone surrogate as its \\u escape: the JSON is valid, the text is not
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


def anthropic_type(status: int) -> str:
    return ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")


def check_answer(api: str, case: str, status: int, data, refused: set[str]) -> None:
    """An error is in Anthropic's shape with the type for its status and a message; an answer is a
    Message (a stream: its events); never a 5xx; a case the server must refuse is a 4xx."""
    assert status < 500, (case, status, data)
    if case in refused:
        assert 400 <= status < 500, (case, status, data)
    if status >= 400:
        assert isinstance(data, dict) and data.get("type") == "error" and set(data["error"]) == {"type", "message"}, data
        assert data["error"]["type"] == anthropic_type(status), (case, status, data)
        assert isinstance(data["error"]["message"], str) and data["error"]["message"], data
    elif api == "messages" and isinstance(data, dict):
        assert data.get("type") == "message", (case, data)
    elif api == "messages":
        events = [json.loads(line[5:]) for line in data if line.startswith("data:")]
        assert events and events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop", (case, events)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("case", list(MESSAGES_CASES))
def test_messages_errors_in_anthropic_shape(api_root, api_model, api_refused, case, stream):
    extra = {"stream": True} if stream else {}
    status, data = post(api_root, "messages", body_of(case, api_model, **extra), stream=stream)
    check_answer("messages", case, status, data, api_refused)
    print(f"\n{case} ({'stream' if stream else 'create'}): {status} "
          f"{data['error']['type'] if status >= 400 else 'answered'}")


@pytest.mark.parametrize("case", COUNT_TOKENS_CASES)
def test_count_tokens_errors_in_anthropic_shape(api_root, api_model, api_refused, case):
    body = json.loads(body_of(case, api_model))
    body.pop("max_tokens")
    status, data = post(api_root, "count_tokens", json.dumps(body).encode())
    check_answer("count_tokens", case, status, data, api_refused)
    if status == 200:
        assert isinstance(data.get("input_tokens"), int), data


def test_anthropic_client_reads_a_context_overflow(ant, api_model):
    """The official client raises BadRequestError for a prompt past the context, with Anthropic's
    error type and the engine's message."""
    import anthropic

    with pytest.raises(anthropic.BadRequestError) as e:
        ant.messages.create(model=api_model, max_tokens=16, messages=[{"role": "user", "content": MEGABYTE}])
    assert e.value.status_code == 400
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error", e.value.body
    print(f"\ncontext overflow: {e.value.body['error']['message'][:160]}")


@pytest.mark.parametrize("tools", [True, False], ids=["named_tool", "no_tools"])
def test_responses_cut_stream_ends_incomplete(oai, api_model, tools):
    """Cut at max_output_tokens: the official client's stream ends with response.incomplete and its
    reason; the same request whole has status incomplete."""
    kw = dict(model=api_model, input=ASK, max_output_tokens=1, temperature=0)
    if tools:
        kw.update(tools=RESPONSES_TOOLS, tool_choice={"type": "function", "name": "search"})
    events = list(oai.responses.create(stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds, kinds
    last = events[-1].response
    assert last.status == "incomplete" and last.incomplete_details.reason == "max_output_tokens", last
    whole = oai.responses.create(**kw)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"


def test_responses_cut_stream_to_a_slow_reader(api_root, api_model):
    """A reader that takes its time gets the same ending: the last event is response.incomplete."""
    body = {"model": api_model, "input": "Tell me about Paris.", "max_output_tokens": 6, "stream": True, "temperature": 0}
    names = []
    with httpx.Client(timeout=120) as c, c.stream("POST", api_root + "/v1/responses", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("event:"):
                names.append(line[6:].strip())
                time.sleep(0.05)
    assert names[-1] == "response.incomplete" and "response.completed" not in names, names
