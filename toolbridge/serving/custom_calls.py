"""A chat answer's calls of custom tools in Chat Completions' custom shape, whoever wrote the answer.

The request check served the custom tools as functions of one string argument (toolbridge.custom.shim_chat);
the engine answers their calls as function calls with `{"input": ...}` arguments. `CustomCalls` sits between
the chat route and the client (an ASGI send) and writes each such call as
`{"id", "type": "custom", "custom": {"name", "input"}}`: in a whole answer, and in a stream, where a call's
first fragment carries its id and name and each later one the input's new text (the whole input is the
concatenation of the fragments, as a function call's arguments are). Everything else passes as it came.
"""
from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from ..custom import decode_input, input_prefix
from .shape import sse_chunk, sse_data, sse_events


class CustomCalls:
    """An ASGI send for one chat request whose tools named `names` are custom."""

    def __init__(self, send: Callable[[dict], Awaitable[None]], names: frozenset[str]):
        self.downstream, self.names = send, names
        self.start: dict | None = None
        self.stream = False
        self.chunks: list[bytes] = []  # a whole answer's body, until it is whole
        self.pending = b""
        self.calls: dict[tuple[int, int], list[str]] = {}  # (choice, call) -> [arguments so far, input sent]

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or [])
            self.stream = headers.get(b"content-type", b"").startswith(b"text/event-stream")
            if self.stream or message.get("status", 200) >= 400:
                await self.downstream(message)
            else:
                self.start = message
            return
        if message["type"] != "http.response.body" or (not self.stream and self.start is None):
            await self.downstream(message)
        elif self.stream:
            events, self.pending = sse_events(self.pending, message)
            body = b"".join(self._event(e) for e in events)
            if body or not message.get("more_body"):
                await self.downstream({**message, "body": body})
        else:
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                await self._whole(b"".join(self.chunks))

    async def _whole(self, raw: bytes) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if isinstance(data, dict) and self._rewrite_message(data):
            raw = json.dumps(data, ensure_ascii=False).encode("utf-8")
        start, self.start = self.start, None
        headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
        await self.downstream({**start, "headers": headers + [(b"content-length", str(len(raw)).encode())]})
        await self.downstream({"type": "http.response.body", "body": raw, "more_body": False})

    def _rewrite_message(self, data: dict) -> bool:
        changed = False
        for choice in data.get("choices") or ():
            msg = choice.get("message") if isinstance(choice, dict) else None
            calls = msg.get("tool_calls") if isinstance(msg, dict) else None
            for i, call in enumerate(calls or ()):
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and fn.get("name") in self.names:
                    calls[i] = {"id": call.get("id"), "type": "custom",
                                "custom": {"name": fn["name"], "input": decode_input(fn.get("arguments") or "")}}
                    changed = True
        return changed

    def _event(self, event: bytes) -> bytes:
        data = sse_data(event)
        if not isinstance(data, dict) or b"tool_calls" not in event:
            return event
        changed = False
        for choice in data.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            calls = delta.get("tool_calls") if isinstance(delta, dict) else None
            for i, fragment in enumerate(calls or ()):
                rewritten = self._fragment(choice.get("index", 0), fragment)
                if rewritten is not None:
                    calls[i], changed = rewritten, True
        return sse_chunk(data) if changed else event

    def _fragment(self, choice: int, fragment: Any) -> dict | None:
        """A streamed call fragment in the custom shape, or None where its call is a function's."""
        if not isinstance(fragment, dict):
            return None
        fn = fragment.get("function") if isinstance(fragment.get("function"), dict) else {}
        key = (choice, fragment.get("index", 0))
        if fn.get("name") in self.names:
            self.calls[key] = ["", ""]
        state = self.calls.get(key)
        if state is None:
            return None
        state[0] += fn.get("arguments") or ""
        text = input_prefix(state[0])
        new, state[1] = text[len(state[1]):], text
        out: dict = {"index": key[1]}
        if fn.get("name") is not None:
            out.update(id=fragment.get("id"), type="custom", custom={"name": fn["name"], "input": new})
        else:
            out["custom"] = {"input": new}
        return out
