"""An answer generated again in text when its first call made its values up, for vLLM
(toolbridge.serving.again, in front of the chat route as vllm_plugin.middleware.RequestCheck).

The route here is a scripted ASGI app that plays vLLM's part: it reads the second answer's mark in
the body it is sent, as toolbridge's parser does, and answers with fixed bytes, cut anywhere. vLLM sends each
server-sent event whole, so the cuts are what a real server cannot be made to produce; the real
server's answers are checked end to end in test_tool_trained_e2e.py.
"""
from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings, strategies as st

from toolbridge.request import prepare
from toolbridge.serving import again
from vllm_plugin.middleware import AGAIN, IN_TEXT, PLAN, UNBIASED, WATCHED, RequestCheck

CHECKED = {"tb_word_checks": "grounded"}  # the check these tests are about, whatever the defaults

PAY = {"type": "function", "function": {"name": "pay", "parameters": {
    "type": "object", "required": ["receiver", "amount"],
    "properties": {"receiver": {"type": "string"}, "amount": {"type": "number"}}}}}
FUNDS = [{"role": "user", "content": "Transfer some funds for me."}]
ANNA = [{"role": "user", "content": "Send 25 dollars to Anna."}]
MADE_UP = {"receiver": "user@example.com", "amount": 1000}


def chunk(i: str, delta: dict, finish: str | None = None, usage: dict | None = None) -> dict:
    return {"id": i, "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": usage}


def call_delta(arguments: str, name: str | None = None, index: int = 0) -> dict:
    fn = {"arguments": arguments, **({"name": name} if name else {})}
    return {"tool_calls": [{"index": index, "type": "function", "function": fn, **({"id": "c"} if name else {})}]}


def events(data: list) -> bytes:
    return b"".join(b"data: " + (json.dumps(d).encode() if d != "[DONE]" else b"[DONE]") + b"\n\n" for d in data)


def call_stream(i: str, arguments: dict, text: str = "", more: bool = False) -> bytes:
    args = json.dumps(arguments)
    out = [chunk(i, {"role": "assistant", "content": ""})]
    out += [chunk(i, {"content": text})] if text else []
    out += [chunk(i, call_delta("", "pay")), chunk(i, call_delta(args[:9])), chunk(i, call_delta(args[9:]))]
    out += [chunk(i, call_delta("", "pay", 1)), chunk(i, call_delta(json.dumps({"receiver": "Bo", "amount": 1}), index=1))] \
        if more else []
    return events(out + [chunk(i, {}, "tool_calls"), {"id": i, "choices": [], "usage": {
        "prompt_tokens": 10, "completion_tokens": 30, "total_tokens": 40}}, "[DONE]"])


TEXT_STREAM = events([chunk("second", {"role": "assistant", "content": ""}), chunk("second", {"content": "Which account?"}),
                      chunk("second", {}, "stop"), {"id": "second", "choices": [], "usage": {
                          "prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}, "[DONE]"])


def whole(i: str, message: dict, completion: int) -> bytes:
    return json.dumps({"id": i, "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": completion,
                                 "total_tokens": 10 + completion}}).encode()


def serve(body: dict, answers: list[bytes], cuts: list[int] = ()) -> tuple[list[dict], list[bool]]:
    """(what the client got, the `again` of each attempt the route saw) for one request."""
    seen: list[bool] = []

    async def app(scope, receive, send):
        raw = (await receive())["body"]
        assert dict(scope["headers"]).get(b"content-length", str(len(raw)).encode()) == str(len(raw)).encode()
        seen.append(marked(json.loads(raw)))
        data = answers[len(seen) - 1]
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]})
        points = sorted({c % (len(data) + 1) for c in cuts})
        for a, b in zip([0, *points], [*points, len(data)]):
            await send({"type": "http.response.body", "body": data[a:b], "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return through_the_check(app, body), seen


def marked(body: dict) -> bool:
    """Whether a body the route is sent asks for the second answer (what the parser reads)."""
    return (body.get("vllm_xargs") or {}).get(AGAIN) in (IN_TEXT, UNBIASED)


def through_the_check(app, body: dict, sent: list[dict] | None = None) -> list[dict]:
    """What the client gets when `body` is posted to the chat route `app` behind the request check
    (`sent`: the list the client's messages go to, for a route that watches it)."""
    raw = json.dumps(body).encode()
    sent = [] if sent is None else sent

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    asyncio.run(RequestCheck(app)(scope, receive, send))
    return sent


def body_of(sent: list[dict]) -> bytes:
    assert [m["type"] for m in sent].count("http.response.start") == 1
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False} or not sent[-1]["more_body"]
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def stream_data(body: bytes) -> list:
    return [json.loads(e[6:]) if e != b"data: [DONE]" else "[DONE]" for e in body.split(b"\n\n") if e]


def request(messages: list, stream: bool) -> dict:
    return {"model": "m", "messages": messages, "tools": [PAY], "stream": stream, "chat_template_kwargs": CHECKED}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5000), max_size=12))
