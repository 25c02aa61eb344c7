"""Anthropic Messages (`POST /v1/messages`) as a reader into the chat request, and its writers.

`chat_request` reads a Messages body (system, messages whose content is a string or blocks:
text, tool_use, tool_result; tools with `input_schema`; `tool_choice` auto / any / tool /
none and `disable_parallel_tool_use`; `stop_sequences`; `max_tokens`, which Anthropic
requires) into the OpenAI chat body toolbridge plans every request from. `message` writes a
chat completion as a Message, `MessageStream` writes chat stream chunks as Messages events.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from ..deltas import REASONING_FIELD
from ..errors import BadRequest
from .fields import new_id, string_field

PASSED = ("temperature", "top_p", "top_k", "stream", "seed", "min_p", "logit_bias", "repeat_penalty",
          "chat_template_kwargs", "model")
STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}
# the error type Anthropic names for each status it answers; another 4xx is a bad request, another 5xx
# Anthropic's own failure
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
               529: "overloaded_error"}


def error_body(status: int, message: str) -> dict:
    """An error in Anthropic's shape, with the type Anthropic uses for the status."""
    kind = ERROR_TYPES.get(status) or ("invalid_request_error" if 400 <= status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def chat_request(body: Mapping[str, Any]) -> dict:
    """The chat body for a Messages body; BadRequest when it cannot be one."""
    if not isinstance(body, Mapping):
        raise BadRequest("The request body must be a JSON object.")
    if not isinstance(body.get("max_tokens"), int) or isinstance(body.get("max_tokens"), bool):
        raise BadRequest("max_tokens: an integer is required.", param="max_tokens")
    chat: dict = {k: body[k] for k in PASSED if body.get(k) is not None}
    chat["max_tokens"] = body["max_tokens"]
    messages: list[dict] = []
    system = body.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _text(system, "system")})
    turns = body.get("messages")
    if not isinstance(turns, list) or not turns:
        raise BadRequest("messages: a non-empty array is required.", param="messages")
    for i, turn in enumerate(turns):
        messages += chat_turn(turn, f"messages[{i}]")
    chat["messages"] = messages
    if body.get("tools"):
        chat["tools"] = chat_tools(body["tools"])
    choice = body.get("tool_choice")
    if choice is not None:
        chat["tool_choice"], parallel = chat_tool_choice(choice)
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    if body.get("stop_sequences") is not None:
        stops = body["stop_sequences"]
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise BadRequest("stop_sequences must be an array of strings.", param="stop_sequences")
        chat["stop"] = stops
    budget = thinking_budget(body.get("thinking"))
    if budget is not None:
        chat["chat_template_kwargs"] = {**(chat.get("chat_template_kwargs") or {}), "tb_thinking_budget": budget}
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


def thinking_budget(thinking: Any) -> int | None:
    """`thinking: {"type": "enabled", "budget_tokens": N}` as the thinking budget (toolbridge's
    `tb_thinking_budget`); `disabled` or none: no budget."""
    if thinking is None or (isinstance(thinking, Mapping) and thinking.get("type") in ("disabled", "adaptive")):
        return None
    budget = thinking.get("budget_tokens") if isinstance(thinking, Mapping) else None
    if not (isinstance(thinking, Mapping) and thinking.get("type") == "enabled" and isinstance(budget, int)
            and not isinstance(budget, bool) and budget >= 1):
        raise BadRequest("thinking must be {\"type\": \"enabled\", \"budget_tokens\": N} (N >= 1) or "
                         "{\"type\": \"disabled\"}.", param="thinking")
    return budget


