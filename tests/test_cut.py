"""A chat answer cut by its token limit is reported cut ("length"), whole and streamed
(toolbridge.serving.cut, which the vLLM request check puts in front of the client)."""
from __future__ import annotations

import asyncio
import json

import pytest

from toolbridge.serving import cut


def _answer(finish: str, tokens: int) -> dict:
    return {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": finish, "message": {
        "role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": "{}"}}]}}], "usage": {"prompt_tokens": 9, "completion_tokens": tokens}}


def _run(wrapper: cut.CutAnswer, messages: list[dict]) -> list[dict]:
    sent: list[dict] = []

    async def downstream(message):
        sent.append(message)

    wrapper.downstream = downstream

    async def run():
        for m in messages:
            await wrapper.send(m)

    asyncio.run(run())
    return sent


@pytest.mark.parametrize("tokens, finish", [(20, "length"), (25, "length"), (19, "tool_calls")])
def test_a_whole_answer_at_its_limit_is_cut(tokens, finish):
    raw = json.dumps(_answer("tool_calls", tokens)).encode()
    sent = _run(cut.CutAnswer(None, 20, stream=False), [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json"),
                                                                   (b"content-length", str(len(raw)).encode())]},
        {"type": "http.response.body", "body": raw[:10], "more_body": True},
        {"type": "http.response.body", "body": raw[10:], "more_body": False}])
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert json.loads(body)["choices"][0]["finish_reason"] == finish
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(body)).encode()


def test_an_error_and_a_plain_stop_pass_as_they_are():
    for status, data in ((400, {"error": {"message": "no"}}), (200, {**_answer("stop", 20)})):
        raw = json.dumps(data).encode()
        sent = _run(cut.CutAnswer(None, 20, stream=False), [
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]},
            {"type": "http.response.body", "body": raw, "more_body": False}])
        assert json.loads(sent[-1]["body"]) == data


def _chunk(finish: str | None = None, delta: dict | None = None) -> bytes:
    return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta or {}, "finish_reason": finish}]}).encode() + b"\n\n"


USAGE = b'data: {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"completion_tokens": %d}}\n\n'


@pytest.mark.parametrize("asked", [True, False])
@pytest.mark.parametrize("tokens, finish", [(12, "length"), (11, "tool_calls")])
def test_a_streams_finish_waits_for_its_usage(asked, tokens, finish):
    events = [_chunk(delta={"role": "assistant"}), _chunk(delta={"tool_calls": [{"index": 0, "function": {
        "arguments": "{"}}]}), _chunk("tool_calls"), USAGE % tokens, b"data: [DONE]\n\n"]
    stream = b"".join(events)
    messages = [{"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}]
    messages += [{"type": "http.response.body", "body": stream[i:i + 37], "more_body": True}
                 for i in range(0, len(stream), 37)]
    messages.append({"type": "http.response.body", "body": b"", "more_body": False})
    sent = _run(cut.CutAnswer(None, 12, stream=True, usage_asked=asked), messages)
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    data = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and "[DONE]" not in line]
    finishes = [c["finish_reason"] for d in data for c in d["choices"] if c["finish_reason"]]
    assert finishes == [finish]
    assert any("usage" in d for d in data) == asked
    assert text.rstrip().endswith("data: [DONE]")


def test_a_request_asks_for_its_usage_and_says_whether_the_client_did():
    data = {"stream": True}
    assert cut.asks_usage(data) is False and data["stream_options"] == {"include_usage": True}
    data = {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": False}}
    assert cut.asks_usage(data) is True and data["stream_options"]["continuous_usage_stats"] is False
    assert cut.limit_of({"max_tokens": 10}) == 10 and cut.limit_of({"max_completion_tokens": 7, "max_tokens": 9}) == 7
    assert cut.limit_of({"max_tokens": 10, "n": 2}) is None and cut.limit_of({}) is None
    assert cut.limit_of({"max_tokens": True}) is None


def _message(stop: str, tokens: int) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": stop,
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
            "usage": {"input_tokens": 9, "output_tokens": tokens}}


@pytest.mark.parametrize("tokens, stop", [(20, "max_tokens"), (19, "tool_use")])
def test_a_whole_message_at_its_limit_is_cut(tokens, stop):
    raw = json.dumps(_message("tool_use", tokens)).encode()
    sent = _run(cut.CutAnswer(None, 20, stream=False, api=cut.MESSAGES), [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]},
        {"type": "http.response.body", "body": raw, "more_body": False}])
    assert json.loads(sent[-1]["body"])["stop_reason"] == stop


@pytest.mark.parametrize("tokens, stop", [(20, "max_tokens"), (19, "tool_use")])
def test_a_message_streams_delta_at_its_limit_is_cut(tokens, stop):
    delta = {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
             "usage": {"output_tokens": tokens}}
    stream = (b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
              + f"event: message_delta\ndata: {json.dumps(delta)}\n\n".encode()
              + b'event: message_stop\ndata: {"type": "message_stop"}\n\n')
    sent = _run(cut.CutAnswer(None, 20, stream=True, api=cut.MESSAGES), [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]},
        {"type": "http.response.body", "body": stream, "more_body": False}])
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    assert [e["type"] for e in events] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[1]["delta"]["stop_reason"] == stop and "event: message_delta" in text
