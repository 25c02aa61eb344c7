"""JSON schemas of tool parameters: `$ref` resolution, navigation, and the engine subset.

- `resolve_ref` is the one `$ref` lookup (local JSON pointers); `check_refs` runs it over a
  whole schema when a tool is declared, so a dangling or remote reference is a bad request
  naming the tool, never an error while a call is being parsed.
- `Schema` navigates a schema for coercion of streamed argument values.
- `engine_schema` rewrites a schema into the subset the engines' grammar converters share.
- `strict_error` checks a `strict: true` tool's schema against OpenAI's two rules for strict mode.
"""
from __future__ import annotations

import re
from typing import Any, Iterator

JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "null", "array", "object"})
MAX_REF_HOPS = 32  # a $ref chain longer than this is a cycle of references with no schema in it


class RefError(ValueError):
    """A `$ref` that does not resolve inside its schema."""


def resolve_ref(root: Any, ref: str) -> Any:
    """The node a local `$ref` ("#/$defs/Node", "#/properties/a/items/0") points to in `root`."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise RefError(f"$ref {ref!r} is not a local reference (only '#/...' references are supported)")
    target = root
    for part in filter(None, ref[1:].split("/")):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        elif isinstance(target, dict) and part in target:
            target = target[part]
        else:
            raise RefError(f"$ref {ref!r} points to nothing in the schema")
    return target


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_NOT_SCHEMAS = ("enum", "const", "default", "examples")


def refs(node: Any) -> Iterator[str]:
    """Every `$ref` value in a schema (property names and literal values are not schemas)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            for k, v in node.items():
                if k == "$ref":
                    if isinstance(v, str):
                        yield v
                elif k in _SCHEMA_MAPS and isinstance(v, dict):
                    stack.extend(v.values())
                elif k not in _NOT_SCHEMAS:
                    stack.append(v)


def check_refs(root: Any) -> None:
    """Raise RefError unless every `$ref` in `root` resolves to a schema inside it; a cycle of
    references (a `$ref` to a `$ref` ... back to itself) never reaches one."""
    for ref in set(refs(root)):
        node, hops = resolve_ref(root, ref), 0
        while isinstance(node, dict) and "$ref" in node and len(node) == 1:
            hops += 1
            if hops > MAX_REF_HOPS:
                raise RefError(f"$ref {ref!r} is a cycle of references")
            node = resolve_ref(root, node["$ref"])


def json_type(v: Any) -> str:
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


class Schema:
    """Read-only navigation of a JSON schema: which types a position allows, and its children.

    Used to coerce streamed argument values; unknown or unconstrained positions return None
    (anything goes), so coercion never guesses beyond what the schema says.
    """

    def __init__(self, root: Any):
        self.root = root

    def resolve(self, node: Any) -> Any:
        for _ in range(MAX_REF_HOPS):
            if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
                return node
            try:
                node = resolve_ref(self.root, node["$ref"])
            except RefError:
                return {}
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
                found.update(json_type(v) for v in values)
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


# -- the subset the engines' grammar converters share -------------------------------------------

_ANNOTATIONS = ("title", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly", "$schema", "$id")
_BY_TYPE = {"string": ("minLength", "maxLength", "pattern", "format", "enum", "const"),
            "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum", "const"),
            "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
            "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
                       "maxProperties", "propertyNames")}
_BY_TYPE["integer"] = _BY_TYPE["number"]
_COMMON = ("description", "$defs", "definitions")


def engine_schema(schema: Any) -> Any:
    """A parameter schema in the subset grammar converters share: OpenAPI's `nullable`, and
    `type` lists, become `anyOf`; keywords that only annotate are dropped. Every object and
    list on the way is new; values it does not rewrite (enum lists, constants) are shared."""
    return _normalize(schema)


def _normalize(node: Any) -> Any:
    if isinstance(node, list):
        return [_normalize(x) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: v for k, v in node.items() if k not in _ANNOTATIONS}
    for key in ("properties", "patternProperties", "$defs", "definitions"):
        if isinstance(node.get(key), dict):
            node[key] = {k: _normalize(v) for k, v in node[key].items()}
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
        if isinstance(node.get(key), (dict, list)):
            node[key] = _normalize(node[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            node[key] = [_normalize(x) for x in node[key]]
    nullable = node.pop("nullable", False) is True
    types = node.get("type")
    if isinstance(types, list):
        types = [t for t in types if isinstance(t, str)]
        if "null" in types:
            nullable = True
            types = [t for t in types if t != "null"]
        if len(types) == 1:
            node["type"] = types[0]
        elif types:
            rest = {k: v for k, v in node.items() if k != "type"}
            node = {"anyOf": [_only(dict(rest, type=t), t) for t in types]}
        else:
            node.pop("type")
    if nullable and node.get("type") != "null":
        if "enum" in node and None not in node["enum"]:
            node["enum"] = list(node["enum"]) + [None]
        else:
            node = {"anyOf": [node, {"type": "null"}]}
    return node


def _only(node: dict, t: str) -> dict:
    """The keywords of `node` that apply to type `t` (one branch of a split type list)."""
    keep = set(_BY_TYPE.get(t, ())) | set(_COMMON) | {"type"}
    return {k: v for k, v in node.items() if k in keep}


def strict_error(schema: Any, where: str = "") -> str | None:
    """Where `schema` breaks OpenAI's rules for a strict tool, in its words, or None: every object
    sets `additionalProperties: false` and lists every one of its properties as required. Read
    through properties, items, anyOf and the definitions (what strict mode allows)."""
    if not isinstance(schema, dict):
        return None
    types = schema.get("type")
    if types == "object" or (isinstance(types, list) and "object" in types) or "properties" in schema:
        context = where or "()"
        if schema.get("additionalProperties") is not False:
            return f"In context={context}, 'additionalProperties' is required to be supplied and to be false."
        missing = [k for k in schema.get("properties") or {} if k not in (schema.get("required") or [])]
        if missing:
            return (f"In context={context}, 'required' is required to be supplied and to be an array including "
                    f"every key in properties. Missing {missing[0]!r}.")
    parts = [(f"{where}/properties/{k}", v) for k, v in (schema.get("properties") or {}).items()]
    parts += [(f"{where}/{key}/{k}", v) for key in ("$defs", "definitions") for k, v in (schema.get(key) or {}).items()]
    items = schema.get("items")
    parts += [(f"{where}/items/{i}", v) for i, v in enumerate(items)] if isinstance(items, list) else [
        (f"{where}/items", items)]
    parts += [(f"{where}/anyOf/{i}", v) for i, v in enumerate(schema.get("anyOf") or ())]
    for at, part in parts:
        error = strict_error(part, at)
        if error is not None:
            return error
    return None
