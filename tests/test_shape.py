"""toolbridge.serving.shape: a route's answer written in the shape of the API the client speaks,
driven as pure ASGI (the real servers' answers are checked in tests/api_shapes.py)."""
from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings, strategies as st

from toolbridge.apis.anthropic import ERROR_TYPES
from toolbridge.serving.shape import CHAT, MESSAGES, RESPONSES, Shaped

SSE = [(b"content-type", b"text/event-stream; charset=utf-8")]
JSON = [(b"content-type", b"application/json")]


def answer(api: str, messages: list[dict], raises: Exception | None = None) -> tuple[int | None, bytes, bool]:
    """What the client gets when a route sends `messages` (then raises `raises`) through Shaped:
    (status, body, whether the body ended)."""
    out: list[dict] = []

    async def down(message: dict) -> None:
        out.append(message)

    async def route(send):
        for m in messages:
            await send(m)
        if raises is not None:
            raise raises

    asyncio.run(Shaped(down, api).run(route))
    starts = [m for m in out if m["type"] == "http.response.start"]
    assert len(starts) <= 1, starts
    bodies = [m for m in out if m["type"] == "http.response.body"]
    ended = bool(bodies) and not bodies[-1].get("more_body") and all(b.get("more_body") for b in bodies[:-1])
    return (starts[0]["status"] if starts else None), b"".join(b.get("body", b"") for b in bodies), ended


def whole(status: int, data, headers=JSON) -> list[dict]:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return [{"type": "http.response.start", "status": status, "headers": headers},
            {"type": "http.response.body", "body": raw, "more_body": False}]


def stream(chunks: list[bytes]) -> list[dict]:
    return [{"type": "http.response.start", "status": 200, "headers": SSE},
            *({"type": "http.response.body", "body": c, "more_body": True} for c in chunks),
            {"type": "http.response.body", "body": b"", "more_body": False}]


VLLM_VALIDATION = {"error": {"message": "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'model')}",
                             "type": "Bad Request", "param": "body.model", "code": 400}}
VLLM_ENGINE = {"type": "error", "error": {"type": "BadRequestError",
                                          "message": "This model's maximum context length is 8192 tokens."}}


@pytest.mark.parametrize("data", [VLLM_VALIDATION, VLLM_ENGINE, {"detail": "Not Found"}, b"upstream failed"],
                         ids=["openai_shape", "engine_type", "detail", "text"])
@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422, 429, 500, 503, 529])
def test_messages_errors_in_anthropic_shape(status, data):
    got, body, ended = answer(MESSAGES, whole(status, data))
    err = json.loads(body)
    assert got == status and ended
    assert err["type"] == "error" and set(err["error"]) == {"type", "message"}
    want = ERROR_TYPES.get(status) or ("invalid_request_error" if status < 500 else "api_error")
    assert err["error"]["type"] == want, (status, err)
    kept = data.get("error", {}).get("message", data.get("detail")) if isinstance(data, dict) else data.decode()
    assert err["error"]["message"] == kept


def test_anthropic_types_for_each_status_the_api_names():
    assert ERROR_TYPES == {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                           404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                           500: "api_error", 529: "overloaded_error"}


@pytest.mark.parametrize("api", [CHAT, RESPONSES])
def test_openai_errors_kept_or_written_in_openai_shape(api):
    raw = json.dumps(VLLM_VALIDATION).encode()
    assert answer(api, whole(400, raw)) == (400, raw, True)  # already OpenAI's: byte for byte
    status, body, _ = answer(api, whole(405, {"detail": "Method Not Allowed"}))
    assert status == 405 and json.loads(body) == {"error": {"message": "Method Not Allowed", "type": "MethodNotAllowedError",
                                                            "param": None, "code": 405}}
    status, body, _ = answer(api, whole(500, b"Internal Server Error", [(b"content-type", b"text/plain")]))
    assert status == 500 and json.loads(body)["error"]["type"] == "InternalServerError"


