"""OpenAI Responses (`POST /v1/responses`) as a reader into the chat request, and its writers.

`chat_request` reads a Responses body (input items: messages, `function_call`,
`function_call_output` matched by `call_id`; flat function tools; `tool_choice` auto /
required / none / a named function; `text.format`; `max_output_tokens`) into the OpenAI chat
body that toolbridge plans every request from. `response` writes a chat completion as a
Response object (its stream events: responses_stream.py).
"""
from __future__ import annotations

import json
import time
from typing import Any, Mapping

from .. import custom
from ..deltas import REASONING_FIELD
from ..errors import BadRequest
from ..thinking import effort_budget
from ..tools import ALLOWED
from .fields import new_id, string_field

# Sampling fields that mean the same in both APIs, and the engines' own extras clients send
# through (extra_body), passed to the chat request as they are.
PASSED = ("temperature", "top_p", "stream", "parallel_tool_calls", "stop", "seed", "top_k", "min_p", "logit_bias",
          "presence_penalty", "frequency_penalty", "repeat_penalty", "chat_template_kwargs", "model", "user")
# Items replayed from history that no model here wrote or can read back: a model's reasoning, and
# calls of built-in tools that run on OpenAI's side.
IGNORED_ITEMS = frozenset({"reasoning", "web_search_call", "file_search_call", "code_interpreter_call",
                           "image_generation_call", "computer_call", "computer_call_output", "mcp_list_tools",
                           "mcp_call", "mcp_approval_request", "mcp_approval_response", "compaction"})
# Tools are shown to the model as functions, the way vLLM's own Responses serving shows them: a
# namespace's functions flattened to `<namespace>__<name>`, a custom (freeform) tool as a function
# of one string argument. Built-in tools (web search, file search, ...) run on OpenAI's side; no
# server here can run them, so they are not shown (vLLM drops them too).
NAMESPACE_SEPARATOR = "__"


