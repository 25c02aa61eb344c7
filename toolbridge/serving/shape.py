"""The server's answer in the shape of the API the client speaks, whoever wrote it.

A server's own routes answer some requests in another API's shape: vLLM's Messages route sends its
request-model errors in OpenAI's shape and its engine errors with `"type": "BadRequestError"`, its
Responses stream ends a cut answer with `response.completed`, and an exception raised after a
stream started breaks the stream. `Shaped` sits between a route and the client (an ASGI `send`)
and writes, per API:
- an error answer (status 400 and up) as that API's error body: OpenAI's
  `{"error": {"message", "type", "param", "code"}}`, Anthropic's
  `{"type": "error", "error": {"type", "message"}}` with the type Anthropic uses for the status;
  the route's message is kept;
- a Responses stream whose answer was cut: its last event `response.incomplete`;
- a Messages stream error event with Anthropic's error type;
- an exception raised while the route answers: a 500 in the API's shape, or, once a stream has
  started, the API's error event and the stream's end.
Everything else passes byte for byte.
"""
from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any, Awaitable, Callable

from ..apis import anthropic

CHAT, RESPONSES, MESSAGES = "chat", "responses", "messages"
ANTHROPIC_TYPES = frozenset(anthropic.ERROR_TYPES.values()) | {"api_error"}

log = logging.getLogger(__name__)


def error_message(status: int, data: Any) -> str:
    """The message of an error body in any shape (OpenAI's, Anthropic's, FastAPI's `detail`),
    else the body as text, else the status's phrase."""
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        for value in (err, data.get("detail"), data.get("message")):
            if isinstance(value, str) and value:
                return value
        if data.get("detail") is not None:
            return json.dumps(data["detail"])
    if isinstance(data, str) and data.strip():
        return data.strip()
    return _phrase(status)


def openai_error(status: int, message: str) -> dict:
    """An error in OpenAI's shape for `status`."""
    kind = _phrase(status).replace(" ", "")
    return {"error": {"message": message, "type": kind if kind.endswith("Error") else kind + "Error",
                      "param": None, "code": status}}


def error_body(api: str, status: int, data: Any) -> dict:
    """An error body (`data`, parsed JSON or text) in `api`'s shape; an OpenAI-shaped body
    that is already whole is kept as it is."""
    if api == MESSAGES:
        return anthropic.error_body(status, error_message(status, data))
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return data
    return openai_error(status, error_message(status, data))


def sse_events(pending: bytes, message: dict) -> tuple[list[bytes], bytes]:
    """The complete server-sent events (separator kept, lines ended by \\n) of what has come so far with
    this body message, and what is left of an event still coming; at the body's end, that rest is an
    event. The one reader of every stream toolbridge reads (vLLM's, llama-cpp-python's)."""
    *events, rest = (pending + message.get("body", b"")).replace(b"\r\n", b"\n").split(b"\n\n")
    events = [e + b"\n\n" for e in events]
    if not message.get("more_body") and rest:
        events, rest = [*events, rest], b""
    return events, rest


def sse_data(event: bytes) -> Any:
    """An event's data: its JSON, "[DONE]", or None."""
    lines = [line[5:].strip() for line in event.decode("utf-8", "replace").splitlines() if line.startswith("data:")]
    text = "\n".join(lines)
    if not text:
        return None
    return text if text == "[DONE]" else parse_json(text)


