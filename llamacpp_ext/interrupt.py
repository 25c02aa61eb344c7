"""Ending an answer early: its client left, or the server was told to stop.

llama-cpp-python's server generates in a worker thread while it holds the model's lock, one request
at a time, and never looks back at the client of a whole (non-streamed) answer: an answer whose
client hung up runs on to `max_tokens` (or the context's end) while every other client waits. A
stream stops being read when its client leaves, but the token being generated, or a long prompt
being evaluated, finishes first. And on SIGTERM uvicorn waits for the requests in flight.

Here each answer gets an `Interrupt`. The route sets it when the client's connection closes
(`until_gone` reads the ASGI disconnect), and `SHUTDOWN` stands for every answer at once when the
server is told to stop (`on_exit`, which wraps uvicorn's signal handler). Generation checks it
before each model evaluation: per token, and per batch of a prompt (generate.Session), so the model
is free within one token or one batch. It then raises `Interrupted`, which the route answers: for a
client that left, nothing is sent and the request is logged as cancelled; for a stop, the API's
error (a whole answer: 503; a stream: an error event before its end).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Awaitable, Callable

log = logging.getLogger("uvicorn.error")  # the server's own log, as uvicorn configures it

CLIENT_LEFT = "the client closed the connection"
STOPPING = "the server is shutting down"

SHUTDOWN = threading.Event()  # set once, when the process is told to stop: every answer ends


class Interrupted(Exception):
    """Generation ended early; `reason` is CLIENT_LEFT or STOPPING, `tokens` how many were generated."""

    def __init__(self, reason: str, tokens: int = 0):
        super().__init__(reason)
        self.reason, self.tokens = reason, tokens

    @property
    def stopping(self) -> bool:
        return self.reason == STOPPING


class Interrupt:
    """One answer's flag: set by the route when its client leaves; SHUTDOWN counts for every answer."""

    def __init__(self) -> None:
        self._left = threading.Event()

    def client_left(self) -> None:
        self._left.set()

    def reason(self) -> str | None:
        """Why the answer must end now, or None."""
        if SHUTDOWN.is_set():
            return STOPPING
        return CLIENT_LEFT if self._left.is_set() else None

    def check(self, tokens: int = 0) -> None:
        """Raise Interrupted where the answer must end (`tokens`: generated so far)."""
        reason = self.reason()
        if reason is not None:
            raise Interrupted(reason, tokens)


async def until_gone(receive: Callable[[], Awaitable[dict]], interrupt: Interrupt) -> None:
    """Wait for the client's disconnect (the request body already read), then set `interrupt`.
    Run beside the answer and cancelled when it is done."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            interrupt.client_left()
            return


def error_body(reason: str) -> dict:
    """The OpenAI error for an answer the server stopped (503: the client may retry elsewhere)."""
    return {"error": {"message": f"The answer was ended early: {reason}.", "type": "ServiceUnavailableError",
                      "param": None, "code": 503}}


def logged(reason: str, tokens: int | None = None) -> None:
    """Log an answer that ended early, in the server's own log."""
    done = f" after {tokens} generated tokens" if tokens is not None else ""
    log.info("toolbridge: answer cancelled%s: %s", done, reason)


_installed = False


def on_exit() -> None:
    """Make uvicorn's stop signal (SIGTERM, SIGINT) end every answer in flight first: SHUTDOWN is
    set, then uvicorn's handler runs as before (sse-starlette's wrapper included). Idempotent."""
    global _installed
    if _installed:
        return
    _installed = True
    import uvicorn.server

    original = uvicorn.server.Server.handle_exit

    def handle_exit(self: Any, *args: Any, **kwargs: Any) -> None:
        SHUTDOWN.set()
        original(self, *args, **kwargs)

    uvicorn.server.Server.handle_exit = handle_exit
