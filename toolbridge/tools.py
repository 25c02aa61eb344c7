"""OpenAI `tools` and `tool_choice` checked once and turned into the core's types.

A `Tool` carries what the parser and grammars need: the name, the parameter schema,
a navigator over that schema for coercion, and a compiled validator. Schemas are checked and
validated with jsonschema-rs, the compiled implementation of the same drafts: the pure-Python
jsonschema took most of a request's budget on every new tool set (docs/measurements.md, "Code
figures").
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping, Sequence

import jsonschema_rs

from .jsondata import plain_data
from .errors import BadRequest
from .schema import RefError, Schema, check_refs, engine_schema, strict_error

NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
EMPTY_PARAMETERS: dict = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict
    schema: Schema = field(repr=False, compare=False)
    validator: Any = field(repr=False, compare=False)

    @cached_property
    def engine_parameters(self) -> dict:
        """The parameter schema in the subset the engines' grammar converters share."""
        return engine_schema(self.parameters)

    def errors(self, arguments: Any) -> list[str]:
        """Schema violations of `arguments`, as short messages (empty when valid)."""
        return [f"{'/'.join(map(str, e.instance_path)) or '(root)'}: {e.message}"
                for e in self.validator.iter_errors(arguments)]


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "none" | "auto" | "required" | "named"
    name: str | None = None
    allowed: tuple[str, ...] | None = None  # `allowed_tools`: the only tools this answer may call

    @property
    def forced(self) -> bool:
        return self.mode in ("required", "named")


