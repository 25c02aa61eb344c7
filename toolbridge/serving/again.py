"""An answer generated again in text, for a server whose tool parser sees the answer only once it is
written (vLLM): the ASGI side of toolbridge.steer.grounding's check.

python -m llamacpp_ext checks a first call as it generates and goes back to the prompt itself. vLLM's
parser cannot ask the engine for another answer, and its logits processor cannot take back tokens, so
the check runs in front of the route: the adapter's request check makes the request's plan from its
body and hands `answer` the request's `Attempts`; `answer` reads the answer as it goes out, and when
its first call opens the answer with made-up values, drops that answer and asks the route again with
the second body, which the adapter marked so that its parser holds back every call opening at every step.

What the client sees is the second answer under the first one's id. A stream holds back only the first
call, until it is complete, and only where the request asks for the check; the text before and the
calls after it pass as they come. The discarded answer's tokens count in `usage` (as in python -m
llamacpp_ext), not against max_tokens (a second request, to the engine). One choice (`n` 1) only: several answers to one request are passed as they are.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from ..constrain.grammar import call_starts
from ..events import ToolCall
from ..request import ToolRequest
from ..steer.steering import start_state
from .asgi import replay, with_body
from .shape import parse_json as _json, sse_chunk, sse_data as _sse_data, sse_events as _events


@dataclass(frozen=True)
class Attempts:
    """A checked chat request the route may answer twice: the body as sent, the body that asks for
    the second answer (marked by the adapter), the request's plan and whether it streams."""
    first: bytes
    second: bytes
    plan: ToolRequest
    stream: bool
    unbiased: bytes = b""  # the body that asks for it without the start bias (a start the bias chose went stray)


def checked(plan: ToolRequest | None) -> bool:
    """Whether the request's first call is checked for made-up values (its plan asks for the
    `grounded` word check); a stream holds that call back only then."""
    return plan is not None and bool(plan.grounded)


def start_checked(plan: ToolRequest | None) -> bool:
    """Whether the answer's start is biased toward a call (the processor then ends an answer whose call
    start the model did not go on with: toolbridge.steer.logits.start_hold); a stream holds its first
    text back while it may still be such a start."""
    return plan is not None and plan.steer and plan.decisions.start_bias > 0


def may_start(plan: ToolRequest, content: str | None) -> bool:
    """Whether an answer's text so far may still be a call start the bias chose: nothing but spaces, or
    a proper prefix of one of the plan's call starts."""
    return start_state((content or "").strip(), call_starts(plan.dialect)) is None


def stray_start(plan: ToolRequest | None, content: str | None, called: bool, finish: Any) -> bool:
    """An answer that ended, calling nothing, inside a call start at its first position: where the
    start was biased, the processor ended it there (the model went on with something else), and it is
    asked for again without the bias."""
    return start_checked(plan) and not called and finish == "stop" and may_start(plan, content)


def made_up(plan: ToolRequest | None, content: str | None, name: str, arguments: str) -> bool:
    """An answer that opens with this call (no text before it) made its values up."""
    if not checked(plan) or (content or "").strip():
        return False
    return bool(plan.invented(ToolCall("", name, arguments)))


async def answer(app: Callable, scope: dict, receive: Callable, send: Callable, attempts: Attempts) -> None:
    """The route's answer to a chat request, generated again from `attempts.second` when its first
    call made its values up, or from `attempts.unbiased` when it ended inside a call start (stray)."""
    out = _Stream(send, attempts.plan) if attempts.stream else _Whole(send, attempts.plan)
    await app(with_body(scope, attempts.first), replay(attempts.first, receive), out.send)
    if await out.dropped():
        body = attempts.unbiased if out.stray else attempts.second
        await app(with_body(scope, body), replay(body, receive), out.second_send())


def _only_choice(data: Any) -> dict | None:
    """The response's or chunk's choice, where it has exactly one."""
    choices = data.get("choices") if isinstance(data, dict) else None
    return choices[0] if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict) else None


def _first_call(calls: Any) -> tuple[str, str] | None:
    call = calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], dict) else None
    function = call.get("function") if call else None
    if not isinstance(function, dict):
        return None
    return str(function.get("name") or ""), str(function.get("arguments") or "")


def _add_usage(usage: Any, tokens: int) -> None:
    if isinstance(usage, dict) and tokens:
        for key in ("completion_tokens", "total_tokens"):
            if isinstance(usage.get(key), int):
                usage[key] += tokens


class _Whole:
    """A whole (non-streamed) answer: held until it is read."""

    def __init__(self, send: Callable, plan: ToolRequest):
        self._send, self._plan = send, plan
        self._start: dict | None = None
        self._chunks: list[bytes] = []
        self._spent = 0
        self.stray = False  # dropped as a start the bias chose, left half-written (else: made up)

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self._start = message
        elif message["type"] == "http.response.body":
            self._chunks.append(message.get("body", b""))
        else:
            await self._send(message)

    async def dropped(self) -> bool:
        """True when the answer made its values up (nothing sent); else it is sent as it was."""
        body = b"".join(self._chunks)
        data = _json(body) if self._start is not None and self._start.get("status") == 200 else None
        choice = _only_choice(data)
        message = choice.get("message") if choice is not None else None
        call = _first_call(message.get("tool_calls")) if isinstance(message, dict) else None
        self.stray = isinstance(message, dict) and stray_start(self._plan, message.get("content"),
                                                               bool(message.get("tool_calls")), choice.get("finish_reason"))
        if self.stray or (call is not None and made_up(self._plan, message.get("content"), *call)):
            usage = data.get("usage")
            self._spent = usage.get("completion_tokens", 0) if isinstance(usage, dict) else 0
            return True
        await self._flush(self._start, body)
        return False

    def second_send(self) -> Callable:
        self._start, self._chunks = None, []

        async def send(message: dict) -> None:
            await self.send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                body = b"".join(self._chunks)
                data = _json(body)
                if isinstance(data, dict):
                    _add_usage(data.get("usage"), self._spent)
                    body = json.dumps(data, ensure_ascii=False).encode("utf-8")
                await self._flush(self._start, body)

        return send

    async def _flush(self, start: dict | None, body: bytes) -> None:
        if start is None:
            return
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        await self._send({**start, "headers": headers + [(b"content-length", str(len(body)).encode())]})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})