def chat_request(body: Mapping[str, Any], history: list[dict] | None = None) -> dict:
    """The chat body for a Responses body; BadRequest when it cannot be one. `history`: the
    input and output items of the previous response, when the request continues one; None
    when the engine keeps it (vLLM's own store), so that a result may answer a call made there."""
    if not isinstance(body, Mapping):
        raise BadRequest("The request body must be a JSON object.")
    if body.get("background"):
        raise BadRequest("background responses are not supported by this server.", param="background")
    chat: dict = {k: body[k] for k in PASSED if body.get(k) is not None}
    messages: list[dict] = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise BadRequest("instructions must be a string.", param="instructions")
        messages.append({"role": "system", "content": body["instructions"]})
    items = list(history or []) + input_items(body.get("input"))
    messages += chat_messages(items, continued=history is None and body.get("previous_response_id") is not None)
    if not messages:
        raise BadRequest("input must not be empty.", param="input")
    chat["messages"] = messages
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = chat_tool_choice(body["tool_choice"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    fmt = ((body.get("text") or {}).get("format") or {}) if isinstance(body.get("text"), Mapping) else {}
    if not isinstance(fmt, Mapping):
        raise BadRequest("text.format must be an object.", param="text.format")
    if fmt.get("type") == "json_schema":
        chat["response_format"] = {"type": "json_schema", "json_schema": {
            k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}}
    elif fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    tools = body.get("tools")
    if tools:
        chat["tools"] = chat_tools(tools)
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        try:
            effort_budget(reasoning["effort"])
        except ValueError as e:
            raise BadRequest(str(e), param="reasoning.effort") from None
        chat["reasoning_effort"] = reasoning["effort"]
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


def input_items(value: Any) -> list[dict]:
    """`input` as a list of items (a string is one user message)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not all(isinstance(i, Mapping) for i in value):
        raise BadRequest("input must be a string or an array of input items.", param="input")
    return [dict(i) for i in value]


def chat_messages(items: list[dict], continued: bool = False) -> list[dict]:
    """Input items -> chat messages: consecutive function_call items join one assistant turn
    (with the text of an assistant message just before them), each function_call_output is a
    tool message. `continued`: the calls of an earlier response the engine keeps are answered
    here; each stands in this history as the call its result answers."""
    messages: list[dict] = []
    called = {i.get("call_id") for i in items
              if i.get("type") in ("function_call", "custom_tool_call") and isinstance(i.get("call_id"), str)}
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise BadRequest(f"input[{i}].type must be a string.", param=f"input[{i}].type")
        where = f"input[{i}]"
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise BadRequest(f"{where}.role must be user, assistant, system or developer.", param=f"{where}.role")
            messages.append({"role": "system" if role == "developer" else role,
                             "content": message_content(item.get("content"), role, where)})
        elif kind in ("function_call", "custom_tool_call"):
            name = string_field(item, "name", where)
            if isinstance(item.get("namespace"), str):
                name = item["namespace"] + NAMESPACE_SEPARATOR + name
            arguments = (string_field(item, "arguments", where) if kind == "function_call"
                         else json.dumps({custom.INPUT: string_field(item, "input", where)}, ensure_ascii=False))
            call = {"id": string_field(item, "call_id", where), "type": "function",
                    "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            if isinstance(output, list):
                output = _text_parts(output, where)
            if not isinstance(output, str):
                raise BadRequest(f"{where}.output must be a string.", param=f"{where}.output")
            call_id = string_field(item, "call_id", where)
            if continued and call_id not in called:
                called.add(call_id)
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": "", "arguments": "{}"}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        elif kind in IGNORED_ITEMS:
            continue
        else:
            raise BadRequest(f"{where}: input items of type {kind!r} are not supported by this server (messages, "
                             "function and custom tool calls and their outputs are).", param=f"{where}.type")
    return messages


def message_content(content: Any, role: str, where: str) -> Any:
    """A message item's content: a string, text parts joined, or (user) chat content parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or an array of content parts.", param=f"{where}.content")
    if role == "user" and any(isinstance(p, Mapping) and p.get("type") == "input_image" for p in content):
        parts = []
        for p in content:
            if isinstance(p, Mapping) and p.get("type") == "input_image":
                parts.append({"type": "image_url", "image_url": {"url": p.get("image_url")}})
            else:
                parts.append({"type": "text", "text": _text_parts([p], where)})
        return parts
    return _text_parts(content, where)


def _text_parts(parts: list, where: str) -> str:
    out = []
    for p in parts:
        if not isinstance(p, Mapping) or p.get("type") not in ("input_text", "output_text", "text", "refusal"):
            kind = p.get("type") if isinstance(p, Mapping) else type(p).__name__
            raise BadRequest(f"{where}: content parts of type {kind!r} are not supported here.", param=where)
        text = p.get("text", p.get("refusal"))
        if not isinstance(text, str):
            raise BadRequest(f"{where}: a text part needs a string `text`.", param=where)
        out.append(text)
    return "".join(out)


def chat_tools(tools: Any) -> list[dict]:
    """Responses tools -> chat function tools (see NAMESPACE_SEPARATOR)."""
    if not isinstance(tools, list):
        raise BadRequest("tools must be an array of tool objects.", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            raise BadRequest(f"tools[{i}] must be an object.", param=f"tools[{i}]")
        kind = t.get("type")
        if kind == "function":
            out.append(_function(t))
        elif kind == "namespace":
            if not isinstance(t.get("name"), str) or not isinstance(t.get("tools"), list):
                raise BadRequest(f"tools[{i}]: a namespace needs a name and a tools array.", param=f"tools[{i}]")
            out += [_function(f, t["name"] + NAMESPACE_SEPARATOR + str(f.get("name"))) for f in t["tools"]
                    if isinstance(f, Mapping) and f.get("type") == "function"]
        elif kind == "custom":
            out.append(custom.as_function(t.get("name"), t.get("description"), t.get("format"), f"tools[{i}]"))
        elif not isinstance(kind, str):
            raise BadRequest(f"tools[{i}].type must be a string.", param=f"tools[{i}].type")
    return out


def grammars_as_text(tools: Any) -> bool:
    """A Responses body's custom tools with a grammar rewritten in place as free-text ones whose description
    shows the grammar: for a route that refuses grammars (vLLM's), once the plan holding the grammar is made.
    Whether any was."""
    changed = False
    for i, tool in enumerate(tools if isinstance(tools, list) else ()):
        if isinstance(tool, dict) and tool.get("type") == "custom" and \
                custom.read_format(tool.get("format"), f"tools[{i}]")[0] != "text":
            shown = custom.as_function(tool.get("name"), tool.get("description"), tool["format"], f"tools[{i}]")
            tools[i] = {**tool, "description": shown["function"]["description"], "format": {"type": "text"}}
            changed = True
    return changed


def _function(tool: Mapping, name: str | None = None) -> dict:
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    if name is not None:
        fn["name"] = name
    return {"type": "function", "function": fn}


def call_names(tools: Any) -> dict[str, tuple[str, str | None]]:
    """Flat call name -> (item type, namespace) for the calls that are not plain functions."""
    out: dict[str, tuple[str, str | None]] = {}
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, Mapping):
            continue
        if t.get("type") == "custom" and isinstance(t.get("name"), str):
            out[t["name"]] = ("custom_tool_call", None)
        elif t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            for f in t["tools"]:
                if isinstance(f, Mapping) and isinstance(f.get("name"), str):
                    out[f"{t.get('name')}{NAMESPACE_SEPARATOR}{f['name']}"] = ("function_call", t.get("name"))
    return out


def chat_tool_choice(choice: Any) -> Any:
    """Responses tool_choice -> chat tool_choice: a named function or custom tool, and `allowed_tools`
    ({"type": "allowed_tools", "mode": ..., "tools": [{"type": "function", "name": ...}]}) in its chat shape."""
    if isinstance(choice, str):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") in ("function", "custom"):
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, Mapping) and choice.get("type") == ALLOWED:
        tools = choice.get("tools")
        return {"type": ALLOWED, ALLOWED: {"mode": choice.get("mode"), "tools": [
            {"type": "function", "function": {"name": t.get("name")}} if isinstance(t, Mapping) and
            t.get("type") in ("function", "custom") else t for t in tools] if isinstance(tools, list) else tools}}
    raise BadRequest("tool_choice must be 'auto', 'required', 'none', {\"type\": \"function\", \"name\": ...} or "
                     "{\"type\": \"allowed_tools\", \"mode\": ..., \"tools\": [...]}.", param="tool_choice")


# -- writers ---------------------------------------------------------------------------------------

def response(completion: Mapping[str, Any], body: Mapping[str, Any], response_id: str | None = None) -> dict:
    """A chat completion as a Response object."""
    choice = completion["choices"][0]
    msg = choice.get("message") or {}
    output = []
    names = call_names(body.get("tools"))
    if msg.get(REASONING_FIELD):
        output.append(reasoning_item(new_id("rs"), msg[REASONING_FIELD], "completed"))
    if msg.get("content"):
        output.append(message_item(new_id("msg"), msg["content"], "completed"))
    for tc in msg.get("tool_calls") or ():
        output.append(call_item(tc["id"], tc["function"]["name"], tc["function"]["arguments"], "completed", names))
    return response_object(body, response_id or new_id("resp"), completion.get("model"), output,
                     choice.get("finish_reason"), completion.get("usage"), completion.get("created"))


def reasoning_item(item_id: str, text: str, status: str) -> dict:
    """The model's thinking as a reasoning item (its text as `reasoning_text` content; no summary)."""
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [],
            "content": [{"type": "reasoning_text", "text": text}] if status == "completed" else []}