def test_a_streamed_made_up_call_is_dropped_and_the_text_answer_sent_under_its_id(cuts):
    sent, seen = serve(request(FUNDS, True), [call_stream("first", MADE_UP), TEXT_STREAM], cuts)
    assert seen == [False, True]
    got = stream_data(body_of(sent))
    assert got[-1] == "[DONE]" and {d["id"] for d in got[:-1]} == {"first"}
    assert "".join(d["choices"][0]["delta"].get("content") or "" for d in got[:-1] if d["choices"]) == "Which account?"
    assert not any(d["choices"] and d["choices"][0]["delta"].get("tool_calls") for d in got[:-1])
    assert got[-2]["usage"] == {"prompt_tokens": 10, "completion_tokens": 34, "total_tokens": 44}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5000), max_size=12), st.sampled_from(["", "Paying."]),
       st.booleans())
def test_a_stream_whose_first_call_holds_said_values_or_follows_text_passes_unchanged(cuts, text, more):
    grounded = {"receiver": "Anna", "amount": 25}
    for messages, arguments in ((ANNA, grounded), (FUNDS, MADE_UP if text else None)):
        if arguments is None:
            continue
        answer = call_stream("first", arguments, text, more)
        sent, seen = serve(request(messages, True), [answer, TEXT_STREAM], cuts)
        assert seen == [False] and body_of(sent) == answer


def test_a_whole_made_up_answer_is_answered_again_with_both_answers_tokens_counted():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "pay", "arguments": json.dumps(MADE_UP)}}]}
    text = {"role": "assistant", "content": "Which account?"}
    sent, seen = serve(request(FUNDS, False), [whole("first", call, 30), whole("second", text, 4)])
    assert seen == [False, True]
    got = json.loads(body_of(sent))
    assert got["choices"][0]["message"] == text
    assert got["usage"] == {"prompt_tokens": 10, "completion_tokens": 34, "total_tokens": 44}
    assert dict(sent[0]["headers"])[b"content-length"] == str(len(body_of(sent))).encode()


def test_a_whole_answer_with_said_values_passes_unchanged():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "pay", "arguments": '{"receiver": "Anna", "amount": 25}'}}]}
    answer = whole("first", call, 30)
    sent, seen = serve(request(ANNA, False), [answer])
    assert seen == [False] and body_of(sent) == answer


def test_the_option_off_or_several_choices_pass_the_made_up_call():
    answer = call_stream("first", MADE_UP)
    off = {**request(FUNDS, True), "chat_template_kwargs": {"tb_word_checks": False}}
    assert body_of(serve({**request(FUNDS, True), "n": 2}, [answer])[0]) == answer
    assert body_of(serve(off, [answer])[0]) == answer
    assert again.made_up(prepare(tools=[PAY], messages=FUNDS, template_kwargs=off["chat_template_kwargs"]), None, "pay", json.dumps(MADE_UP)) is False


