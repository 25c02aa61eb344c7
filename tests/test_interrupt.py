"""Answers ended early, engine-neutral parts (no model): the interrupt, the agent-API stream relay of
a chat stream that failed or was cut, the first-event error's status, and the soak's address rule.
The end-to-end side (real servers, real hang-ups and SIGTERM) is tests/test_faults_e2e.py."""
from __future__ import annotations

import asyncio
import json
import sys

import pytest

from servers import ROOT, require

require("llama_cpp")
from llamacpp_ext import interrupt  # noqa: E402
from llamacpp_ext.routes import ResponseStore, _Messages, _Responses, _StreamRelay  # noqa: E402
from llamacpp_ext.server import first_event_error_as_answer  # noqa: E402


def test_an_interrupt_says_why_and_the_stop_counts_for_every_answer():
    a, b = interrupt.Interrupt(), interrupt.Interrupt()
    a.check()
    a.client_left()
    with pytest.raises(interrupt.Interrupted) as e:
        a.check(7)
    assert e.value.reason == interrupt.CLIENT_LEFT and e.value.tokens == 7 and not e.value.stopping
    assert b.reason() is None
    interrupt.SHUTDOWN.set()
    try:
        assert a.reason() == b.reason() == interrupt.STOPPING
        with pytest.raises(interrupt.Interrupted) as e:
            b.check()
        assert e.value.stopping
    finally:
        interrupt.SHUTDOWN.clear()


def test_until_gone_sets_the_interrupt_on_the_disconnect_only():
    messages = [{"type": "http.request", "body": b"", "more_body": False}, {"type": "http.disconnect"}]
    seen = []

    async def receive():
        seen.append(messages[len(seen)])
        return seen[-1]

    flag = interrupt.Interrupt()
    asyncio.run(interrupt.until_gone(receive, flag))
    assert len(seen) == 2 and flag.reason() == interrupt.CLIENT_LEFT


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    data = {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(data)}\n\n".encode()


def _relay(route, bodies: list[bytes]) -> list[dict]:
    """Feed a chat stream's body messages through the relay; the events the client got."""
    sent: list[dict] = []

    async def downstream(message):
        sent.append(message)

    async def run():
        relay = _StreamRelay(route, downstream)
        await relay.send({"type": "http.response.start", "status": 200,
                          "headers": [(b"content-type", b"text/event-stream")]})
        for body in bodies:
            await relay.send({"type": "http.response.body", "body": body, "more_body": True})
        await relay.done()

    asyncio.run(run())
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


def _responses(store: ResponseStore) -> _Responses:
    route = _Responses(store)
    route.chat_request({"model": "m", "input": "hi", "store": True})
    return route


ERROR = b'data: {"error": {"message": "The answer was ended early: the server is shutting down.", "code": 503}}\n\n'


@pytest.mark.parametrize("ending", ["error", "cut"])
def test_a_responses_stream_that_failed_or_was_cut_ends_with_an_error_and_is_not_stored(ending):
    store = ResponseStore()
    route = _responses(store)
    bodies = [_chunk({"role": "assistant"}), _chunk({"content": "Once"})] + ([ERROR, b"data: [DONE]\n\n"]
                                                                             if ending == "error" else [])
    events = _relay(route, bodies)
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "error" and "response.completed" not in kinds and "response.incomplete" not in kinds
    assert store.response(route.id) is None


def test_a_finished_responses_stream_is_completed_and_stored():
    store = ResponseStore()
    route = _responses(store)
    events = _relay(route, [_chunk({"role": "assistant"}), _chunk({"content": "Hi"}), _chunk({}, "stop"),
                            b"data: [DONE]\n\n"])
    assert events[-1]["type"] == "response.completed"
    assert store.response(route.id)["status"] == "completed"


