"""Each agent API's request body checked against its own schema, at the edge (BadRequest -> 400).

The readers (responses.py, anthropic.py) take what they can turn into a chat request, and a field
they pass on untouched, or do not read, was accepted whatever its type: `max_output_tokens: "48"`,
`stream: "true"`, `metadata: "x"`, a tool of type "banana" all answered 200, so a client's bug went
unnoticed. Here each body is validated, before it is read, by pydantic models written after the
official SDKs' request types (openai's `ResponseCreateParams`, anthropic's `MessageCreateParams` and
`MessageCountTokensParams`; the servers do not install the SDKs, and tests/test_api_validate.py checks
that every type the pinned SDKs declare passes), in strict mode: no string is taken for a number or a
boolean. Unknown fields pass (engines take extras such as `top_k` or `chat_template_kwargs`); the
fields a reader needs in more detail (which item and tool types it supports) are still the reader's
to refuse.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Dict, List, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError

from ..errors import BadRequest

# The discriminator's tags: "type=<value>", which no field name can be (see _path).
TAG = "type="
OTHER = TAG + "*"


class Strict(BaseModel):
    """An object of the API: known fields typed strictly, others let through."""

    model_config = ConfigDict(strict=True, extra="allow")


class Typed(Strict):
    """An object of a type this server does not read further (its reader refuses it or skips it)."""

    type: str


def by_type(models: Mapping[str, type], default: Optional[str] = None, other: Optional[type] = None) -> Any:
    """A union of objects told apart by their `type` (`default` where it is absent): an unknown
    type is an error unless `other` takes it."""

    def tag(value: Any) -> Optional[str]:
        if not isinstance(value, dict):
            return None
        kind = value.get("type", default)
        if isinstance(kind, str) and kind in models:
            return TAG + kind
        return OTHER if other is not None else TAG + repr(kind)

    members = [Annotated[m, Tag(TAG + k)] for k, m in models.items()]
    if other is not None:
        members.append(Annotated[other, Tag(OTHER)])
    return Annotated[Union[tuple(members)], Discriminator(tag)]


def loose(*kinds: str) -> Dict[str, type]:
    """Object types checked only for being objects with that type."""
    return {k: Typed for k in kinds}


NonBlank = Annotated[str, Field(pattern=r"\S")]
Object = Dict[str, Any]


# -- OpenAI Responses (openai.types.responses.ResponseCreateParams) ----------------------------------

class InputText(Strict):
    text: str


class Refusal(Strict):
    refusal: str


class InputImage(Strict):
    image_url: Optional[str] = None
    file_id: Optional[str] = None
    detail: Optional[str] = None


PART = by_type({"input_text": InputText, "output_text": InputText, "text": InputText, "refusal": Refusal,
                "input_image": InputImage, **loose("input_file", "input_audio")})


class MessageItem(Strict):
    role: Literal["user", "assistant", "system", "developer"]
    content: Union[str, Annotated[List[PART], Field(min_length=1)]]  # type: ignore[valid-type]


class FunctionCall(Strict):
    call_id: str
    name: str
    arguments: str
    namespace: Optional[str] = None


class CustomCall(Strict):
    call_id: str
    name: str
    input: str


class CallOutput(Strict):
    call_id: str
    output: Union[str, List[PART]]  # type: ignore[valid-type]


# every input item type of the SDK's ResponseInputItemParam; the reader says which it supports
ITEM = by_type({"message": MessageItem, "function_call": FunctionCall, "function_call_output": CallOutput,
                "custom_tool_call": CustomCall, "custom_tool_call_output": CallOutput,
                **loose("reasoning", "item_reference", "file_search_call", "computer_call", "computer_call_output",
                        "web_search_call", "tool_search_call", "tool_search_output", "additional_tools",
                        "configuration_update", "compaction", "compaction_trigger", "image_generation_call",
                        "code_interpreter_call", "local_shell_call", "local_shell_call_output", "shell_call",
                        "shell_call_output", "apply_patch_call", "apply_patch_call_output", "mcp_list_tools",
                        "mcp_approval_request", "mcp_approval_response", "mcp_call", "program",
                        "program_output")},
               default="message")


class FunctionTool(Strict):
    name: str
    description: Optional[str] = None
    parameters: Optional[Object] = None
    strict: Optional[bool] = None


class CustomTool(Strict):
    name: str
    description: Optional[str] = None
    format: Optional[Object] = None


class NamespaceTool(Strict):
    name: str
    description: Optional[str] = None
    tools: List[Object]


# every tool type of the SDK's ToolParam; built-in tools run on OpenAI's side and are not shown
RESPONSES_TOOL = by_type({"function": FunctionTool, "custom": CustomTool, "namespace": NamespaceTool,
                          **loose("file_search", "computer", "computer_use_preview", "web_search",
                                  "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11",
                                  "mcp", "code_interpreter", "programmatic_tool_calling", "image_generation",
                                  "local_shell", "shell", "tool_search", "apply_patch")})


class NamedChoice(Strict):
    name: str


RESPONSES_CHOICE = Union[Literal["auto", "required", "none"],
                         by_type({"function": NamedChoice, "custom": NamedChoice}, other=Typed)]


class JsonSchemaFormat(Strict):
    name: str
    schema_: Object = Field(alias="schema")
    description: Optional[str] = None
    strict: Optional[bool] = None


class TextConfig(Strict):
    format: Optional[by_type({"text": Strict, "json_object": Strict,  # type: ignore[valid-type]
                              "json_schema": JsonSchemaFormat})] = None
    verbosity: Optional[Literal["low", "medium", "high"]] = None


class ResponsesBody(Strict):
    model: Optional[str] = None
    input: Union[str, List[ITEM], None] = None  # type: ignore[valid-type]
    instructions: Optional[str] = None
    tools: Optional[List[RESPONSES_TOOL]] = None  # type: ignore[valid-type]
    tool_choice: Optional[RESPONSES_CHOICE] = None  # type: ignore[valid-type]
    parallel_tool_calls: Optional[bool] = None
    max_output_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    max_tool_calls: Optional[Annotated[int, Field(ge=1)]] = None
    temperature: Optional[Annotated[float, Field(ge=0, le=2)]] = None
    top_p: Optional[Annotated[float, Field(ge=0, le=1)]] = None
    top_logprobs: Optional[Annotated[int, Field(ge=0)]] = None
    stream: Optional[bool] = None
    stream_options: Optional[Object] = None
    store: Optional[bool] = None
    background: Optional[bool] = None
    metadata: Optional[Dict[str, str]] = None
    text: Optional[TextConfig] = None
    previous_response_id: Optional[str] = None
    conversation: Union[str, Object, None] = None
    include: Optional[List[str]] = None
    reasoning: Optional[Object] = None
    prompt: Optional[Object] = None
    truncation: Optional[Literal["auto", "disabled"]] = None
    service_tier: Optional[str] = None
    user: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None


# -- Anthropic Messages (anthropic.types.MessageCreateParams, MessageCountTokensParams) ----------------

class TextBlock(Strict):
    type: Literal["text"]
    text: str


class ImageBlock(Strict):
    source: Object


class ToolUse(Strict):
    id: str
    name: str
    input: Object


class ToolResult(Strict):
    tool_use_id: str
    content: Union[str, List[Object], None] = None
    is_error: Optional[bool] = None


class Thinking(Strict):
    thinking: str
    signature: Optional[str] = None


class RedactedThinking(Strict):
    data: str


# the blocks the reader reads; any other block type is the reader's to refuse
BLOCK = by_type({"text": TextBlock, "image": ImageBlock, "document": ImageBlock, "tool_use": ToolUse,
                 "tool_result": ToolResult, "thinking": Thinking, "redacted_thinking": RedactedThinking}, other=Typed)


class Turn(Strict):
    role: Literal["user", "assistant", "system"]  # system turns: Claude Code sends them among the messages
    content: Union[str, List[BLOCK]]  # type: ignore[valid-type]


class CustomToolDef(Strict):
    type: Optional[Literal["custom"]] = None
    name: str
    description: Optional[str] = None
    input_schema: Object
    strict: Optional[bool] = None  # accepted: toolbridge constrains every call to its schema already


# a tool without a type is a custom one; a server tool (bash_..., web_search_...) is refused by the reader
MESSAGES_TOOL = by_type({"custom": CustomToolDef}, default="custom", other=Typed)


class ParallelChoice(Strict):
    disable_parallel_tool_use: Optional[bool] = None


class ToolChoice(ParallelChoice):
    name: str


MESSAGES_CHOICE = by_type({"auto": ParallelChoice, "any": ParallelChoice, "tool": ToolChoice, "none": Strict})


class Metadata(Strict):
    user_id: Optional[str] = None


class CountTokensBody(Strict):
    model: Optional[str] = None
    messages: List[Turn]
    system: Union[str, List[TextBlock], None] = None
    tools: Optional[List[MESSAGES_TOOL]] = None  # type: ignore[valid-type]
    tool_choice: Optional[MESSAGES_CHOICE] = None  # type: ignore[valid-type]
    thinking: Optional[Object] = None
    output_config: Optional[Object] = None


class MessagesBody(CountTokensBody):
    max_tokens: Annotated[int, Field(ge=1)]
    stop_sequences: Optional[List[NonBlank]] = None
    stream: Optional[bool] = None
    metadata: Optional[Metadata] = None
    temperature: Optional[Annotated[float, Field(ge=0)]] = None
    top_p: Optional[Annotated[float, Field(ge=0, le=1)]] = None
    top_k: Optional[Annotated[int, Field(ge=0)]] = None
    service_tier: Optional[str] = None


_RESPONSES = TypeAdapter(ResponsesBody)
_MESSAGES = TypeAdapter(MessagesBody)
_COUNT_TOKENS = TypeAdapter(CountTokensBody)


def responses_body(data: Mapping[str, Any]) -> None:
    """A Responses body (`POST /v1/responses`) checked against its schema; BadRequest if it fails."""
    _validate(_RESPONSES, data)


def messages_body(data: Mapping[str, Any]) -> None:
    """A Messages body (`POST /v1/messages`) checked against its schema; BadRequest if it fails."""
    _validate(_MESSAGES, data)


def count_tokens_body(data: Mapping[str, Any]) -> None:
    """A token-count body (`POST /v1/messages/count_tokens`: Messages without max_tokens)."""
    _validate(_COUNT_TOKENS, data)


def _validate(adapter: TypeAdapter, data: Mapping[str, Any]) -> None:
    try:
        adapter.validate_python(data)
    except ValidationError as e:
        raise bad_request(e.errors(include_url=False), data) from None


def bad_request(errors: List[dict], data: Any) -> BadRequest:
    """The most specific error (the deepest field), as a BadRequest naming the field
    (`input[0].content`) the way the APIs do."""
    paths = [_path(e["loc"], data, e["type"]) for e in errors]
    deepest = max(range(len(errors)), key=lambda i: (len(paths[i]), -i))
    path = paths[deepest]
    # a union's members each report an error at the same place: say what each would have taken
    said = [_message(e) for e, p in zip(errors, paths) if p == path]
    message = " or ".join(dict.fromkeys(said))
    got = errors[deepest].get("input")
    if errors[deepest]["type"] != "missing" and not isinstance(got, (dict, list)):
        message += f" (got {_short(got)})"
    where = _join(path)
    return BadRequest(f"Invalid '{where}': {message}.", param=where or None)


def _path(loc: tuple, data: Any, kind: str) -> List[Union[str, int]]:
    """`loc` as the field's path in the body, without the union members' labels pydantic adds."""
    out: List[Union[str, int]] = []
    here = data
    for i, part in enumerate(loc):
        if isinstance(part, int) and isinstance(here, list) and part < len(here):
            out.append(part)
            here = here[part]
        elif isinstance(part, str) and isinstance(here, dict) and part in here:
            out.append(part)
            here = here[part]
        elif isinstance(part, str) and i == len(loc) - 1 and kind == "missing" and not part.startswith(TAG):
            out.append(part)
    if kind == "union_tag_invalid" and isinstance(here, dict) and "type" in here:
        out.append("type")
    return out


def _join(path: List[Union[str, int]]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


MESSAGES = {"missing": "this field is required", "union_tag_not_found": "expected an object",
            "model_type": "expected an object", "dict_type": "expected an object", "list_type": "expected an array",
            "string_type": "expected a string", "bool_type": "expected a boolean", "int_type": "expected an integer",
            "float_type": "expected a number",
            "string_pattern_mismatch": "expected a string with a non-blank character"}


def _message(error: dict) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind in MESSAGES:
        return MESSAGES[kind]
    if kind == "union_tag_invalid":
        tags = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        known = ", ".join(repr(t[len(TAG):]) for t in tags if t.startswith(TAG) and t != OTHER)
        return f"unknown type; expected one of {known}"
    if kind == "too_short":
        return f"expected at least {ctx.get('min_length', 1)} item(s)"
    return error["msg"][0].lower() + error["msg"][1:]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


__all__ = ["bad_request", "count_tokens_body", "messages_body", "responses_body"]
