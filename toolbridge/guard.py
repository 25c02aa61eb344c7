"""A request guard in front of an OpenAI server's chat route: bad requests answer 400 with an
OpenAI error object before the server's own request model sees them.

Both servers parse the body with their own request models, and both fail some bad bodies
with a 500 or a non-OpenAI error (llama-cpp-python: every validation error, a body that is not
JSON; vLLM: a body that is not UTF-8, a named tool_choice next to a tool without `function`).
The guard is pure ASGI (no framework import): it reads the body, refuses what is not a JSON
object, runs the core's tool checks (`check_request`) and the adapter's own (`check`), and
replays the body, rewritten when the adapter changed it.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from .errors import BadRequest
from .request import prepare

CHAT_PATH = "/chat/completions"


def read_body(body: bytes) -> dict:
    """The request body as a JSON object (BadRequest for anything else)."""
    try:
        data = json.loads(body)
    except ValueError as e:  # UnicodeDecodeError included
        raise BadRequest(f"The request body is not valid JSON in UTF-8: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise BadRequest(f"The request body must be a JSON object, not {type(data).__name__}.", code="invalid_json")
    return data


def check_request(data: dict) -> None:
    """The core's request checks (tools, tool_choice, tool history, stop) on the raw body."""
    prepare(tools=data.get("tools"), tool_choice=data.get("tool_choice"), messages=_list(data.get("messages")),
            functions=data.get("functions"), function_call=data.get("function_call"),
            parallel_tool_calls=data.get("parallel_tool_calls"), stop=data.get("stop"))


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


class RequestGuard:
    """Pure ASGI middleware for POST .../chat/completions. Subclasses add engine checks and
    rewrites in `check` (return True when `data` was changed) and may wrap `send`."""

    def __init__(self, app: Any):
        self.app = app

    def check(self, data: dict) -> bool:
        check_request(data)
        return False

    def wrap_send(self, data: dict, send: Callable) -> Callable:
        return send

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not scope.get("path", "").endswith(CHAT_PATH):
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            data = read_body(body)
            changed = self.check(data)
        except BadRequest as e:
            await send_json(send, 400, e.body())
            return
        if changed:
            body = json.dumps(data).encode("utf-8")
            scope = dict(scope, headers=[(k, v) for k, v in scope.get("headers", []) if k != b"content-length"]
                         + [(b"content-length", str(len(body)).encode())])
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, self.wrap_send(data, send))


async def send_json(send: Callable, status: int, data: Any) -> None:
    body = json.dumps(data).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