def message_item(item_id: str, text: str, status: str) -> dict:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status,
            "content": [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []}


def call_item(call_id: str, name: str, arguments: str, status: str,
               names: Mapping[str, tuple[str, str | None]]) -> dict:
    """A call as a function_call item (its namespace split off), or as a custom_tool_call item
    whose input is the shim's string argument."""
    kind, namespace = names.get(name, ("function_call", None))
    if kind == "custom_tool_call":
        return {"id": new_id("ctc"), "type": kind, "status": status, "call_id": call_id, "name": name,
                "input": custom.decode_input(arguments)}
    item = {"id": new_id("fc"), "type": kind, "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}
    if namespace is not None:
        item["name"], item["namespace"] = name[len(namespace) + len(NAMESPACE_SEPARATOR):], namespace
    return item


def response_object(body: Mapping, rid: str, model: Any, output: list, finish: str | None, usage: Any,
              created: Any = None, status: str | None = None) -> dict:
    if status is None:
        status = "incomplete" if finish == "length" else "completed"
    text = body.get("text") if isinstance(body.get("text"), Mapping) else {"format": {"type": "text"}}
    return {
        "id": rid, "object": "response", "created_at": int(created or time.time()), "status": status,
        "error": None, "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": model or body.get("model"), "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "previous_response_id": body.get("previous_response_id"), "reasoning": None,
        "store": bool(body.get("store", True)), "temperature": body.get("temperature"), "text": text,
        "tool_choice": body.get("tool_choice", "auto"), "tools": list(body.get("tools") or []),
        "top_p": body.get("top_p"), "truncation": "disabled", "metadata": body.get("metadata") or {},
        "user": body.get("user"), "usage": _usage(usage),
    }


def _usage(usage: Any) -> dict | None:
    if not isinstance(usage, Mapping):
        return None
    i, o = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    return {"input_tokens": i, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": i + o}


def output_items(resp: Mapping[str, Any]) -> list[dict]:
    """A response's output as input items for a later request (previous_response_id)."""
    return [json.loads(json.dumps(i)) for i in resp.get("output") or ()]
