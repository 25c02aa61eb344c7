"""`/v1/responses` and `/v1/messages` for the llama-cpp-python server, by translation.

llama-cpp-python serves only Chat Completions. As vLLM and llama-server do, each agent API is
read into a chat request (toolbridge.apis), run through the server's own chat route (so the
request guard, the toolbridge handler and its one request plan apply unchanged), and its
answer or stream is written back in that API's shape. Pure ASGI, in front of the app.

Responses are stateless unless stored: a response is kept, in a bounded in-memory store of
this process, when the request does not say `store: false`; `previous_response_id` continues
a stored one and is a 400 when it is unknown (evicted, or another process's).
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Callable

from toolbridge.apis import anthropic, responses, responses_stream
from toolbridge.apis.fields import new_id
from toolbridge.errors import BadRequest
from toolbridge.serving.asgi import read_body, receive_body, replay, send_json, with_body

CHAT_PATH = "/v1/chat/completions"
STORE_SIZE = 256


class ResponseStore:
    """The last STORE_SIZE stored responses: their whole conversation as input items."""

    def __init__(self, size: int = STORE_SIZE):
        self.size = size
        self._items: OrderedDict[str, list[dict]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, response_id: str) -> list[dict]:
        with self._lock:
            if response_id not in self._items:
                raise BadRequest(f"Previous response with id {response_id!r} not found (this server keeps the last "
                                 f"{self.size} stored responses in memory).", param="previous_response_id",
                                 code="previous_response_not_found")
            return list(self._items[response_id])

    def put(self, response_id: str, items: list[dict]) -> None:
        with self._lock:
            self._items[response_id] = items
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class AgentRoutes:
    """ASGI middleware: POST .../v1/responses and .../v1/messages, translated to the chat route."""

    def __init__(self, app: Any, store: ResponseStore | None = None):
        self.app = app
        self.store = store or ResponseStore()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        api = "responses" if path.endswith("/v1/responses") else "messages" if path.endswith("/v1/messages") else None
        if api is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = await receive_body(receive)
        route = _Responses(self.store) if api == "responses" else _Messages()
        try:
            data = read_body(body)
            chat = route.chat_request(data)
        except BadRequest as e:
            await send_json(send, 400, route.error(e))
            return
        raw = json.dumps(chat).encode("utf-8")
        relay = _StreamRelay(route, send) if chat.get("stream") else _Relay(route, send)
        await self.app(with_body(scope, raw, CHAT_PATH), replay(raw, receive), relay.send)
        await relay.done()


class _Responses:
    def __init__(self, store: ResponseStore):
        self.store = store
        self.id = new_id("resp")

    def chat_request(self, data: dict) -> dict:
        self.data = data
        prev = data.get("previous_response_id")
        if prev is not None and not isinstance(prev, str):
            raise BadRequest("previous_response_id must be a string.", param="previous_response_id")
        self.history = self.store.get(prev) if prev is not None else []
        return responses.chat_request(data, self.history)

    def answer(self, completion: dict) -> dict:
        return self.remember(responses.response(completion, self.data, self.id))

    def remember(self, resp: dict) -> dict:
        if self.data.get("store", True) is not False:
            items = self.history + responses.input_items(self.data.get("input")) + responses.output_items(resp)
            self.store.put(resp["id"], items)
        return resp

    def stream(self) -> Any:
        return responses_stream.ResponseStream(self.data, self.id)

    def finish(self, stream: Any) -> list[dict]:
        events = stream.finish_events()
        self.remember(stream.final)
        return events

    @staticmethod
    def stream_error(stream: Any, status: int, error: dict) -> list[dict]:
        return stream.error_event(error)

    @staticmethod
    def error(e: BadRequest) -> dict:
        return e.body()

    @staticmethod
    def error_from_chat(status: int, body: dict) -> dict:
        return body if isinstance(body.get("error"), dict) else {"error": {"message": json.dumps(body),
                                                                           "type": "server_error"}}


class _Messages:
    def chat_request(self, data: dict) -> dict:
        self.data = data
        return anthropic.chat_request(data)

    def answer(self, completion: dict) -> dict:
        return anthropic.message(completion, self.data)

    def stream(self) -> Any:
        return anthropic.MessageStream(self.data)

    @staticmethod
    def finish(stream: Any) -> list[dict]:
        return stream.finish_events()

    @staticmethod
    def stream_error(stream: Any, status: int, error: dict) -> list[dict]:
        return stream.error_event(status, _message(error))

    @staticmethod
    def error(e: BadRequest) -> dict:
        return anthropic.error_body(400, e.message)

    @staticmethod
    def error_from_chat(status: int, body: dict) -> dict:
        return anthropic.error_body(status, _message(body))


def _message(body: Any) -> str:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    return body.get("detail") if isinstance(body, dict) and isinstance(body.get("detail"), str) else json.dumps(body)


class _Relay:
    """A whole chat answer -> the API's answer (or its error shape)."""

    def __init__(self, route: Any, send: Callable):
        self.route, self.downstream = route, send
        self.status = 500
        self.chunks: list[bytes] = []

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.chunks.append(message.get("body", b""))

    async def done(self) -> None:
        body = _parse(self.chunks)
        if self.status != 200 or not isinstance(body, dict) or "choices" not in body:
            await _send_error(self.route, self.downstream, self.status, body)
            return
        await send_json(self.downstream, 200, self.route.answer(body))