class _Stream:
    """A streamed answer (server-sent events): passed on as it comes, except its first call when it
    opens the answer, held until complete and checked."""

    PASS, HOLD, DROP, START = "pass", "hold", "drop", "start"

    def __init__(self, send: Callable, plan: ToolRequest):
        self._send, self._plan = send, plan
        self._state = self.START if start_checked(plan) else self.PASS  # START: its first text may be a stray start
        self.stray = False
        self._decided = False
        self._text = ""  # content before the first call
        self._name, self._arguments = "", ""
        self._held: list[bytes] = []
        self._pending = b""
        self._id: str | None = None
        self._spent = 0

    async def send(self, message: dict) -> None:
        if message["type"] != "http.response.body":
            await self._send(message)
            return
        events, self._pending = _events(self._pending, message)
        for event in events:
            await self._event(event)
        if not message.get("more_body"):
            if self._state == self.HOLD:
                await self._decide()
            elif self._state == self.START:
                await self._release()
            if self._state != self.DROP:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _event(self, event: bytes) -> None:
        data = _sse_data(event)
        if isinstance(data, dict):
            self._id = self._id or data.get("id")
            usage = data.get("usage")
            if self._state == self.DROP and isinstance(usage, dict):
                self._spent = max(self._spent, usage.get("completion_tokens") or 0)
        if self._state == self.DROP:
            return
        if not self._decided:
            await self._read(data)
        if self._state == self.DROP:
            return
        if self._state in (self.HOLD, self.START):
            self._held.append(event)
            return
        await self._send({"type": "http.response.body", "body": event, "more_body": True})

    async def _read(self, data: Any) -> None:
        """Follow the answer up to its first call's end."""
        choice = _only_choice(data)
        if data == "[DONE]" or (isinstance(data, dict) and not data.get("choices")):
            if self._state == self.HOLD:
                await self._decide()
            elif self._state == self.START:
                await self._release()
            return
        if choice is None:
            return
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        if self._state == self.START:
            calls = delta.get("tool_calls")
            if not calls:
                self._text += delta.get("content") or ""
            if calls or not may_start(self._plan, self._text):
                await self._release()  # a call, or the model's own text: the answer goes on as it is
                if not calls:
                    self._decided = True  # text came first: no first call to check either
                    return
            elif choice.get("finish_reason"):
                if stray_start(self._plan, self._text, False, choice.get("finish_reason")):
                    self._state, self._held, self.stray = self.DROP, [], True
                else:
                    await self._release()
                return
            else:
                return
        for call in delta.get("tool_calls") or ():
            index = call.get("index", 0) if isinstance(call, dict) else 0
            if index != 0:
                if self._state == self.HOLD:
                    await self._decide()
                return
            if self._state == self.PASS:
                if self._text.strip() or not checked(self._plan):
                    self._decided = True
                    return
                self._state = self.HOLD
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            self._name += function.get("name") or ""
            self._arguments += function.get("arguments") or ""
        if self._state == self.PASS:
            self._text += delta.get("content") or ""
        if choice.get("finish_reason") and self._state == self.HOLD:
            await self._decide()

    async def _release(self) -> None:
        """The first text held as a possible stray start goes out: it was none."""
        self._state, held, self._held = self.PASS, self._held, []
        for event in held:
            await self._send({"type": "http.response.body", "body": event, "more_body": True})

    async def _decide(self) -> None:
        self._decided = True
        if made_up(self._plan, self._text, self._name, self._arguments):
            self._state, self._held = self.DROP, []
            return
        self._state, held, self._held = self.PASS, self._held, []
        for event in held:
            await self._send({"type": "http.response.body", "body": event, "more_body": True})

    async def dropped(self) -> bool:
        return self._state == self.DROP

    def second_send(self) -> Callable:
        """The second answer's send: no second response start; its events under the first's id,
        its usage with the dropped answer's tokens added."""
        pending = b""

        async def send(message: dict) -> None:
            nonlocal pending
            if message["type"] != "http.response.body":
                return
            events, pending = _events(pending, message)
            for event in events:
                await self._send({"type": "http.response.body", "body": self._rewrite(event), "more_body": True})
            if not message.get("more_body"):
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})

        return send

    def _rewrite(self, event: bytes) -> bytes:
        """An event of the second answer as sent on, ending in its separator."""
        data = _sse_data(event)
        if not isinstance(data, dict):
            return event if event.endswith(b"\n\n") else event + b"\n\n"
        if self._id:
            data["id"] = self._id
        _add_usage(data.get("usage"), self._spent)
        return sse_chunk(data)