def chat_turn(turn: Any, where: str) -> list[dict]:
    """One Messages turn -> chat messages: an assistant turn's tool_use blocks are its
    tool_calls; a user turn's tool_result blocks are tool messages, before its other content."""
    if not isinstance(turn, Mapping) or turn.get("role") not in ("user", "assistant", "system"):
        raise BadRequest(f"{where}.role must be 'user', 'assistant' or 'system'.", param=f"{where}.role")
    role, content = turn["role"], turn.get("content")
    if role == "system":  # Claude Code sends system turns among the messages
        return [{"role": "system", "content": _text(content, f"{where}.content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or an array of content blocks.", param=f"{where}.content")
    texts: list[str] = []
    images: list[dict] = []
    calls: list[dict] = []
    results: list[dict] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(string_field(block, "text", at))
        elif kind in ("thinking", "redacted_thinking"):
            continue
        elif kind == "tool_use" and role == "assistant":
            args = block.get("input", {})
            if not isinstance(args, Mapping):
                raise BadRequest(f"{at}.input must be an object.", param=f"{at}.input")
            calls.append({"id": string_field(block, "id", at), "type": "function",
                          "function": {"name": string_field(block, "name", at), "arguments": json.dumps(args, ensure_ascii=False)}})
        elif kind == "tool_result" and role == "user":
            text = _text(block.get("content", ""), f"{at}.content")
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append({"role": "tool", "tool_call_id": string_field(block, "tool_use_id", at), "content": text})
        elif kind == "image" and role == "user":
            src = block.get("source") or {}
            if not isinstance(src, Mapping):
                raise BadRequest(f"{at}.source must be an object.", param=f"{at}.source")
            url = src.get("url") if src.get("type") == "url" else f"data:{src.get('media_type')};base64,{src.get('data')}"
            images.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise BadRequest(f"{at}: {kind!r} blocks are not supported in a {role} turn by this server.",
                             param=f"{at}.type")
    out = list(results)
    text = "\n".join(texts)
    if role == "assistant":
        if text or calls:
            out.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
    elif images:
        out.append({"role": "user", "content": [{"type": "text", "text": text}, *images] if text else images})
    elif text or not results:
        out.append({"role": "user", "content": text})
    return out


def _text(value: Any, where: str) -> str:
    """A string, or text blocks joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        out = []
        for k, b in enumerate(value):
            if not isinstance(b, Mapping) or b.get("type") != "text":
                raise BadRequest(f"{where}[{k}]: only text blocks are supported here.", param=where)
            out.append(string_field(b, "text", f"{where}[{k}]"))
        return "\n".join(out)
    raise BadRequest(f"{where} must be a string or an array of text blocks.", param=where)


def chat_tools(tools: Any) -> list[dict]:
    """Messages tools (name, description, input_schema) -> chat function tools. Anthropic's
    server tools (web search, bash, ...) run on Anthropic's side and are refused."""
    if not isinstance(tools, list):
        raise BadRequest("tools must be an array.", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping) or t.get("type", "custom") not in ("custom", None):
            kind = t.get("type") if isinstance(t, Mapping) else type(t).__name__
            raise BadRequest(f"tools[{i}]: {kind!r} tools are not supported by this server; declare custom tools "
                             "with input_schema.", param=f"tools[{i}]")
        fn = {"name": t.get("name"), "parameters": t.get("input_schema")}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """Messages tool_choice -> (chat tool_choice, parallel_tool_calls or None)."""
    if not isinstance(choice, Mapping):
        raise BadRequest("tool_choice must be an object.", param="tool_choice")
    kind = choice.get("type")
    mapped = {"auto": "auto", "any": "required", "none": "none"}.get(kind) if isinstance(kind, str) else None
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise BadRequest("tool_choice.name is required when tool_choice.type is 'tool'.", param="tool_choice.name")
        mapped = {"type": "function", "function": {"name": choice["name"]}}
    if mapped is None:
        raise BadRequest("tool_choice.type must be 'auto', 'any', 'tool' or 'none'.", param="tool_choice.type")
    parallel = choice.get("disable_parallel_tool_use")
    return mapped, (not parallel) if isinstance(parallel, bool) else None


# -- writers ---------------------------------------------------------------------------------------

def tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def message(completion: Mapping[str, Any], body: Mapping[str, Any]) -> dict:
    """A chat completion as a Message."""
    choice = completion["choices"][0]
    msg = choice.get("message") or {}
    content: list[dict] = []
    if msg.get(REASONING_FIELD):
        content.append({"type": "thinking", "thinking": msg[REASONING_FIELD], "signature": ""})
    if msg.get("content"):
        content.append({"type": "text", "text": msg["content"]})
    for tc in msg.get("tool_calls") or ():
        content.append({"type": "tool_use", "id": tool_use_id(tc["id"]), "name": tc["function"]["name"],
                        "input": _arguments(tc["function"]["arguments"])})
    usage = completion.get("usage") or {}
    return {"id": new_id("msg"), "type": "message", "role": "assistant", "model": completion.get("model") or body.get("model"),
            "content": content, "stop_reason": stop_reason(choice.get("finish_reason"), bool(msg.get("tool_calls"))),
            "stop_sequence": None,
            "usage": {"input_tokens": usage.get("prompt_tokens") or 0, "output_tokens": usage.get("completion_tokens") or 0}}


def _arguments(text: str) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(finish: str | None, called: bool) -> str:
    """`tool_use` whenever the answer holds tool_use blocks (a named choice too)."""
    if finish == "length":
        return "max_tokens"
    return "tool_use" if called else STOP_REASONS.get(finish or "stop", "end_turn")


class MessageStream:
    """Chat stream chunks in, Messages stream events out (dicts with `type`): message_start,
    per block content_block_start / deltas / content_block_stop, message_delta, message_stop."""

    def __init__(self, body: Mapping[str, Any]):
        self.body = body
        self.id = new_id("msg")
        self.model: Any = body.get("model")
        self.index = -1  # the open block's index
        self.block: str | None = None  # "thinking", "text" or "tool_use"
        self.calls: dict[int, int] = {}  # chat tool-call index -> block index
        self.called = False
        self.finish: str | None = None
        self.usage: dict = {}
        self.started = False

    def start(self) -> list[dict]:
        if self.started:
            return []
        self.started = True
        return [{"type": "message_start", "message": {
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}}]

    def feed(self, chunk: Mapping[str, Any]) -> list[dict]:
        self.model = self.model or chunk.get("model")
        events = self.start()
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for ch in chunk.get("choices") or ():
            d = ch.get("delta") or {}
            if d.get(REASONING_FIELD):
                if self.block != "thinking":
                    events += self._open({"type": "thinking", "thinking": "", "signature": ""}, "thinking")
                events.append({"type": "content_block_delta", "index": self.index,
                               "delta": {"type": "thinking_delta", "thinking": d[REASONING_FIELD]}})
            if d.get("content"):
                if self.block != "text":
                    events += self._open({"type": "text", "text": ""}, "text")
                events.append({"type": "content_block_delta", "index": self.index,
                               "delta": {"type": "text_delta", "text": d["content"]}})
            for tc in d.get("tool_calls") or ():
                fn = tc.get("function") or {}
                i = tc.get("index", 0)
                if i not in self.calls:
                    events += self._open({"type": "tool_use", "id": tool_use_id(tc.get("id") or new_id("call")),
                                          "name": fn.get("name") or "", "input": {}}, "tool_use")
                    self.calls[i] = self.index
                    self.called = True
                if fn.get("arguments"):
                    events.append({"type": "content_block_delta", "index": self.calls[i],
                                   "delta": {"type": "input_json_delta", "partial_json": fn["arguments"]}})
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
        return events

    def _open(self, block: dict, kind: str) -> list[dict]:
        events = self._close()
        self.index += 1
        self.block = kind
        return events + [{"type": "content_block_start", "index": self.index, "content_block": block}]

    def _close(self) -> list[dict]:
        if self.block is None:
            return []
        self.block = None
        return [{"type": "content_block_stop", "index": self.index}]

    def finish_events(self) -> list[dict]:
        usage = {"input_tokens": self.usage.get("prompt_tokens") or 0,
                 "output_tokens": self.usage.get("completion_tokens") or 0}
        return self.start() + self._close() + [
            {"type": "message_delta", "delta": {"stop_reason": stop_reason(self.finish, self.called), "stop_sequence": None},
             "usage": usage},
            {"type": "message_stop"}]

    def error_event(self, status: int, message: str) -> list[dict]:
        return self.start() + [error_body(status, message)]
