"""A request check in front of an OpenAI server's chat route (and its agent-API routes, where the
engine serves them itself: vLLM's /v1/responses, /v1/messages and /v1/messages/count_tokens): bad
requests answer 400 in the API's own error shape before the server's own request model sees them.
An agent-API body is first checked against its API's schema (toolbridge.apis.validate: a wrongly
typed field is a 400, not silently read), then read into its chat request and checked as that.

Both servers parse the body with their own request models, and both fail some bad bodies
with a 500 or a non-OpenAI error (llama-cpp-python: every validation error, a body that is not
JSON; vLLM: a body that is not UTF-8, a named tool_choice next to a tool without `function`).
The check is pure ASGI (no framework import): it reads the body, refuses what is not a JSON
object, runs the core's tool checks (`check_request`) and the adapter's own (`check`), and
replays the body, rewritten when the adapter changed it, with what the adapter's check read of it
for the route (`Passed`) in the request's scope state.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..apis import anthropic, responses, validate
from ..custom import shim_chat
from ..errors import BadRequest
from ..request import CheckedRequest, check, plan
from .custom_calls import CustomCalls
from .shape import CHAT, MESSAGES, RESPONSES, Shaped, send_json

CHAT_PATH = "/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
# what a token count reads its body as: a Messages body, which a count does not need max_tokens for
COUNT_MAX_TOKENS = 1


def read_body(body: bytes) -> dict:
    """The request body as a JSON object (BadRequest for anything else)."""
    try:
        data = json.loads(body)
    except ValueError as e:  # UnicodeDecodeError included
        raise BadRequest(f"The request body is not valid JSON in UTF-8: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise BadRequest(f"The request body must be a JSON object, not {type(data).__name__}.", code="invalid_json")
    return data


def check_request(data: dict) -> CheckedRequest:
    """The core's request checks (tools, tool_choice, tool history, stop) on the raw body: the
    request's checked tool fields, which a server may hand on to its handler."""
    return check(tools=data.get("tools"), tool_choice=data.get("tool_choice"), messages=_list(data.get("messages")),
                 functions=data.get("functions"), function_call=data.get("function_call"),
                 parallel_tool_calls=data.get("parallel_tool_calls"), stop=data.get("stop"))


def check_chat(data: dict) -> None:
    """A chat body checked whole: its tool fields, then its plan with the default options (a
    forced call that a stop string or a response format makes impossible depends on the dialect)."""
    plan(check_request(data), response_format=data.get("response_format"))


def check_responses(data: dict) -> None:
    """A Responses body, checked against the API's schema, read by the core's reader, then
    checked as its chat request."""
    validate.responses_body(data)
    check_chat(responses.chat_request(data))


def check_messages(data: dict) -> None:
    """A Messages body, checked against the API's schema, read by the core's reader, then
    checked as its chat request."""
    validate.messages_body(data)
    check_chat(anthropic.chat_request(data))


def count_tokens_chat(data: dict) -> dict:
    """The chat request whose prompt a token count (`POST /v1/messages/count_tokens`) counts:
    the body checked against its schema and read as a Messages body (BadRequest if it fails)."""
    validate.count_tokens_body(data)
    return anthropic.chat_request({**data, "max_tokens": COUNT_MAX_TOKENS})


def check_count_tokens(data: dict) -> None:
    """A token-count body, read as a Messages body, then checked as its chat request (the
    tools are checked as they would be for the answer, so the count is of a prompt that can run)."""
    check_chat(count_tokens_chat(data))


def _openai_error(e: BadRequest) -> dict:
    return e.body()


def _anthropic_error(e: BadRequest) -> dict:
    return anthropic.error_body(400, e.message)