def test_successful_answers_pass_byte_for_byte():
    ok = {"id": "msg_1", "type": "message", "content": []}
    for api in (CHAT, RESPONSES, MESSAGES):
        raw = json.dumps(ok).encode()
        assert answer(api, whole(200, raw)) == (200, raw, True)


def responses_events(status: str) -> bytes:
    events = [{"type": "response.created", "sequence_number": 0, "response": {"status": "in_progress"}},
              {"type": "response.output_text.delta", "sequence_number": 1, "delta": "caf\u00e9 \n\n data: x"},
              {"type": "response.completed", "sequence_number": 2,
               "response": {"status": status, "incomplete_details": {"reason": "max_output_tokens"}
                            if status == "incomplete" else None}}]
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def events_of(body: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line)
        if lines:
            out.append((lines.get("event"), json.loads(lines["data"])))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 400), max_size=6))
def test_a_cut_responses_stream_ends_with_response_incomplete(cuts):
    """Any split of the route's bytes into body messages: the same events, the last one named
    response.incomplete where the answer was cut, untouched where it was not."""
    for status in ("incomplete", "completed"):
        raw = responses_events(status)
        points = sorted({min(c, len(raw)) for c in cuts})
        chunks = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)])]
        got, body, ended = answer(RESPONSES, stream(chunks))
        assert got == 200 and ended
        events = events_of(body)
        assert [e[1]["sequence_number"] for e in events] == [0, 1, 2]
        assert events[1][1]["delta"] == "caf\u00e9 \n\n data: x"
        last_name, last = events[-1]
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        assert last_name == kind and last["type"] == kind
        assert last["response"]["status"] == status
        if status == "completed":
            assert body == raw


def test_messages_stream_error_event_gets_anthropic_type():
    raw = (b'event: message_start\ndata: {"type": "message_start"}\n\n'
           b'event: error\ndata: {"type": "error", "error": {"type": "internal_error", "message": "boom"}}\n\n')
    _, body, ended = answer(MESSAGES, stream([raw[:30], raw[30:]]))
    assert ended and events_of(body)[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "boom"}})


@pytest.mark.parametrize("api", [CHAT, RESPONSES, MESSAGES])
def test_a_route_that_raises_before_answering_is_a_500_in_the_api_shape(api):
    status, body, ended = answer(api, [], raises=RuntimeError("engine died"))
    err = json.loads(body)
    assert status == 500 and ended
    if api == MESSAGES:
        assert err == {"type": "error", "error": {"type": "api_error", "message": "RuntimeError: engine died"}}
    else:
        assert err["error"]["message"] == "RuntimeError: engine died" and err["error"]["code"] == 500


@pytest.mark.parametrize("api", [CHAT, RESPONSES, MESSAGES])
def test_a_route_that_raises_mid_stream_ends_with_the_api_error_event(api):
    first = {CHAT: b'data: {"choices": []}\n\n',
             RESPONSES: b'event: response.created\ndata: {"type": "response.created", "sequence_number": 0}\n\n',
             MESSAGES: b'event: message_start\ndata: {"type": "message_start"}\n\n'}[api]
    messages = stream([first])[:-1]  # no end: the route raises instead
    status, body, ended = answer(api, messages, raises=RuntimeError("engine died"))
    assert status == 200 and ended and body.startswith(first)
    tail = body[len(first):]
    if api == CHAT:
        data = [json.loads(line[6:]) if line != "data: [DONE]" else line
                for line in tail.decode().splitlines() if line]
        assert data == [{"error": {"message": "RuntimeError: engine died", "type": "InternalServerError",
                                   "param": None, "code": 500}}, "data: [DONE]"]
    elif api == RESPONSES:
        assert events_of(tail) == [("error", {"type": "error", "code": "server_error",
                                              "message": "RuntimeError: engine died", "param": None,
                                              "sequence_number": 1})]
    else:
        assert events_of(tail) == [("error", {"type": "error", "error": {"type": "api_error",
                                                                         "message": "RuntimeError: engine died"}})]


def test_a_route_that_raises_after_its_answer_ended_raises():
    with pytest.raises(RuntimeError):
        answer(CHAT, whole(200, {"ok": 1}), raises=RuntimeError("late"))
