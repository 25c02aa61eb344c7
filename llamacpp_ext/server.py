"""The llama-cpp-python server, adapted for tool calls.

`install()` registers the handler and wraps the server's `create_app` so that:
- toolbridge defaults apply where the user set nothing: `chat_format` "toolbridge",
  `interrupt_requests` false (a stream cut off by the next request would lose its calls),
  `logits_all` false (toolbridge returns no logprobs; the full logits copy costs memory and time),
  and per request `repeat_penalty` 1.0 as in upstream llama.cpp's server (llama-cpp-python's
  1.1 penalizes the quotes, commas and braces JSON must repeat, so fewer calls come out exactly
  right: docs/measurements.md);
- a middleware checks chat requests before the route runs, so a bad body, bad fields (the
  stock request model's validation, and the OpenAI ranges it lacks: max_tokens >= 1,
  temperature 0-2, n 1, non-empty messages), bad tools, tool choices and tool messages answer
  400 with an OpenAI error body, in stream mode too (a stream whose first event is an error,
  such as a prompt longer than the context, becomes a 400); it also keeps the
  request fields the stock request model drops (`parallel_tool_calls`, `stream_options`)
  and rewrites what that model rejects although OpenAI clients send it (assistant
  `content: null`, list content outside user turns, role `developer`, tools without
  `parameters`, `response_format` json_schema, `max_completion_tokens`);
- the chat route is toolbridge's (`serve_chat`): the stock route's steps, with the request's
  context (handler.ChatContext: the fields the stock request model drops, the checked tool fields)
  passed to the handler with the call;
- `/v1/responses` and `/v1/messages` are served by translation into the chat route (routes.py);
- an answer whose client leaves ends within a token, and a stop signal ends every answer first
  (interrupt.py): the model is free for the next request, and the server exits promptly.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import json
import re
from dataclasses import replace
from typing import Any, Awaitable, Callable

import anyio
import llama_cpp
import llama_cpp.server.__main__ as server_main
from fastapi import HTTPException, Request, status
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from llama_cpp.server import app as server_app
from llama_cpp.server.errors import ErrorResponse, RouteErrorHandler
from llama_cpp.server.types import CreateChatCompletionRequest
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from toolbridge.engine import check_environment
from toolbridge.serving.asgi import CHAT_PATH, CheckMiddleware, Passed, check_request, send_json
from toolbridge.serving.shape import sse_data, sse_events

from . import HANDLER_NAME, register
from .compat import create_chat_completion
from .fields import adapt_request, check_fields
from .handler import ERROR_PREFIX, ChatContext
from .interrupt import CLIENT_LEFT, Interrupt, Interrupted, error_body, logged, on_exit, until_gone
from .prompt import check_options
from .routes import AgentRoutes


CONTEXT = "toolbridge_chat_context"  # the request state's key for the request's ChatContext


class ToolbridgeMiddleware(CheckMiddleware):
    """The core's request check, plus the stock request model's validation and the rewrites
    that make OpenAI clients' requests acceptable to it. The request's context (the checked tool
    fields, the fields the stock request model drops) goes on to the chat route in the request's
    state, and from there to the handler, which plans the answer from it without checking again."""

    def check(self, data: dict) -> Passed:
        adapt_request(data)
        context = ChatContext.read(data, check_request(data))
        if context.checked.choice.allowed is not None:  # the stock request model does not take allowed_tools
            data["tool_choice"] = context.checked.choice.mode  # (the handler plans from `checked`)
        check_fields(data)
        return Passed({CONTEXT: context})

    def wrap_send(self, data: dict, send: Callable) -> Callable:
        return first_event_error_as_answer(send) if data.get("stream") else send


def first_event_error_as_answer(send: Callable) -> Callable:
    """A stream whose first event is an error (the handler found the request bad, e.g. a prompt
    longer than the context; or the server stopped it before it began: 503) is answered with that
    error and its status (400 unless the error says 5xx) instead of 200 and an error event.
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
        events, _ = sse_events(b"", message)
        data = next((d for d in map(sse_data, events) if d is not None), None)
        if data is None and message.get("more_body", False):
            return
        error = data if isinstance(data, dict) and isinstance(data.get("error"), dict) else None
        if error is not None:
            state["dropped"] = True
            code = error["error"].get("code")
            await send_json(send, code if isinstance(code, int) and 500 <= code < 600 else 400, error)
            return
        state["decided"] = True
        for m in held:
            await send(m)
        await send(message)

    return wrapped


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
    on_exit()
    RouteErrorHandler.pattern_and_formatters[re.compile(re.escape(ERROR_PREFIX) + r"(\{.*\})")] = _format_400
    original = server_main.create_app

    def create_app(settings: Any = None, server_settings: Any = None, model_settings: Any = None) -> Any:
        apply_defaults(server_settings, model_settings)
        app = original(settings=settings, server_settings=server_settings, model_settings=model_settings)
        serve_chat(app)
        app.add_middleware(ToolbridgeMiddleware)
        app.add_middleware(AgentRoutes)  # outermost: its chat requests pass the guard too
        return app

    server_main.create_app = create_app


