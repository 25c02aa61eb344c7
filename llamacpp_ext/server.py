"""The llama-cpp-python server, adapted for tool calls.

`install()` registers the handler and wraps the server's `create_app` so that:
- toolbridge defaults apply where the user set nothing: `chat_format` "toolbridge",
  `interrupt_requests` false (a stream cut off by the next request would lose its calls),
  `logits_all` false (toolbridge returns no logprobs; the full logits copy costs memory and time),
  and per request `repeat_penalty` 1.0 as in upstream llama.cpp's server (llama-cpp-python's
  1.1 penalizes the quotes, commas and braces JSON must repeat: bench/accuracy measured fewer
  exactly right calls with it, docs/measurements.md);
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
from toolbridge.options import check_environment
from toolbridge.serving.asgi import RequestCheck, check_request, send_json

from . import HANDLER_NAME, register
from .compat import answer_as_written
from .fields import adapt_request, check_fields
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
    """Register the handler, the 400 error format and the app wrapper (idempotent); a bad
    TOOLBRIDGE_* setting stops here (toolbridge.options.check_environment)."""
    global _installed
    check_environment()
    register()
    if _installed:
        return
    _installed = True
    RouteErrorHandler.pattern_and_formatters[re.compile(re.escape(ERROR_PREFIX) + r"(\{.*\})")] = _format_400
    original = server_main.create_app

    def create_app(settings: Any = None, server_settings: Any = None, model_settings: Any = None) -> Any:
        apply_defaults(server_settings, model_settings)
        app = original(settings=settings, server_settings=server_settings, model_settings=model_settings)
        answer_as_written(app)
        app.add_middleware(ToolbridgeMiddleware)
        app.add_middleware(AgentRoutes)  # outermost: its chat requests pass the guard too
        return app

    server_main.create_app = create_app
