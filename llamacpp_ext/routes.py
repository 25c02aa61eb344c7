"""`/v1/responses` and `/v1/messages` for the llama-cpp-python server, by translation.

llama-cpp-python serves only Chat Completions. As vLLM and llama-server do, each agent API is
read into a chat request (toolbridge.apis), run through the server's own chat route (so the
request guard, the toolbridge handler and its one request plan apply unchanged), and its
answer or stream is written back in that API's shape. Each body is first checked against its
API's schema (toolbridge.apis.validate). Pure ASGI, in front of the app.

Responses are stateless unless stored: a response is kept, in a bounded in-memory store of
this process, when the request does not say `store: false`; `previous_response_id` continues
a stored one and is a 400 when it is unknown (evicted, or another process's);
`GET /v1/responses/{id}` returns it and `DELETE` forgets it (404 when unknown).

`POST /v1/messages/count_tokens` (Claude Code asks it how large its prompt is) counts the prompt
the same request would be answered from: read as a Messages body, through the chat route's own
checks, rendered by the handler's template with the tools, tokenized by the model; nothing is
generated.
"""
from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs

from toolbridge.apis import anthropic, responses, responses_stream, validate
from toolbridge.apis.fields import new_id
from toolbridge.engine import BadRequest, plan
from toolbridge.serving import shape
from toolbridge.serving.asgi import (check_request, count_tokens_chat, read_body, receive_body, replay, send_json,
                                     with_body)
from toolbridge.serving.shape import error_message

from . import prompt
from .fields import adapt_request, check_fields
from .compat import authorized, served_model
from .model import model_of

CHAT_PATH = "/v1/chat/completions"
STORE_SIZE = 256
RESPONSE_PATH = re.compile(r".*/v1/responses/([^/]+)$")


class ResponseStore:
    """The last STORE_SIZE stored responses: each Response object and its whole conversation as
    input items (what `previous_response_id` continues)."""

    def __init__(self, size: int = STORE_SIZE):
        self.size = size
        self._items: OrderedDict[str, tuple[list[dict], dict | None]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, response_id: str) -> list[dict]:
        """The conversation of a stored response, as input items (BadRequest if unknown)."""
        with self._lock:
            if response_id not in self._items:
                raise BadRequest(f"Previous response with id {response_id!r} not found (this server keeps the last "
                                 f"{self.size} stored responses in memory).", param="previous_response_id",
                                 code="previous_response_not_found")
            return list(self._items[response_id][0])

    def put(self, response_id: str, items: list[dict], response: dict | None = None) -> None:
        with self._lock:
            self._items[response_id] = (items, response)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def response(self, response_id: str) -> dict | None:
        """The stored Response object, or None."""
        with self._lock:
            stored = self._items.get(response_id)
            return stored[1] if stored is not None else None

    def delete(self, response_id: str) -> bool:
        """Forget a stored response; whether there was one."""
        with self._lock:
            return self._items.pop(response_id, None) is not None


Handler = Callable[[dict, Callable, Callable], Awaitable[None]]


class AgentRoutes:
    """ASGI middleware: POST .../v1/responses and .../v1/messages, translated to the chat route;
    POST .../v1/messages/count_tokens; GET and DELETE .../v1/responses/{id}."""

    def __init__(self, app: Any, store: ResponseStore | None = None):
        self.app = app
        self.store = store or ResponseStore()

    def handler(self, scope: dict) -> Handler | None:
        """What answers a request here, or None for one the app answers."""
        if scope["type"] != "http":
            return None
        path, method = scope.get("path", ""), scope.get("method")
        if method == "POST" and path.endswith("/v1/responses"):
            return lambda s, r, w: self.translate(_Responses(self.store), s, r, w)
        if method == "POST" and path.endswith("/v1/messages"):
            return lambda s, r, w: self.translate(_Messages(), s, r, w)
        if method == "POST" and path.endswith("/v1/messages/count_tokens"):
            return count_tokens
        if method in ("GET", "DELETE") and RESPONSE_PATH.match(path):
            return self.stored_response
        return None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        handler = self.handler(scope)
        await (handler or self.app)(scope, receive, send)

    async def translate(self, route: Any, scope: dict, receive: Callable, send: Callable) -> None:
        """The API's request as a chat request through the app's chat route, answered in the API's shape."""
        body = await receive_body(receive)
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

    async def stored_response(self, scope: dict, receive: Callable, send: Callable) -> None:
        """GET: the stored Response object; DELETE: forget it. 404 for an id not stored here."""
        if not authorized(scope):
            await send_json(send, 401, BadRequest("Invalid API key", code="invalid_api_key").body())
            return
        response_id = RESPONSE_PATH.match(scope["path"]).group(1)
        if scope["method"] == "GET" and _query(scope, "stream") == "true":
            await send_json(send, 400, BadRequest("Streaming a stored response again is not supported by this "
                                                  "server; retrieve it without stream.", param="stream").body())
            return
        found = self.store.response(response_id) if scope["method"] == "GET" else self.store.delete(response_id)
        if not found:
            await send_json(send, 404, BadRequest(
                f"Response with id {response_id!r} not found (this server keeps the last {self.store.size} stored "
                "responses in memory).", param="response_id", code="response_not_found").body())
        elif scope["method"] == "GET":
            await send_json(send, 200, found)
        else:
            await send_json(send, 200, {"id": response_id, "object": "response", "deleted": True})