@pytest.mark.parametrize("ending", ["error", "cut"])
def test_a_messages_stream_that_failed_or_was_cut_ends_with_its_error_event(ending):
    route = _Messages()
    route.chat_request({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    events = _relay(route, [_chunk({"role": "assistant"}), _chunk({"content": "Once"})]
                    + ([ERROR] if ending == "error" else []))
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "error" and "message_stop" not in kinds
    if ending == "error":
        assert "shutting down" in events[-1]["error"]["message"]


@pytest.mark.parametrize("code, status", [(503, 503), (None, 400), ("context_length_exceeded", 400), (404, 400)])
def test_a_stream_whose_first_event_is_an_error_answers_with_its_status(code, status):
    sent: list[dict] = []

    async def downstream(message):
        sent.append(message)

    async def run():
        send = first_event_error_as_answer(downstream)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        body = json.dumps({"error": {"message": "no", "code": code}})
        await send({"type": "http.response.body", "body": f"data: {body}\n\n".encode(), "more_body": True})

    asyncio.run(run())
    assert sent[0]["status"] == status


def test_the_soak_sends_only_to_loopback():
    sys.path.insert(0, str(ROOT / "bench"))
    import soak

    for url in ("http://127.0.0.1:8000/v1", "http://localhost:1/v1", "http://[::1]:8000/v1", "http://127.3.4.5/v1"):
        soak.loopback_only(url)
    for url in ("http://10.0.0.1:8000/v1", "http://192.168.1.2/v1", "http://example.com/v1", "http://8.8.8.8/v1",
                "http://0.0.0.0:8000/v1"):
        with pytest.raises(SystemExit):
            soak.loopback_only(url)


# -- in process, the real model: the interrupt ends generation and leaves the cache consistent --------

class TripsAfter(interrupt.Interrupt):
    """An interrupt whose client leaves after `n` looks (a look comes before each evaluation)."""

    def __init__(self, n: int):
        super().__init__()
        self.looks, self.n = 0, n

    def reason(self):
        self.looks += 1
        if self.looks > self.n:
            self.client_left()
        return super().reason()


@pytest.fixture(scope="module")
def llama():
    import llama_cpp

    from llamacpp_ext import register
    from llamacpp_ext.__main__ import default_model

    register()
    return llama_cpp.Llama(default_model(), n_ctx=2048, n_threads=1, n_threads_batch=1, verbose=False,
                           chat_format="toolbridge")


def _cached_tokens(llama) -> int:
    import llama_cpp

    return llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(llama._ctx.ctx), 0) + 1


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("looks, generated", [(3, 0), (12, 12)], ids=["prompt", "answer"])
def test_an_interrupted_answer_stops_and_leaves_the_cache_as_evaluated(llama, stream, looks, generated):
    """Interrupted in the prompt (a ~600-token prompt is evaluated 64 tokens per look) or in the answer
    (a short prompt is one look, then one look per token): Interrupted is raised (a stream ends without
    it), no token is generated past the look that saw it,
    and the KV cache holds exactly the tokens the model knows it holds; the next answer runs normally."""
    from llamacpp_ext.handler import ChatContext
    from llamacpp_ext.compat import create_chat_completion

    llama.reset()
    words = " ".join(f"note{i}" for i in range(300 if generated == 0 else 10))
    messages = [{"role": "user", "content": f"{words}\nWrite a long story about the sea."}]
    flag = TripsAfter(looks)
    kwargs = dict(messages=messages, max_tokens=64, temperature=0, stream=stream)
    if stream:
        chunks = list(create_chat_completion(llama, {"context": ChatContext(interrupt=flag)}, **kwargs))
        assert not any(c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")), chunks[-1:]
        assert not any("error" in c for c in chunks)  # a client that left is sent nothing more
    else:
        with pytest.raises(interrupt.Interrupted) as e:
            create_chat_completion(llama, {"context": ChatContext(interrupt=flag)}, **kwargs)
        assert e.value.tokens == generated
    assert flag.looks == looks + 1
    assert _cached_tokens(llama) == llama.n_tokens
    whole = create_chat_completion(llama, {}, **{**kwargs, "stream": False, "max_tokens": 8})
    assert whole["usage"]["completion_tokens"] == 8 and whole["choices"][0]["message"]["content"]
    assert _cached_tokens(llama) == llama.n_tokens