def chat_call(context: ChatContext) -> Callable[..., Any]:
    """What the chat route calls, as the stock route calls Llama.create_chat_completion: a model
    served by toolbridge's handler gets the request's context with the call; any other model is
    called as the stock route calls it."""

    def call(llama: llama_cpp.Llama, **kwargs: Any) -> Any:
        if llama.chat_format != HANDLER_NAME:
            return llama.create_chat_completion(**kwargs)
        return create_chat_completion(llama, {"context": context}, **kwargs)

    return call


async def create_chat_completion_route(request: Request, body: CreateChatCompletionRequest) -> Any:
    """llama-cpp-python's chat route (llama_cpp.server.app.create_chat_completion), step for step:
    the model lock, the request's logit_bias tokens, grammar and min_tokens, a stream through its
    EventSourceResponse with its pings, disconnects and interrupt_requests; with `chat_call` in place
    of Llama.create_chat_completion, and the answer ended where its client leaves (interrupt.py)."""
    context = replace(getattr(request.state, CONTEXT, None) or ChatContext(), interrupt=Interrupt())
    llama_call = chat_call(context)
    kwargs = body.model_dump(exclude={"n", "logit_bias_type", "user", "min_tokens"})
    if kwargs.get("stream", False):
        send_chan, recv_chan = anyio.create_memory_object_stream(10)
        stream = Streamed(context.interrupt, functools.partial(
            server_app.get_event_publisher, request=request, inner_send_chan=send_chan, body=body,
            body_model=body.model, llama_call=llama_call, kwargs=kwargs))
        return EventSourceResponse(recv_chan, data_sender_callable=stream.publish, sep="\n",
                                   ping_message_factory=server_app._ping_message_factory,
                                   client_close_handler_callable=stream.client_left, **STOP_GRACE)
    async with contextlib.asynccontextmanager(server_app.get_llama_proxy)() as proxy:
        llama = server_app.prepare_request_resources(body, proxy, body.model, kwargs)
        if await request.is_disconnected():
            print(f"Disconnected from client (via refresh/close) before llm invoked {request.client}")
            raise HTTPException(status_code=status.HTTP_400_BAD_REQUEST, detail="Client closed request")
        try:
            return await while_connected(request, context.interrupt, run_in_threadpool(llama_call, llama, **kwargs))
        except Interrupted as e:
            logged(e.reason, e.tokens)
            return JSONResponse(error_body(e.reason), status_code=503 if e.stopping else CLIENT_CLOSED)


CLIENT_CLOSED = 499  # the status a proxy logs for a request whose client closed it (nobody reads it)
# a stream told to stop by the server's exit is given this long to write its error and end
# (sse-starlette's grace period, where the installed version has one) before it is cut
STOP_GRACE = ({"shutdown_grace_period": 3.0}
              if "shutdown_grace_period" in inspect.signature(EventSourceResponse.__init__).parameters else {})


class Streamed:
    """A streamed answer's publisher (`publish`, the stock one) and what its response calls when the
    client disconnects (`client_left`, before it stops reading the answer): the answer's interrupt is
    set, so that the chunk or prompt being generated in a thread ends too. A disconnect after the whole
    answer was published (the connection closing as it should) is no hang-up."""

    def __init__(self, interrupt: Interrupt, publish: Callable[[], Awaitable[None]]):
        self.interrupt, self._publish = interrupt, publish
        self.published = False

    async def publish(self) -> None:
        await self._publish()
        self.published = True

    async def client_left(self, message: dict) -> None:
        if not self.published:
            self.interrupt.client_left()
            logged(CLIENT_LEFT)


async def while_connected(request: Request, interrupt: Interrupt, work: Awaitable[Any]) -> Any:
    """`work`'s result (or its exception, as it is), with the request's client watched meanwhile:
    its disconnect sets the answer's interrupt, which ends the generation in its thread."""
    error: BaseException | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(until_gone, request.receive, interrupt)
        try:
            result = await work
        except Exception as e:  # raised below as it is, not inside the task group's ExceptionGroup
            error = e
        finally:
            group.cancel_scope.cancel()
    if error is not None:
        raise error
    return result


def serve_chat(app: Any, path: str = "/v1" + CHAT_PATH) -> None:
    """The app's chat route answered by `create_chat_completion_route`, behind the stock route's API key
    check and error handler (RouteErrorHandler); its answer sent as the handler wrote it: the stock
    route validates it against a TypedDict that drops the fields it does not know (the thinking's
    `reasoning_content`, as llama-server names it). Streamed chunks are sent unvalidated already."""
    routes = app.router.routes
    for i, route in enumerate(routes):
        if isinstance(route, APIRoute) and route.path == path:
            routes[i] = type(route)(path, create_chat_completion_route, methods=sorted(route.methods),
                                    dependencies=list(route.dependencies), summary=route.summary,
                                    tags=list(route.tags), responses=dict(route.responses), response_model=None)