def _query(scope: dict, key: str) -> str | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(key)
    return values[-1].lower() if values else None


# -- POST /v1/messages/count_tokens --------------------------------------------------------------------

async def count_tokens(scope: dict, receive: Callable, send: Callable) -> None:
    """`{"input_tokens": N}`: the tokens of the prompt the same Messages request would be answered
    from (the handler's template, tools included); a bad body is a 400 in Anthropic's shape."""
    if not authorized(scope):
        await send_json(send, 401, anthropic.error_body(401, "Invalid API key"))
        return
    body = await receive_body(receive)
    try:
        chat = count_tokens_chat(read_body(body))
        n = await prompt_tokens(chat)
    except BadRequest as e:
        await send_json(send, 400, anthropic.error_body(400, e.message))
        return
    await send_json(send, 200, {"input_tokens": n})


async def prompt_tokens(chat: dict) -> int:
    """The prompt tokens of a chat request, counted as the toolbridge handler renders it, after the
    chat route's own checks (BadRequest where the chat route would answer 400)."""

    adapt_request(chat)
    checked = check_request(chat)
    check_fields(chat)
    async with served_model(chat.get("model")) as (llama, options):
        try:
            model = model_of(llama)
            req = plan(checked, template_kwargs=options, tool_trained=model.tool_trained)
            return len(prompt.build(model, chat["messages"], req, options)[1])
        except ValueError as e:  # BadRequest included: a template that cannot render the request
            raise e if isinstance(e, BadRequest) else BadRequest(str(e)) from None


class _Responses:
    def __init__(self, store: ResponseStore):
        self.store = store
        self.id = new_id("resp")

    def chat_request(self, data: dict) -> dict:
        validate.responses_body(data)
        self.data = data
        prev = data.get("previous_response_id")
        self.history = self.store.get(prev) if prev is not None else []
        return responses.chat_request(data, self.history)

    def answer(self, completion: dict) -> dict:
        return self.remember(responses.response(completion, self.data, self.id))

    def remember(self, resp: dict) -> dict:
        if self.data.get("store", True) is not False:
            items = self.history + responses.input_items(self.data.get("input")) + responses.output_items(resp)
            self.store.put(resp["id"], items, resp)
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
        return shape.error_body(shape.RESPONSES, status, body)


class _Messages:
    def chat_request(self, data: dict) -> dict:
        validate.messages_body(data)
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
        return stream.error_event(status, error_message(status, error))

    @staticmethod
    def error(e: BadRequest) -> dict:
        return anthropic.error_body(400, e.message)

    @staticmethod
    def error_from_chat(status: int, body: dict) -> dict:
        return anthropic.error_body(status, error_message(status, body))


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


def _status(chunk: dict) -> int:
    """The HTTP status an error chunk stands for (its `code` where that is one, else 500)."""
    code = chunk["error"].get("code")
    return code if isinstance(code, int) and 400 <= code < 600 else 500


class _StreamRelay:
    """Chat SSE chunks -> the API's SSE events, as they arrive. A chat error before the stream
    starts (the guard answers it 400) is answered in the API's error shape. A stream that failed
    (an error chunk) or was cut before its last chunk (the client left, the server stopped) ends
    after the API's error event, with no closing events: it is neither completed nor stored."""

    def __init__(self, route: Any, send: Callable):
        self.route, self.downstream = route, send
        self.stream = route.stream()
        self.status: int | None = None
        self.streaming = False
        self.pending = b""  # an event still coming
        self.error_chunks: list[bytes] = []
        self.failed = False  # an error chunk came

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
        complete, self.pending = shape.sse_events(self.pending, {**message, "more_body": True})
        events: list[dict] = []
        for chunk in map(shape.sse_data, complete):
            if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
                self.failed = True
                events += self.route.stream_error(self.stream, _status(chunk), chunk)
            elif isinstance(chunk, dict):
                events += self.stream.feed(chunk)
        await self._emit(events)

    async def _emit(self, events: list[dict]) -> None:
        if events:
            body = b"".join(map(shape.sse_event, events))
            await self.downstream({"type": "http.response.body", "body": body, "more_body": True})

    async def done(self) -> None:
        if not self.streaming:
            await _send_error(self.route, self.downstream, self.status, _parse(self.error_chunks))
            return
        finished = self.stream.finish is not None  # a chunk carried a finish_reason
        if not finished and not self.failed:
            await self._emit(self.route.stream_error(self.stream, 500, {"error": {
                "message": "The answer was cut off before it ended.", "type": "server_error", "code": 500}}))
        elif finished and not self.failed:
            await self._emit(self.route.finish(self.stream))
        await self.downstream({"type": "http.response.body", "body": b"", "more_body": False})
