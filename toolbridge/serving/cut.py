"""An answer cut by its token limit says so: chat `finish_reason: "length"`, Messages `stop_reason:
"max_tokens"`, never `"tool_calls"` / `"tool_use"`.

vLLM writes `"tool_calls"` as the finish reason of every `auto` answer in which the tool parser found a
call, also when `max_tokens` cut the last call off half-written (the parser returns it with its
arguments closed, as OpenAI returns one): a client then runs a call whose required arguments may be
missing, with no sign that it was cut. The engine knows it stopped at the limit, but its reason is gone
from the answer. What is left is the count: an answer whose completion tokens reach the request's limit
was cut there (vLLM checks the limit before the end token, so an answer that ends exactly at the limit
is reported cut too, as vLLM itself reports it).

vLLM's Messages route turns the same chat answer into `stop_reason: "tool_use"`. (Its Responses route
reads the engine's own reason and says `incomplete`.)

`CutAnswer` sits in front of the client's `send` for a request with a token limit and one choice:
a whole answer's reason is rewritten from its usage. A chat stream's last chunk with a finish reason
is held until the usage chunk that follows it (the request asks for one: `asks_usage`) and rewritten
the same way, and that usage chunk is passed on only where the client asked for it; a Messages
stream's `message_delta` carries its reason and usage together.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from .shape import CHAT, MESSAGES, parse_json, sse_chunk, sse_data, sse_event, sse_events

# per API: the field that says why the answer ended, what says "it called", what says "it was cut",
# and the usage field that counts its tokens
REASONS = {CHAT: ("finish_reason", "tool_calls", "length", "completion_tokens"),
           MESSAGES: ("stop_reason", "tool_use", "max_tokens", "output_tokens")}


def limit_of(data: dict) -> int | None:
    """The request's completion-token limit, where it sets one and asks for one choice (chat
    `max_completion_tokens` or `max_tokens`, Messages `max_tokens`)."""
    if data.get("n") not in (None, 1):
        return None
    limit = data.get("max_completion_tokens", data.get("max_tokens"))
    return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def asks_usage(data: dict) -> bool:
    """Make a streamed chat request ask for its usage chunk (which says whether it was cut); whether
    the client had asked for it itself."""
    options = data.get("stream_options") if isinstance(data.get("stream_options"), dict) else {}
    asked = options.get("include_usage") is True
    data["stream_options"] = {**options, "include_usage": True}
    return asked


class CutAnswer:
    """An ASGI send for a chat answer (see the module's docstring); `send` is this object's method."""

    def __init__(self, send: Callable, limit: int, stream: bool, usage_asked: bool = True, api: str = CHAT):
        self.downstream, self.limit, self.stream, self.usage_asked = send, limit, stream, usage_asked
        self.reason, self.called, self.cut, self.count = REASONS[api]
        self.api = api
        self.start: dict | None = None  # a whole answer's response start, until its body is whole
        self.chunks: list[bytes] = []
        self.pending = b""  # a stream's event still coming
        self.held: list[bytes] = []  # a stream's events from its finish chunk on, until its usage chunk

    async def send(self, message: dict) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            ctype = dict(message.get("headers") or []).get(b"content-type", b"")
            if message.get("status") == 200 and not self.stream and ctype.startswith(b"application/json"):
                self.start = message
                return
            self.stream = self.stream and message.get("status") == 200
            await self.downstream(message)
        elif kind == "http.response.body" and self.start is not None:
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                await self._whole(b"".join(self.chunks))
        elif kind == "http.response.body" and self.stream:
            events, self.pending = sse_events(self.pending, message)
            out = b"".join(self._event(e) for e in events)
            more = bool(message.get("more_body"))
            if not more and self.held:  # the stream ended before a usage chunk: nothing to decide on
                out, self.held = out + b"".join(self.held), []
            if out or not more:
                await self.downstream({"type": kind, "body": out, "more_body": more})
        else:
            await self.downstream(message)

    async def _whole(self, raw: bytes) -> None:
        data = parse_json(raw)
        if isinstance(data, dict) and self._cut(data.get("usage")) and \
                self._mark(data.get("choices") or () if self.api == CHAT else (data,)):
            raw = json.dumps(data).encode("utf-8")
        headers = [(k, v) for k, v in self.start.get("headers") or [] if k.lower() != b"content-length"]
        await self.downstream({**self.start, "headers": headers + [(b"content-length", str(len(raw)).encode())]})
        await self.downstream({"type": "http.response.body", "body": raw, "more_body": False})

    def _event(self, event: bytes) -> bytes:
        """What goes out now for one event of the stream."""
        data = sse_data(event)
        if self.api == MESSAGES:
            delta = data.get("delta") if isinstance(data, dict) and data.get("type") == "message_delta" else None
            if isinstance(delta, dict) and self._cut(data.get("usage")) and self._mark((delta,)):
                return sse_event(data)
            return event
        if self.held:
            if isinstance(data, dict) and not data.get("choices") and data.get("usage") is not None:
                held, self.held = self.held, []
                if self._cut(data["usage"]):
                    held = [self._rewritten(e) for e in held]
                return b"".join(held) + (event if self.usage_asked else b"")
            self.held.append(event)
            return b""
        if isinstance(data, dict) and any(isinstance(c, dict) and c.get(self.reason) == self.called
                                          for c in data.get("choices") or ()):
            self.held.append(event)
            return b""
        if isinstance(data, dict) and not data.get("choices") and data.get("usage") is not None \
                and not self.usage_asked:
            return b""  # the usage chunk the client did not ask for
        return event

    def _cut(self, usage: Any) -> bool:
        tokens = usage.get(self.count) if isinstance(usage, dict) else None
        return isinstance(tokens, int) and tokens >= self.limit

    def _mark(self, ends: Any) -> bool:
        """Each of `ends` (chat choices, a message, a message's delta) that says it called now says it
        was cut; whether any did."""
        marked = False
        for end in ends:
            if isinstance(end, dict) and end.get(self.reason) == self.called:
                end[self.reason], marked = self.cut, True
        return marked

    def _rewritten(self, event: bytes) -> bytes:
        """A held chat chunk, its finish reason "length" where it said "tool_calls"."""
        data = sse_data(event)
        if not isinstance(data, dict) or not self._mark(data.get("choices") or ()):
            return event
        return sse_chunk(data)