def received_as_sent(options: dict) -> list[bool]:
    """For each event a scripted route streams (an answer opening with a made-up call), whether the
    client had it as soon as the route sent it."""
    answer = call_stream("first", MADE_UP)
    stream = [e + b"\n\n" for e in answer.split(b"\n\n") if e]
    sent: list[dict] = []
    at_once: list[bool] = []

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for event in stream:
            await send({"type": "http.response.body", "body": event, "more_body": True})
            at_once.append(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").endswith(event))
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    through_the_check(app, {**request(FUNDS, True), "chat_template_kwargs": options}, sent)
    return at_once


def test_a_streamed_first_call_is_held_only_where_the_check_is_asked():
    """Without the grounded check (and no start bias: see the stray start below) a stream passes each event
    as it comes; with it, the opening call waits until it is complete."""
    assert all(received_as_sent({"tb_word_checks": False, "tb_call_bias": 0}))
    assert not all(received_as_sent(CHECKED))


def test_an_answer_the_user_constrains_is_not_checked():
    """A request that constrains its answer itself (response_format) is planned as the parser plans
    it: its calls are the user's affair, and a made-up one passes."""
    answer = call_stream("first", MADE_UP)
    constrained = {**request(FUNDS, True), "response_format": {"type": "json_object"}}
    sent, seen = serve(constrained, [answer, TEXT_STREAM])
    assert seen == [False] and body_of(sent) == answer


def test_a_clients_own_mark_is_taken_out():
    """Only the request check asks for a second answer: a client's mark does not reach the route."""
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "pay", "arguments": '{"receiver": "Anna", "amount": 25}'}}]}
    answer = whole("first", call, 30)
    body = {**request(ANNA, False), "vllm_xargs": {AGAIN: 1, "other": "kept"}}
    got: list[dict] = []

    async def app(scope, receive, send):
        got.append(json.loads((await receive())["body"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": answer, "more_body": False})

    assert body_of(through_the_check(app, body)) == answer
    assert own_xargs(got[0]) == {"other": "kept", AGAIN: WATCHED}  # the check's own mark: its start is watched


def own_xargs(body: dict) -> dict:
    """The body's `vllm_xargs` but the key its plan was handed on under (vllm_plugin.middleware.hand_on)."""
    return {k: v for k, v in (body.get("vllm_xargs") or {}).items() if k != PLAN}


def asked_unbiased(body: dict) -> bool:
    return (body.get("vllm_xargs") or {}).get(AGAIN) == UNBIASED


def text_stream(i: str, *texts: str) -> bytes:
    return events([chunk(i, {"role": "assistant", "content": ""}), *(chunk(i, {"content": t}) for t in texts),
                   chunk(i, {}, "stop"), {"id": i, "choices": [], "usage": {
                       "prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}, "[DONE]"])


def serve_bodies(body: dict, answers: list[bytes], cuts: list[int] = ()) -> tuple[list[dict], list[dict]]:
    """(what the client got, each body the route was sent)."""
    bodies: list[dict] = []

    async def app(scope, receive, send):
        bodies.append(json.loads((await receive())["body"]))
        data = answers[len(bodies) - 1]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        points = sorted({c % (len(data) + 1) for c in cuts})
        for a, b in zip([0, *points], [*points, len(data)]):
            await send({"type": "http.response.body", "body": data[a:b], "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return through_the_check(app, body), bodies


BIASED = {"tb_call_bias": 5}  # a start biased toward calls (the default without a tool template)


@given(cuts=st.lists(st.integers(0, 2000), max_size=6))
@settings(max_examples=40, deadline=None)
def test_an_answer_ended_inside_a_biased_start_is_asked_again_without_the_bias(cuts):
    """The processor ends an answer whose start the bias chose and the model did not go on with (after
    `<`); the request check asks again without the start bias, under the first answer's id."""
    body = {**request(ANNA, True), "chat_template_kwargs": BIASED}
    sent, bodies = serve_bodies(body, [text_stream("first", "<"), TEXT_STREAM], cuts)
    assert [asked_unbiased(b) for b in bodies] == [False, True] and own_xargs(bodies[0]) == {AGAIN: WATCHED}
    got = [json.loads(e[6:]) for e in body_of(sent).split(b"\n\n") if e.startswith(b"data: {")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in got if c["choices"]) == "Which account?"
    assert {c["id"] for c in got} == {"first"} and got[-1]["usage"]["completion_tokens"] == 4 + 2
    whole_body = {**request(ANNA, False), "chat_template_kwargs": BIASED}
    second = whole("second", {"role": "assistant", "content": "Which account?"}, 4)
    sent, bodies = serve_bodies(whole_body, [whole("first", {"role": "assistant", "content": "<"}, 2), second], cuts)
    assert [asked_unbiased(b) for b in bodies] == [False, True]
    assert json.loads(body_of(sent))["choices"][0]["message"]["content"] == "Which account?"


@given(cuts=st.lists(st.integers(0, 2000), max_size=6))
@settings(max_examples=40, deadline=None)
def test_the_models_own_text_and_an_unbiased_start_pass_unchanged(cuts):
    body = {**request(ANNA, True), "chat_template_kwargs": BIASED}
    own = text_stream("first", "<", "pre>", " hi")
    sent, bodies = serve_bodies(body, [own], cuts)
    assert len(bodies) == 1 and body_of(sent) == own
    unbiased = {**body, "chat_template_kwargs": {"tb_call_bias": 0}}
    ended = text_stream("first", "<")
    sent, bodies = serve_bodies(unbiased, [ended], cuts)
    assert len(bodies) == 1 and body_of(sent) == ended and not own_xargs(bodies[0])  # not watched
    whole_body = {**request(ANNA, False), "chat_template_kwargs": BIASED}
    answer = whole("first", {"role": "assistant", "content": "<pre> hi"}, 3)
    sent, bodies = serve_bodies(whole_body, [answer], cuts)
    assert len(bodies) == 1 and body_of(sent) == answer