def parse_json(text: bytes | str) -> Any:
    """JSON text as data, or None where it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


class Shaped:
    """An ASGI send for one request to `api`'s route, writing the route's answer in that API's
    shape (see the module's docstring). `run` calls the route with it."""

    def __init__(self, send: Callable[[dict], Awaitable[None]], api: str):
        self.downstream, self.api = send, api
        self.held: dict | None = None  # an error answer's start, until its body is whole
        self.error_chunks: list[bytes] = []
        self.started = self.stream = self.ended = False
        self.pending = b""
        self.sequence = -1  # the last Responses event's sequence_number

    async def run(self, app: Callable[[Callable], Awaitable[None]]) -> None:
        """`app(send)`: the route's answer through this send. An exception it raises before the
        answer ended is answered in the API's shape (and logged); after that it is raised again."""
        try:
            await app(self.send)
        except Exception as e:
            if self.ended or (self.started and not self.stream):
                raise
            log.exception("toolbridge: the %s route failed while answering", self.api)
            await self.fail(f"{type(e).__name__}: {e}")

    async def send(self, message: dict) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            status = message.get("status", 200)
            if status >= 400:
                self.held = message
                return
            ctype = dict(message.get("headers") or []).get(b"content-type", b"")
            self.stream = ctype.startswith(b"text/event-stream")
            self.started = True
            await self.downstream(message)
        elif kind == "http.response.body" and self.held is not None:
            self.error_chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                start, self.held = self.held, None
                await self._error(start, b"".join(self.error_chunks))
        elif kind == "http.response.body" and self.stream and self.api != CHAT:
            events, self.pending = sse_events(self.pending, message)
            body = b"".join(self._event(e) for e in events)
            more = bool(message.get("more_body"))
            if body or not more:
                await self.downstream({"type": kind, "body": body, "more_body": more})
            self.ended = not more
        else:
            if kind == "http.response.body" and not message.get("more_body"):
                self.ended = True
            await self.downstream(message)

    async def fail(self, message: str) -> None:
        """The answer to a route that raised: a 500, or its stream's error event and end."""
        if not self.started:
            self.held = None
            await send_json(self.downstream, 500, error_body(self.api, 500, message))
        else:
            await self.downstream({"type": "http.response.body", "body": self.pending + self._error_event(message),
                                   "more_body": False})
            self.pending = b""
        self.ended = True

    async def _error(self, start: dict, raw: bytes) -> None:
        status = start.get("status", 500)
        try:
            data: Any = json.loads(raw)
        except ValueError:
            data = raw.decode("utf-8", "replace")
        shaped = error_body(self.api, status, data)
        if shaped is data:
            await self.downstream(start)
            await self.downstream({"type": "http.response.body", "body": raw, "more_body": False})
        else:
            await send_json(self.downstream, status, shaped, start.get("headers") or [])
        self.started = self.ended = True

    def _event(self, event: bytes) -> bytes:
        """One event of a Responses or Messages stream, rewritten where the API says otherwise."""
        if self.api == RESPONSES:
            data = sse_data(event)
            if isinstance(data, dict):
                self.sequence = data.get("sequence_number", self.sequence)
                if data.get("type") == "response.completed" and \
                        (data.get("response") or {}).get("status") == "incomplete":
                    data["type"] = "response.incomplete"
                    return sse_event(data)
        elif self.api == MESSAGES and b"error" in event:
            data = sse_data(event)
            err = data.get("error") if isinstance(data, dict) and data.get("type") == "error" else None
            if isinstance(err, dict) and err.get("type") not in ANTHROPIC_TYPES:
                data["error"] = {**err, "type": "api_error"}
                return sse_event(data)
        return event

    def _error_event(self, message: str) -> bytes:
        if self.api == RESPONSES:
            self.sequence += 1
            return sse_event({"type": "error", "code": "server_error", "message": message, "param": None,
                         "sequence_number": self.sequence})
        if self.api == MESSAGES:
            return sse_event(anthropic.error_body(500, message))
        return sse_chunk(openai_error(500, message)) + b"data: [DONE]\n\n"


def sse_event(data: dict) -> bytes:
    """A named event (Responses, Messages): `event:` its type, `data:` its JSON."""
    return f"event: {data['type']}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode("utf-8")


def sse_chunk(data: Any) -> bytes:
    """An unnamed event (a Chat Completions chunk): `data:` its JSON."""
    return b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n\n"


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


async def send_json(send: Callable, status: int, data: Any, headers: list | None = None) -> None:
    """A whole JSON answer; `headers` of the answer it replaces are kept, but its length and type."""
    body = json.dumps(data).encode("utf-8")
    kept = [(k, v) for k, v in headers or [] if k.lower() not in (b"content-length", b"content-type")]
    await send({"type": "http.response.start", "status": status,
                "headers": kept + [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