def make_tool(name: str, description: str = "", parameters: Mapping | None = None,
              param: str = "tools") -> Tool:
    """Check one function definition and compile its schema."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadRequest(f"Invalid tool name {name!r}: use 1-64 letters, digits, '_', '-', '.' or ':'.",
                         param=f"{param}.function.name", code="invalid_tool_name")
    if parameters is None:
        parameters = EMPTY_PARAMETERS
    if not isinstance(parameters, Mapping):
        raise BadRequest(f"Parameters of tool {name!r} must be a JSON schema object.",
                         param=f"{param}.function.parameters", code="invalid_tool_schema")
    parameters = dict(parameters)
    top = parameters.get("type")
    if top is not None and top != "object" and not (isinstance(top, list) and "object" in top):
        raise BadRequest(f"Parameters of tool {name!r} must describe an object, not {top!r}.",
                         param=f"{param}.function.parameters", code="invalid_tool_schema")
    try:
        validator = compile_schema(parameters)
    except ValueError as e:
        raise BadRequest(f"Parameters of tool {name!r} are not a valid JSON schema: {e}",
                         param=f"{param}.function.parameters", code="invalid_tool_schema") from None
    return Tool(name, description or "", parameters, Schema(parameters), validator)


def compile_schema(schema: Mapping) -> Any:
    """jsonschema-rs's validator for `schema`, its `$ref`s checked first (local references only: nothing
    is fetched); ValueError with the first line of the reason where it is no schema."""
    try:
        check_refs(schema)
        return jsonschema_rs.validator_for(schema, validate_formats=False, offline=True)
    except (RefError, jsonschema_rs.ValidationError, ValueError) as e:
        raise ValueError(str(e).split("\n")[0]) from None


def tool_fields(raw: Any) -> tuple[Any, Any, Any, Any, Any] | None:
    """(type, name, description, parameters, strict) of an OpenAI tool given as a dict or an engine's
    pydantic model (read, not serialized), or None when it is neither."""
    if hasattr(raw, "model_dump"):
        fn = getattr(raw, "function", raw)
        return (getattr(raw, "type", "function"), getattr(fn, "name", None), getattr(fn, "description", None),
                getattr(fn, "parameters", None), getattr(fn, "strict", None))
    if not isinstance(raw, dict):
        return None
    fn = raw.get("function", raw)
    if hasattr(fn, "model_dump"):
        fn = plain_data(fn)
    if not isinstance(fn, dict):
        return raw.get("type", "function"), None, None, None, None
    return raw.get("type", "function"), fn.get("name"), fn.get("description"), fn.get("parameters"), fn.get("strict")


def normalize_tools(tools: Iterable[Any] | None) -> list[Tool]:
    """OpenAI `tools` (dicts or pydantic models) -> `Tool`s; raises BadRequest on bad input."""
    out: list[Tool] = []
    seen: set[str] = set()
    for i, raw in enumerate(tools or ()):
        if isinstance(raw, Tool):
            tool = raw
        else:
            fields = tool_fields(raw)
            if fields is None:
                raise BadRequest(f"tools[{i}] must be an object.", param=f"tools[{i}]")
            kind, name, description, parameters, strict = fields
            if kind != "function":
                raise BadRequest(f"tools[{i}].type must be 'function'.", param=f"tools[{i}].type")
            if name is None:
                raise BadRequest(f"tools[{i}].function.name is required.", param=f"tools[{i}].function")
            if parameters is not None and not isinstance(parameters, dict):
                parameters = plain_data(parameters)
            tool = make_tool(name, description or "", parameters, param=f"tools[{i}]")
            _check_strict(strict, tool, f"tools[{i}].function")
        if tool.name in seen:
            raise BadRequest(f"Tool name {tool.name!r} is declared twice.", param="tools",
                             code="duplicate_tool_name")
        seen.add(tool.name)
        out.append(tool)
    return out


def _check_strict(strict: Any, tool: Tool, where: str) -> None:
    """`strict: true` is accepted, as OpenAI accepts it: its schema must keep strict mode's rules
    (toolbridge.schema.strict_error). toolbridge constrains every call to its schema already."""
    if strict is None or strict is False:
        return
    if strict is not True:
        raise BadRequest(f"{where}.strict must be a boolean.", param=f"{where}.strict")
    error = strict_error(tool.parameters)
    if error is not None:
        raise BadRequest(f"Invalid schema for function {tool.name!r}: {error}", param=f"{where}.parameters",
                         code="invalid_function_parameters")


def normalize_tool_choice(choice: Any, tools: Sequence[Tool]) -> ToolChoice:
    """OpenAI `tool_choice` -> ToolChoice. No choice with tools means `auto`. `allowed_tools`
    ({"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [...]}}) is
    its mode, restricted to the tools it names."""
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise BadRequest(f"Invalid tool_choice {choice!r}.", param="tool_choice")
        if choice != "none" and not tools:
            raise BadRequest(f"tool_choice {choice!r} needs a non-empty tools list.", param="tool_choice")
        return ToolChoice(choice)
    if isinstance(choice, Mapping) and choice.get("type") == ALLOWED:
        return _allowed_choice(choice.get(ALLOWED), tools)
    if isinstance(choice, Mapping):
        fn = choice.get("function") or {}
        name = fn.get("name") if isinstance(fn, Mapping) else None
        name = name or choice.get("name")
        if not isinstance(name, str):
            raise BadRequest("tool_choice.function.name is required.", param="tool_choice")
        _declared(name, tools, "tool_choice")
        return ToolChoice("named", name)
    raise BadRequest("tool_choice must be a string or an object.", param="tool_choice")


ALLOWED = "allowed_tools"


def _allowed_choice(allowed: Any, tools: Sequence[Tool]) -> ToolChoice:
    where = f"tool_choice.{ALLOWED}"
    if not isinstance(allowed, Mapping):
        raise BadRequest(f"{where} must be an object with a mode and tools.", param=where)
    mode = allowed.get("mode")
    if mode not in ("auto", "required"):
        raise BadRequest(f"{where}.mode must be 'auto' or 'required'.", param=f"{where}.mode")
    listed = allowed.get("tools")
    if not isinstance(listed, list) or not listed:
        raise BadRequest(f"{where}.tools must be a non-empty array.", param=f"{where}.tools")
    names: list[str] = []
    for i, t in enumerate(listed):
        fn = t.get("function") if isinstance(t, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else t.get("name") if isinstance(t, Mapping) else None
        if not isinstance(t, Mapping) or t.get("type", "function") != "function" or not isinstance(name, str):
            raise BadRequest(f"{where}.tools[{i}] must be a function tool named as in tools.",
                             param=f"{where}.tools[{i}]")
        _declared(name, tools, f"{where}.tools[{i}]")
        names.append(name)
    return ToolChoice(mode, allowed=tuple(dict.fromkeys(names)))


def _declared(name: str, tools: Sequence[Tool], where: str) -> None:
    if name not in {t.name for t in tools}:
        raise BadRequest(f"{where} names {name!r}, which is not in tools.", param=where, code="unknown_tool")


def allowed_choice(mode: Any, names: Sequence[str]) -> dict:
    """The chat `allowed_tools` tool_choice for a mode and the names it allows."""
    return {"type": ALLOWED, ALLOWED: {"mode": mode, "tools": [{"type": "function", "function": {"name": n}}
                                                               for n in names]}}


def check_tool_results(messages: Iterable[Any]) -> None:
    """OpenAI's rule for history: a `tool` message answers a call an earlier assistant turn
    made (matched by tool_call_id); anything else is a bad request, not a prompt."""
    ids: set[str] = set()
    for i, m in enumerate(messages or ()):
        if not isinstance(m, Mapping):
            continue
        if m.get("role") == "assistant":
            ids.update(tc.get("id") for tc in m.get("tool_calls") or () if isinstance(tc, Mapping))
        elif m.get("role") == "tool" and m.get("tool_call_id") not in ids:
            raise BadRequest(f"messages[{i}] is a tool result for {m.get('tool_call_id')!r}, but no earlier assistant "
                             "message made a tool call with that id.", param=f"messages[{i}].tool_call_id",
                             code="invalid_tool_call_id")


def legacy_tools(functions: Any, function_call: Any) -> tuple[list | None, Any]:
    """The deprecated `functions` / `function_call` as `tools` / `tool_choice`."""
    tools = [{"type": "function", "function": f} for f in functions or []] or None
    choice = function_call
    if isinstance(choice, Mapping) and "name" in choice:
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return tools, choice