@dataclass(frozen=True)
class Passed:
    """A check's verdict on a body it passed, with what the route needs of what the check read:
    `state`, added to the request's scope state (ASGI `scope["state"]`, which Starlette routes read as
    `request.state`), so that the route does not read it again. The body is written again from `data`,
    unless `added` names what the check changed: top-level fields it put into `data`, none of which
    the body held before; those are written into the body's text as it came (`with_fields`)."""
    state: Mapping[str, Any] = field(default_factory=dict)
    added: Mapping[str, Any] | None = None


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


class CheckMiddleware:
    """Pure ASGI middleware for POST .../chat/completions. Subclasses add engine checks and
    rewrites in `check` (return True when `data` was changed, or a `Passed`) and may wrap `send`."""

    def __init__(self, app: Any):
        self.app = app

    def check(self, data: dict) -> bool | Passed:
        check_chat(data)
        return False

    def wrap_send(self, data: dict, send: Callable) -> Callable:
        return send

    def route(self, path: str) -> tuple[str, Callable[[dict], bool | Passed], Callable[[BadRequest], dict]] | None:
        """The API, the check and the error shape for a path, or None for a path it lets through."""
        if path.endswith(CHAT_PATH):
            return CHAT, self.check, _openai_error
        if path.endswith(RESPONSES_PATH):
            return RESPONSES, check_responses, _openai_error
        if path.endswith(MESSAGES_PATH):
            return MESSAGES, check_messages, _anthropic_error
        if path.endswith(COUNT_TOKENS_PATH):
            return MESSAGES, check_count_tokens, _anthropic_error
        return None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        route = self.route(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        api, check, error_body = route
        shaped = Shaped(send, api)
        if scope.get("method") != "POST":
            await shaped.run(lambda out: self.app(scope, receive, out))
            return
        body = await receive_body(receive)
        try:
            data = read_body(body)
            customs = shim_chat(data) if api == CHAT else frozenset()
            verdict = check(data)
        except BadRequest as e:
            await send_json(send, 400, error_body(e))
            return
        if verdict is True or isinstance(verdict, Passed) or customs:
            spliced = isinstance(verdict, Passed) and verdict.added is not None and not customs
            body = with_fields(body, verdict.added) if spliced else json.dumps(data).encode("utf-8")
            scope = with_body(scope, body)
        if isinstance(verdict, Passed):
            scope["state"] = {**scope.get("state", {}), **verdict.state}

        def answered(out: Callable) -> Callable:  # the route's answer, its custom tools' calls in their shape
            return self.wrap_send(data, CustomCalls(out, customs).send if customs else out)
        await shaped.run(lambda out: self.answer(scope, body, receive, answered(out), data))

    async def answer(self, scope: dict, body: bytes, receive: Callable, send: Callable, data: dict) -> None:
        """The app's answer to a checked request (`body`, read as `data`)."""
        await self.app(scope, replay(body, receive), send)


async def receive_body(receive: Callable) -> bytes:
    """The whole request body, read from an ASGI receive."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive: Callable) -> Callable:
    """An ASGI receive that hands the app `body` (already read), then the client's own messages
    (a disconnect)."""
    sent = False

    async def receive_again() -> dict:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


def with_fields(body: bytes, added: Mapping[str, Any]) -> bytes:
    """A JSON object's text with `added` top-level fields (keys it does not have) written in at its start:
    the rest of the text is kept as it is, not parsed and written again."""
    if not added:
        return body
    start = body.index(b"{") + 1
    fields = json.dumps(dict(added)).encode("utf-8")[1:-1]
    rest = body[start:]
    return body[:start] + fields + (b"" if rest.lstrip().startswith(b"}") else b",") + rest


def with_body(scope: dict, body: bytes, path: str | None = None) -> dict:
    """The scope for a request whose body is now `body` (a JSON object), at `path` if given."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k not in (b"content-length", b"content-type")]
    scope = dict(scope, headers=headers + [(b"content-type", b"application/json"),
                                           (b"content-length", str(len(body)).encode())])
    if path is not None:
        scope.update(path=path, raw_path=path.encode())
    return scope
