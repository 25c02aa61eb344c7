"""The chat request's fields as llama-cpp-python's stock request model takes them: what OpenAI
clients send that it rejects, rewritten, and its own validation run before the route (where a
failure would be a 500). The chat route's middleware and the agent routes both use them."""
from __future__ import annotations

from llama_cpp.server.types import CreateChatCompletionRequest
from pydantic import ValidationError
from toolbridge.engine import EMPTY_PARAMETERS, BadRequest


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
