"""OpenAI `tools` and `tool_choice` checked once and turned into the core's types.

A `Tool` carries what the parser and grammars need: the name, the parameter schema,
a navigator over that schema for coercion, and a compiled jsonschema validator.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from .errors import BadRequest

NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
EMPTY_PARAMETERS: dict = {"type": "object", "properties": {}}
JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "null", "array", "object"})


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict
    schema: "Schema" = field(repr=False, compare=False)
    validator: Any = field(repr=False, compare=False)

    def errors(self, arguments: Any) -> list[str]:
        """Schema violations of `arguments`, as short messages (empty when valid)."""
        return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in self.validator.iter_errors(arguments)]


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # "none" | "auto" | "required" | "named"
    name: str | None = None

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
    cls = validator_for(parameters, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(parameters)
    except SchemaError as e:
        raise BadRequest(f"Parameters of tool {name!r} are not a valid JSON schema: {e.message}",
                         param=f"{param}.function.parameters", code="invalid_tool_schema") from None
    return Tool(name, description or "", parameters, Schema(parameters), cls(parameters))


def normalize_tools(tools: Iterable[Any] | None) -> list[Tool]:
    """OpenAI `tools` (dicts or pydantic models) -> `Tool`s; raises BadRequest on bad input."""
    out: list[Tool] = []
    seen: set[str] = set()
    for i, raw in enumerate(tools or ()):
        if isinstance(raw, Tool):
            tool = raw
        else:
            spec = _as_dict(raw)
            if not isinstance(spec, Mapping):
                raise BadRequest(f"tools[{i}] must be an object.", param=f"tools[{i}]")
            if spec.get("type", "function") != "function":
                raise BadRequest(f"tools[{i}].type must be 'function'.", param=f"tools[{i}].type")
            fn = _as_dict(spec.get("function", spec))
            if not isinstance(fn, Mapping) or "name" not in fn:
                raise BadRequest(f"tools[{i}].function.name is required.", param=f"tools[{i}].function")
            tool = make_tool(fn.get("name"), fn.get("description") or "", _as_dict(fn.get("parameters")),
                             param=f"tools[{i}]")
        if tool.name in seen:
            raise BadRequest(f"Tool name {tool.name!r} is declared twice.", param="tools",
                             code="duplicate_tool_name")
        seen.add(tool.name)
        out.append(tool)
    return out


def normalize_tool_choice(choice: Any, tools: Sequence[Tool]) -> ToolChoice:
    """OpenAI `tool_choice` -> ToolChoice. No choice with tools means `auto`."""
    choice = _as_dict(choice)
    if choice is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(choice, str):
        if choice not in ("none", "auto", "required"):
            raise BadRequest(f"Invalid tool_choice {choice!r}.", param="tool_choice")
        if choice != "none" and not tools:
            raise BadRequest(f"tool_choice {choice!r} needs a non-empty tools list.", param="tool_choice")
        return ToolChoice(choice)
    if isinstance(choice, Mapping):
        fn = _as_dict(choice.get("function")) or {}
        name = fn.get("name") if isinstance(fn, Mapping) else None
        name = name or choice.get("name")
        if not isinstance(name, str):
            raise BadRequest("tool_choice.function.name is required.", param="tool_choice")
        if name not in {t.name for t in tools}:
            raise BadRequest(f"tool_choice names {name!r}, which is not in tools.", param="tool_choice",
                             code="unknown_tool")
        return ToolChoice("named", name)
    raise BadRequest("tool_choice must be a string or an object.", param="tool_choice")


def _as_dict(x: Any) -> Any:
    """Plain data from pydantic models (vLLM, llama-cpp-python) or dicts alike."""
    if hasattr(x, "model_dump"):
        return x.model_dump(exclude_none=True)
    return x


class Schema:
    """Read-only navigation of a JSON schema: which types a position allows, and its children.

    Used to coerce streamed argument values; unknown or unconstrained positions return None
    (anything goes), so coercion never guesses beyond what the schema says.
    """

    def __init__(self, root: Any):
        self.root = root

    def resolve(self, node: Any) -> Any:
        for _ in range(16):
            if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
                return node
            ref = node["$ref"]
            if not ref.startswith("#"):
                return {}
            target: Any = self.root
            for part in filter(None, ref[1:].split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
            node = target if target is not None else {}
        return {}

    def types(self, node: Any) -> frozenset[str] | None:
        """JSON types allowed at `node`, or None when unconstrained."""
        node = self.resolve(node)
        if not isinstance(node, dict):
            return None
        found: set[str] = set()
        t = node.get("type")
        if isinstance(t, str):
            found.add(t)
        elif isinstance(t, list):
            found.update(x for x in t if isinstance(x, str))
        for key in ("enum", "const"):
            if key in node:
                values = node[key] if key == "enum" and isinstance(node[key], list) else [node[key]]
                found.update(_json_type(v) for v in values)
        for key in ("anyOf", "oneOf"):
            subs = node.get(key)
            if isinstance(subs, list):
                for sub in subs:
                    st = self.types(sub)
                    if st is None:
                        return None
                    found |= st
        if not found:
            if "properties" in node:
                found.add("object")
            elif "items" in node or "prefixItems" in node:
                found.add("array")
            else:
                for sub in node.get("allOf") or ():
                    st = self.types(sub)
                    if st:
                        found |= st
        if not found:
            return None
        if node.get("nullable") is True:
            found.add("null")
        return frozenset(found & JSON_TYPES) or None

    def child(self, node: Any, key: str) -> Any:
        node = self.resolve(node)
        if not isinstance(node, dict):
            return None
        props = node.get("properties")
        if isinstance(props, dict) and key in props:
            return props[key]
        pats = node.get("patternProperties")
        if isinstance(pats, dict):
            for pat, sub in pats.items():
                try:
                    if re.search(pat, key):
                        return sub
                except re.error:
                    continue
        for comb in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(comb) or ():
                found = self.child(sub, key)
                if found is not None:
                    return found
        extra = node.get("additionalProperties")
        return extra if isinstance(extra, dict) else None

    def item(self, node: Any, index: int) -> Any:
        node = self.resolve(node)
        if not isinstance(node, dict):
            return None
        prefix = node.get("prefixItems")
        items = node.get("items")
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index]
        if isinstance(items, list):
            return items[index] if index < len(items) else node.get("additionalItems")
        if isinstance(items, dict):
            return items
        for comb in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(comb) or ():
                found = self.item(sub, index)
                if found is not None:
                    return found
        return None

    def enum(self, node: Any) -> list | None:
        node = self.resolve(node)
        if isinstance(node, dict) and isinstance(node.get("enum"), list):
            return node["enum"]
        return None


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def check_tool_results(messages: Iterable[Any]) -> None:
    """OpenAI's rule for history: a `tool` message answers a call an earlier assistant turn
    made (matched by tool_call_id); anything else is a bad request, not a prompt."""
    ids: set[str] = set()
    for i, m in enumerate(messages or ()):
        m = _as_dict(m)
        if not isinstance(m, Mapping):
            continue
        if m.get("role") == "assistant":
            ids.update(_as_dict(tc).get("id") for tc in m.get("tool_calls") or () if isinstance(_as_dict(tc), Mapping))
        elif m.get("role") == "tool" and m.get("tool_call_id") not in ids:
            raise BadRequest(f"messages[{i}] is a tool result for {m.get('tool_call_id')!r}, but no earlier assistant "
                             "message made a tool call with that id.", param=f"messages[{i}].tool_call_id",
                             code="invalid_tool_call_id")