def _parse(chunks: list[bytes]) -> Any:
    """The chat route's JSON body (its text as an error message when it is not JSON)."""
    raw = b"".join(chunks)
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        return {"error": {"message": raw.decode("utf-8", "replace")}}


async def _send_error(route: Any, send: Callable, status: int | None, body: Any) -> None:
    """The chat route's error, or a body that is no answer (a 500), in the API's error shape."""
    status = status if status and status != 200 else 500
    await send_json(send, status, route.error_from_chat(status, body if isinstance(body, dict) else {}))


class _StreamRelay:
    """Chat SSE chunks -> the API's SSE events, as they arrive. A chat error before the stream
    starts (the guard answers it 400) is answered in the API's error shape."""

    def __init__(self, route: Any, send: Callable):
        self.route, self.downstream = route, send
        self.stream = route.stream()
        self.status: int | None = None
        self.streaming = False
        self.buffer = ""
        self.error_chunks: list[bytes] = []

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            ctype = dict(message.get("headers") or []).get(b"content-type", b"")
            self.streaming = self.status == 200 and ctype.startswith(b"text/event-stream")
            if self.streaming:
                await self.downstream({"type": "http.response.start", "status": 200,
                                       "headers": [(b"content-type", b"text/event-stream; charset=utf-8"),
                                                   (b"cache-control", b"no-cache")]})
            return
        if message["type"] != "http.response.body":
            return
        if not self.streaming:
            self.error_chunks.append(message.get("body", b""))
            return
        self.buffer += message.get("body", b"").decode("utf-8", "replace").replace("\r\n", "\n")
        *complete, self.buffer = self.buffer.split("\n\n")
        events: list[dict] = []
        for block in complete:
            data = "\n".join(line[5:].lstrip() for line in block.split("\n") if line.startswith("data:"))
            if not data or data == "[DONE]":
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
                events += self.route.stream_error(self.stream, 500, chunk)
            elif isinstance(chunk, dict):
                events += self.stream.feed(chunk)
        await self._emit(events)

    async def _emit(self, events: list[dict]) -> None:
        if events:
            text = "".join(f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events)
            await self.downstream({"type": "http.response.body", "body": text.encode("utf-8"), "more_body": True})

    async def done(self) -> None:
        if not self.streaming:
            await _send_error(self.route, self.downstream, self.status, _parse(self.error_chunks))
            return
        await self._emit(self.route.finish(self.stream))
        await self.downstream({"type": "http.response.body", "body": b"", "more_body": False})
