"""Constraints from tool schemas, for both engines, built from the dialect's call frame.

A call in any dialect is `begin(name) + arguments JSON + end`; the JSON is constrained by
the tool's parameter schema. From those frames:

- `structural_tag`: xgrammar's structural tag for vLLM. `auto` is lazy (triggered by the
  dialect's start marker, text is free until then); `required` and named choices are strict
  (the answer is one or more calls and nothing else).
- `gbnf`: a GBNF grammar for llama.cpp, strict, or only the part after the trigger for the
  lazy `auto` path; the JSON rules come from a schema converter the caller passes in (the
  engine's own), so the core stays free of engine imports.

Whitespace inside constrained JSON is bounded: a weak model given unbounded whitespace can
fill max_tokens with newlines.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .dialects import Dialect
from .tools import Tool, ToolChoice

MAX_WHITESPACE = 2


@dataclass(frozen=True)
class Frame:
    name: str
    begin: str
    schema: dict
    end: str


def frames(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice | None = None) -> list[Frame]:
    """The call frame of every tool the choice allows, in this dialect."""
    allowed = [t for t in tools if choice is None or choice.mode != "named" or t.name == choice.name]
    wrap = dialect.wrap_single
    out = []
    for t in allowed:
        begin = (dialect.calls_open if wrap else "") + dialect.call[0] + t.name + dialect.call[1]
        end = dialect.call[2] + (dialect.calls_close if wrap else "")
        out.append(Frame(t.name, begin, engine_schema(t.parameters), end))
    return out


GENERIC_OBJECT: dict = {"type": "object"}


def relax(tools: Sequence[Tool], accepts: Callable[[Tool], bool]) -> list[Tool]:
    """The tools for a grammar, where a schema the engine cannot take is replaced by a generic
    object: the call's frame stays constrained, and the parser still checks the arguments
    against the real schema (validation uses the tool's own validator)."""
    return [t if accepts(t) else dataclasses.replace(t, parameters=GENERIC_OBJECT) for t in tools]


def separator(dialect: Dialect) -> str:
    """Between strict calls: nothing (a newline would commit a weak model to another call;
    with nothing between, it ends after a call unless it means to go on), except where the
    start marker must begin a line."""
    return "\n" if dialect.line_start else ""


def structural_tag(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice, parallel: bool = True,
                   max_whitespace: int = MAX_WHITESPACE) -> dict:
    """xgrammar structural tag (vLLM `structured_outputs.structural_tag`)."""
    tags = [{"type": "tag", "begin": f.begin,
             "content": {"type": "json_schema", "json_schema": f.schema, "max_whitespace_cnt": max_whitespace},
             "end": f.end} for f in frames(tools, dialect, choice)]
    if choice.mode == "auto":
        fmt = {"type": "triggered_tags", "triggers": [dialect.grammar_trigger], "tags": tags,
               "at_least_one": False, "stop_after_first": not parallel}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": separator(dialect),
               "at_least_one": True, "stop_after_first": not parallel or choice.mode == "named"}
    return {"type": "structural_tag", "format": fmt}


def engine_schema(schema: Any) -> Any:
    """A copy of a parameter schema in the subset grammar converters share: OpenAPI's
    `nullable`, and `type` lists, become `anyOf`; keywords that only annotate are dropped."""
    return _normalize(copy.deepcopy(schema))


_ANNOTATIONS = ("title", "examples", "default", "$comment", "deprecated", "readOnly", "writeOnly", "$schema", "$id")


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


_BY_TYPE = {"string": ("minLength", "maxLength", "pattern", "format", "enum", "const"),
            "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum", "const"),
            "array": ("items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"),
            "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
                       "maxProperties", "propertyNames")}
_BY_TYPE["integer"] = _BY_TYPE["number"]
_COMMON = ("description", "$defs", "definitions")


def _only(node: dict, t: str) -> dict:
    """The keywords of `node` that apply to type `t` (one branch of a split type list)."""
    keep = set(_BY_TYPE.get(t, ())) | set(_COMMON) | {"type"}
    return {k: v for k, v in node.items() if k in keep}


# -- GBNF -----------------------------------------------------------------------------------

SchemaRules = Callable[[list[tuple[str, dict]]], str]
"""[(rule name, schema), ...] -> GBNF rules defining those rule names (and any helpers they
use; never `root` or `tb-call`): the engine's JSON-schema converter."""


def gbnf_literal(text: str) -> str:
    """A GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


def gbnf(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice, schema_rules: SchemaRules, *,
         parallel: bool = True, after_trigger: bool = False) -> str:
    """A GBNF grammar for calls in `dialect`.

    Strict (after_trigger=False): the whole answer is one call, or several when parallel. Lazy (after_trigger=True): the text that follows the dialect's trigger,
    for generation continued from a prompt that ends with the trigger; one call.
    """
    trigger = dialect.grammar_trigger
    pairs: list[tuple[str, dict]] = []
    alts = []
    for i, f in enumerate(frames(tools, dialect, choice)):
        if after_trigger and not f.begin.startswith(trigger):
            raise ValueError(f"dialect {dialect.name!r}: trigger {trigger!r} does not start the call")
        begin = f.begin[len(trigger):] if after_trigger else f.begin
        pairs.append((f"tb-args{i}", f.schema))
        alts.append(f"( {gbnf_literal(begin)} tb-args{i} {gbnf_literal(f.end)} )")
    if not alts:
        raise ValueError("no tool can be called")
    rules = [schema_rules(pairs).rstrip("\n"), "tb-call ::= " + " | ".join(alts)]
    sep = separator(dialect)
    if after_trigger or not parallel:
        rules.append("root ::= tb-call")
    else:
        rules.append(f"root ::= tb-call ( {gbnf_literal(sep)} tb-call )*" if sep else "root ::= tb-call+")
    return "\n".join(rules) + "\n"
