"""The llama-cpp-python server, adapted for tool calls.

`install()` registers the handler and wraps the server's `create_app` so that:
- toolbridge defaults apply where the user set nothing: `chat_format` "toolbridge",
  `interrupt_requests` false (a stream cut off by the next request would lose its calls),
  `logits_all` false (toolbridge returns no logprobs; the full logits copy costs memory and time),
  and per request `repeat_penalty` 1.0 as in upstream llama.cpp's server (llama-cpp-python's
  1.1 penalizes the quotes, commas and braces JSON must repeat: bench/accuracy measured 26%
  exactly right calls under `required` with it, 36% without);
- a middleware checks chat requests before the route runs, so a bad body, bad fields (the
  stock request model's validation, and the OpenAI ranges it lacks: max_tokens >= 1,
  temperature 0-2, n 1, non-empty messages), bad tools, tool choices and tool messages answer
  400 with an OpenAI error body, in stream mode too (a stream whose first event is an error,
  such as a prompt longer than the context, becomes a 400); it also keeps the
  request fields the stock request model drops (`parallel_tool_calls`, `stream_options`)
  and rewrites what that model rejects although OpenAI clients send it (assistant
  `content: null`, list content outside user turns, role `developer`, tools without
  `parameters`, `response_format` json_schema, `max_completion_tokens`);
- `/v1/responses` and `/v1/messages` are served by translation into the chat route (routes.py).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

import llama_cpp.server.__main__ as server_main
from llama_cpp.server.errors import ErrorResponse, RouteErrorHandler
from llama_cpp.server.types import CreateChatCompletionRequest
from pydantic import ValidationError
from toolbridge import BadRequest
from toolbridge.serving.asgi import RequestCheck, check_request, send_json
from toolbridge.tools import EMPTY_PARAMETERS

from . import HANDLER_NAME, register
from .handler import ERROR_PREFIX, REQUEST_CONTEXT, REQUEST_KEYS
from .prompt import check_options
from .routes import AgentRoutes


class ToolbridgeMiddleware(RequestCheck):
    """The core's request check, plus the stock request model's validation and the rewrites
    that make OpenAI clients' requests acceptable to it. The checked tool fields go on to the
    handler (REQUEST_CONTEXT), which plans the answer from them without checking them again."""

    def check(self, data: dict) -> bool:
        adapt_request(data)
        checked = check_request(data)
        REQUEST_CONTEXT.set({"checked": checked, **{k: data[k] for k in REQUEST_KEYS if k in data}})
        check_fields(data)
        return True

    def wrap_send(self, data: dict, send: Callable) -> Callable:
        return error_first_event_as_400(send) if data.get("stream") else send


def check_fields(data: dict) -> None:
    """The stock request model's own validation, before the route (where a failure would be a
    500), and the OpenAI ranges it does not check."""
    try:
        req = CreateChatCompletionRequest.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BadRequest(f"{where}: {first['msg']} ({e.error_count()} validation error(s))",
                         param=str(first["loc"][0]) if first["loc"] else None) from None
    if not req.messages:
        raise BadRequest("messages must be a non-empty array.", param="messages")
    if req.max_tokens is not None and req.max_tokens < 1:
        raise BadRequest(f"max_tokens must be at least 1 (got {req.max_tokens}).", param="max_tokens")
    if req.temperature is not None and not 0 <= req.temperature <= 2:
        raise BadRequest(f"temperature must be between 0 and 2 (got {req.temperature}).", param="temperature")
    if req.n not in (None, 1):
        raise BadRequest("n other than 1 is not supported by this server; send separate requests.", param="n")


def error_first_event_as_400(send: Callable) -> Callable:
    """A stream whose first event is an error (the handler found the request bad, e.g. a prompt
    longer than the context) is answered 400 with that error instead of 200 and an error event.
    The response start is held until the first event; SSE comments (pings) before it are dropped."""
    held: list[dict] = []
    state = {"decided": False, "dropped": False}

    async def wrapped(message: dict) -> None:
        if state["dropped"]:
            return
        if state["decided"]:
            await send(message)
            return
        if message["type"] == "http.response.start":
            held.append(message)
            return
        text = message.get("body", b"").decode("utf-8", "replace")
        event = next((line[5:].strip() for line in text.splitlines() if line.startswith("data:")), None)
        if event is None and message.get("more_body", False):
            return
        error = _error_event(event)
        if error is not None:
            state["dropped"] = True
            await send_json(send, 400, error)
            return
        state["decided"] = True
        for m in held:
            await send(m)
        await send(message)

    return wrapped


def _error_event(event: str | None) -> dict | None:
    try:
        data = json.loads(event) if event else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("error"), dict) else None


def adapt_request(data: dict) -> None:
    """Rewrite, in place, what OpenAI clients send and the stock request model rejects."""
    messages = data.get("messages")
    for m in messages if isinstance(messages, list) else ():
        if not isinstance(m, dict):
            continue
        if m.get("role") == "developer":
            m["role"] = "system"
        content = m.get("content")
        if content is None and m.get("role") == "assistant":
            m["content"] = ""
        elif isinstance(content, list) and m.get("role") != "user":
            m["content"] = "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    tools = data.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("parameters") is None:
            fn["parameters"] = dict(EMPTY_PARAMETERS)
    rf = data.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        data["response_format"] = {"type": "json_object", **({"schema": schema} if isinstance(schema, dict) else {})}
    if data.get("max_tokens") is None and isinstance(data.get("max_completion_tokens"), int):
        data["max_tokens"] = data["max_completion_tokens"]
    data.setdefault("repeat_penalty", 1.0)


def _format_400(request: Any, match: re.Match) -> tuple[int, ErrorResponse]:
    error = json.loads(match.group(1))
    return 400, ErrorResponse(message=error["message"], type=error.get("type", "invalid_request_error"),
                              param=error.get("param"), code=error.get("code"))


def apply_defaults(server_settings: Any, model_settings: list) -> None:
    """toolbridge's defaults for settings the user did not set (CLI or config file)."""
    if server_settings is not None and "interrupt_requests" not in server_settings.model_fields_set:
        server_settings.interrupt_requests = False
    for ms in model_settings or ():
        if ms.chat_format is None and "chat_format" not in ms.model_fields_set:
            ms.chat_format = HANDLER_NAME
        if "logits_all" not in ms.model_fields_set:
            ms.logits_all = False
        if ms.chat_format == HANDLER_NAME:
            check_options(ms.chat_template_kwargs or {})


_installed = False


def install() -> None:
    """Register the handler, the 400 error format and the app wrapper (idempotent)."""
    global _installed
    register()
    if _installed:
        return
    _installed = True
    RouteErrorHandler.pattern_and_formatters[re.compile(re.escape(ERROR_PREFIX) + r"(\{.*\})")] = _format_400
    original = server_main.create_app

    def create_app(settings: Any = None, server_settings: Any = None, model_settings: Any = None) -> Any:
        apply_defaults(server_settings, model_settings)
        app = original(settings=settings, server_settings=server_settings, model_settings=model_settings)
        app.add_middleware(ToolbridgeMiddleware)
        app.add_middleware(AgentRoutes)  # outermost: its chat requests pass the guard too
        return app

    server_main.create_app = create_app
