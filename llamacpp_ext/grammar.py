"""Tool schemas -> GBNF, and the compile check every grammar passes before generation.

The JSON rules come from llama-cpp-python's own `SchemaConverter`, subclassed where it
falls short on real tool schemas (each override says what it fixes). The call frames around
them (markers, name, root) come from the core (`toolbridge.grammar.gbnf`).

llama.cpp parses a grammar only when sampling starts, and an invalid one crashes the whole
process there; so every grammar is compiled once with llama.cpp's own parser first
(`compiles`), and a grammar that fails falls back to generic-object arguments, then to none.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import threading
from collections import OrderedDict
from typing import Any, Sequence

import llama_cpp
from llama_cpp.llama_grammar import (INVALID_RULE_CHARS_RE, JSON_GBNF, PRIMITIVE_RULES, RESERVED_NAMES,
                                     BuiltinRule, LlamaGrammar, SchemaConverter)
from toolbridge.dialects import Dialect
from toolbridge.grammar import engine_schema, gbnf, relax
from toolbridge.tools import Tool, ToolChoice

from .regex import Unsupported, pattern_to_gbnf

log = logging.getLogger("toolbridge.llamacpp")

# One JSON string character: the stock rule lets raw newlines, tabs and other control
# characters through, which strict JSON parsers reject.
CHAR_RULE = BuiltinRule(r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})', [])
MAX_DIGITS = 16  # as the stock integer rule: at most 16 digits
# Keywords the stock converter acts on; a schema with none of them (and no type) is "any value".
_STRUCTURAL = ("$ref", "anyOf", "oneOf", "allOf", "const", "enum", "properties", "additionalProperties",
               "items", "prefixItems", "pattern", "format", "type")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


class ToolSchemaConverter(SchemaConverter):
    """llama-cpp-python's converter, fixed for real-world tool schemas.

    One instance converts all the tools of a request, so helper rules are shared; each schema
    resolves its `$ref`s under its own prefix, so equal definition names do not collide.
    """

    def __init__(self) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._ref_names: dict[str, str] = {}

    # -- literals: the stock version does not escape backslashes or control characters ------
    def _format_literal(self, literal: str) -> str:
        return json.dumps(literal, ensure_ascii=False)

    # -- primitives: strict JSON strings -----------------------------------------------------
    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        if name == "char":
            rule = CHAR_RULE
        return super()._add_primitive(name, rule)

    # -- $ref: every local ref rewritten (the stock one skips refs under a root-level $ref),
    # and rule names per schema (the stock one names a definition by its last path part) ----
    def resolve_refs(self, schema: Any, url: str) -> Any:
        def pointer(path: str) -> Any:
            target = schema
            for part in filter(None, path.split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                if isinstance(target, list) and part.isdigit() and int(part) < len(target):
                    target = target[int(part)]
                elif isinstance(target, dict) and part in target:
                    target = target[part]
                else:
                    raise ValueError(f"cannot resolve $ref #{path}")
            return target

        def walk(node: Any) -> None:
            if isinstance(node, list):
                for x in node:
                    walk(x)
            elif isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    if not ref.startswith("#"):
                        raise ValueError(f"unsupported $ref {ref!r}")
                    full = url + ref
                    node["$ref"] = full
                    self._refs[full] = pointer(ref[1:])
                for key, value in node.items():
                    if key != "$ref":
                        walk(value)

        walk(schema)
        return schema

    def _resolve_ref(self, ref: str) -> str:
        name = self._ref_names.get(ref)
        if name is None:
            base = INVALID_RULE_CHARS_RE.sub("-", ref.split("#")[0] + "-ref-" + ref.split("/")[-1]).strip("-")
            name, i = base, 0
            while name in self._rules or name in RESERVED_NAMES or name in self._ref_names.values():
                i += 1
                name = f"{base}{i}"
            self._ref_names[ref] = name
            got = self.visit(self._refs[ref], name)
            if got != name:
                self._rules[name] = got
        return name

    # -- patterns: translated from Python's parse of the regex (see regex.py) ----------------
    def _visit_pattern(self, pattern: str, name: str) -> str:
        char = self._add_primitive("char", PRIMITIVE_RULES["char"])
        try:
            body = pattern_to_gbnf(pattern, any_char=char)
        except Unsupported as e:
            log.info("toolbridge: pattern %r is not constrained (%s)", pattern, e)
            return self._add_rule(name, self._add_primitive("string", PRIMITIVE_RULES["string"]))
        return self._add_rule(name, r'"\"" ' + body + r' "\"" space')

    # -- the schema walk -----------------------------------------------------------------------
    def visit(self, schema: Any, name: str) -> str:
        rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
        if not isinstance(schema, dict):  # boolean schemas: true (and, unsatisfiable, false)
            return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))
        if "allOf" in schema:
            return self.visit(self._merge_all_of(schema), name)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                siblings = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "description")}
                if not schema[key]:
                    raise ValueError(f"empty {key}")
                if siblings:  # the stock converter drops keywords beside anyOf/oneOf
                    return self.visit({key: [_merge(self._deref(b), siblings) for b in schema[key]]}, name)
        if "enum" in schema and not schema["enum"]:
            raise ValueError("empty enum")
        t = schema.get("type")
        if t is None and not any(k in schema for k in _STRUCTURAL):
            if "minLength" in schema or "maxLength" in schema:
                return self.visit({**schema, "type": "string"}, name)
            if any(k in schema for k in _BOUNDS):
                return self.visit({**schema, "type": "number"}, name)
            # untyped ({} or only a description): any JSON value; stock: object, or an error
            return self._add_rule(rule_name, self._add_primitive("value", PRIMITIVE_RULES["value"]))
        if t in ("integer", "number") and "enum" not in schema and "const" not in schema \
                and any(k in schema for k in _BOUNDS):
            rule = _number_rule(schema, integer=t == "integer")
            if rule is not None:
                self._add_primitive("decimal-part", PRIMITIVE_RULES["decimal-part"])
                return self._add_rule(rule_name, rule + " space")
        if t in (None, "object") and schema.get("required") and not isinstance(schema.get("properties"), dict):
            schema = {**schema, "properties": {}}
        if t in (None, "object") and isinstance(schema.get("properties"), dict):
            missing = [k for k in schema.get("required", ()) if k not in schema["properties"]]
            if missing:  # required but undeclared: stock leaves them out, so the object fails
                schema = {**schema, "properties": {**schema["properties"], **{k: {} for k in missing}}}
        return super().visit(schema, name)

    def _deref(self, node: Any) -> Any:
        for _ in range(32):
            if isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"] in self._refs:
                rest = {k: v for k, v in node.items() if k != "$ref"}
                node = _merge(rest, self._refs[node["$ref"]]) if rest else self._refs[node["$ref"]]
            else:
                return node
        raise ValueError("$ref cycle in allOf")

    def _merge_all_of(self, schema: dict) -> dict:
        """allOf -> one schema (stock merges only object properties, and turns any other part
        into an empty object)."""
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = self._deref(part)
            if isinstance(part, dict) and "allOf" in part:
                part = self._merge_all_of(part)
            merged = _merge(merged, part)
        return merged


def _merge(a: Any, b: Any) -> Any:
    """Both schemas at once, as far as a grammar needs: properties and required combined,
    other keywords from `b` where `a` lacks them."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return b if isinstance(a, dict) and not a else a
    out = dict(a)
    for k, v in b.items():
        if k == "properties" and isinstance(out.get(k), dict) and isinstance(v, dict):
            props = dict(out[k])
            for pk, pv in v.items():
                props[pk] = _merge(props[pk], pv) if pk in props else pv
            out[k] = props
        elif k == "required" and isinstance(out.get(k), list) and isinstance(v, list):
            out[k] = list(dict.fromkeys(out[k] + v))
        elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems") and isinstance(out.get(k), (int, float)):
            out[k] = max(out[k], v)
        elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems") and isinstance(out.get(k), (int, float)):
            out[k] = min(out[k], v)
        elif k not in out:
            out[k] = v
    return out


# -- numbers with bounds (the stock converter ignores minimum/maximum) ----------------------

def _number_rule(schema: dict, integer: bool) -> str | None:
    """GBNF for an integer or number within the schema's bounds (a subset for numbers:
    no exponent, fractions only where the whole [I, I+1) interval fits)."""
    lo, lo_x = _bound(schema, "minimum", "exclusiveMinimum", max)
    hi, hi_x = _bound(schema, "maximum", "exclusiveMaximum", min)
    ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
    ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
    alts = []
    ints = _int_range(ilo, ihi)
    if ints:
        alts.append(ints)
    if not integer:
        # I + F with 0 <= F < 1, I >= 0: needs I >= lo (or > lo) and I + 1 <= hi
        pos = _uint_range(max(ilo if ilo is not None else 0, 0), None if hi is None else math.floor(hi) - 1)
        if pos:
            alts.append(f'{pos} "." decimal-part')
        # -(I + F): needs -(I + 1) >= lo and -I <= hi (or < hi)
        nlo = 0 if hi is None else max(0, (math.floor(-hi) + 1) if hi_x else math.ceil(-hi))
        neg = _uint_range(nlo, None if lo is None else math.floor(-lo) - 1)
        if neg:
            alts.append(f'"-" {neg} "." decimal-part')
    if not alts:
        return None
    return "( " + " | ".join(alts) + " )"


def _bound(schema: dict, inclusive: str, exclusive: str, pick) -> tuple[float | None, bool]:
    values: list[tuple[float, bool]] = []
    v = schema.get(inclusive)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if schema.get(exclusive) is True:  # draft 4: a boolean beside the bound
            values.append((v, True))
        else:
            values.append((v, False))
    x = schema.get(exclusive)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        values.append((x, True))
    if not values:
        return None, False
    best = pick(v for v, _ in values)
    return best, any(v == best and e for v, e in values)


def _int_range(lo: int | None, hi: int | None) -> str | None:
    """Decimal integers in [lo, hi] (None: unbounded), without leading zeros."""
    if lo is not None and hi is not None and lo > hi:
        return None
    alts = []
    if lo is None or lo < 0:  # negatives: "-" then magnitudes in [max(1, -hi), -lo]
        neg = _uint_range(max(1, -hi) if hi is not None else 1, None if lo is None else -lo)
        if neg:
            alts.append(f'"-" {neg}')
    if hi is None or hi >= 0:
        pos = _uint_range(max(lo, 0) if lo is not None else 0, hi)
        if pos:
            alts.append(pos)
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"


def _uint_range(lo: int, hi: int | None) -> str | None:
    """Decimal naturals in [lo, hi] (hi None: up to MAX_DIGITS digits)."""
    if hi is not None and lo > hi:
        return None
    d_lo = len(str(lo))
    if d_lo > MAX_DIGITS:
        return None
    d_hi = MAX_DIGITS if hi is None else min(len(str(hi)), MAX_DIGITS)
    alts = []
    for d in range(d_lo, d_hi + 1):
        a = max(lo, 10 ** (d - 1) if d > 1 else 0)
        b = 10 ** d - 1 if hi is None else min(hi, 10 ** d - 1)
        if hi is None and d > d_lo:  # every longer number: one rule for all lengths
            alts.append(f"[1-9] [0-9]{{{d - 1},{MAX_DIGITS - 1}}}")
            break
        if a <= b:
            alts.append(_same_length(str(a), str(b)))
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"


def _same_length(a: str, b: str) -> str:
    """Digit strings of one length between a and b."""
    if not a:
        return ""
    if a == b:
        return json.dumps(a)
    n = len(a) - 1
    if a[0] == b[0]:
        return f'"{a[0]}" ' + _same_length(a[1:], b[1:])
    if a[1:] == "0" * n and b[1:] == "9" * n:
        return f"[{a[0]}-{b[0]}]" + " [0-9]" * n
    alts = [f'"{a[0]}" ' + _same_length(a[1:], "9" * n) if n else f'"{a[0]}"']
    if int(b[0]) - int(a[0]) > 1:
        alts.append(f"[{int(a[0]) + 1}-{int(b[0]) - 1}]" + " [0-9]" * n)
    alts.append(f'"{b[0]}" ' + _same_length("0" * n, b[1:]) if n else f'"{b[0]}"')
    return "( " + " | ".join(x.strip() for x in alts) + " )"


# -- the SchemaRules callables the core's gbnf() takes ----------------------------------------

def schema_rules(pairs: list[tuple[str, dict]]) -> str:
    """GBNF rules for each (rule name, tool parameter schema), through one converter."""
    conv = ToolSchemaConverter()
    for name, schema in pairs:
        schema = conv.resolve_refs(copy.deepcopy(schema), name)
        if isinstance(schema, dict) and not any(k in schema for k in _STRUCTURAL):
            schema = {**schema, "type": "object"}  # tool arguments are always an object
        got = conv.visit(schema, name)
        if got != name:
            conv._rules[name] = got
    return conv.format_grammar()


def schema_grammar(schema: dict) -> str:
    """A whole-answer grammar for one JSON schema (response_format json_object)."""
    conv = ToolSchemaConverter()
    schema = conv.resolve_refs(engine_schema(schema), "schema")
    got = conv.visit(schema, "")
    if got != "root":
        conv._rules["root"] = got
    return conv.format_grammar()


# -- compile check and caching -------------------------------------------------------------------

def compiles(llama: llama_cpp.Llama, grammar: str, root: str = "root") -> bool:
    """Whether llama.cpp's grammar parser accepts `grammar` (it logs the error if not)."""
    ptr = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode("utf-8"), root.encode("utf-8"))
    if ptr:
        llama_cpp.llama_sampler_free(ptr)
    return bool(ptr)


# What llama-cpp-python's converter raises on schemas it cannot take (asserts included).
_CONVERSION_ERRORS = (ValueError, AssertionError, KeyError, TypeError, RecursionError)
_CACHE: "OrderedDict[tuple, LlamaGrammar | None]" = OrderedDict()
_LOCK = threading.Lock()
_CACHE_SIZE = 128


def _cached(key: tuple, build) -> Any:
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    value = build()
    with _LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return value


def tool_grammar(llama: llama_cpp.Llama, tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice, *,
                 parallel: bool, after_trigger: bool) -> LlamaGrammar | None:
    """The checked grammar for calls (strict, or the lazy continuation after the trigger):
    schema-exact; else with the tools whose schema fails relaxed to generic-object arguments;
    else None (unconstrained). Each fallback is logged with its reason."""
    key = ("tools", id(llama._model), json.dumps([(t.name, t.parameters) for t in tools], sort_keys=True),
           dialect.name, choice.mode, choice.name, parallel, after_trigger)

    def attempt(candidates: Sequence[Tool], what: str, only: ToolChoice = choice) -> str | None:
        try:
            text = gbnf(candidates, dialect, only, schema_rules, parallel=parallel, after_trigger=after_trigger)
        except _CONVERSION_ERRORS as e:
            log.warning("toolbridge: %s: no grammar (%s: %s)", what, type(e).__name__, e)
            return None
        if not compiles(llama, text):
            log.warning("toolbridge: %s: llama.cpp rejected the grammar", what)
            return None
        return text

    def build() -> LlamaGrammar | None:
        text = attempt(tools, "tool schemas")
        if text is None:
            relaxed = relax(tools, lambda t: attempt([t], f"tool {t.name!r}", ToolChoice("named", t.name)) is not None)
            text = attempt(relaxed, "tool schemas with generic-object fallbacks")
        if text is None:
            log.warning("toolbridge: tool calls are generated without a grammar")
            return None
        return LlamaGrammar.from_string(text, verbose=False)

    return _cached(key, build)


def response_grammar(llama: llama_cpp.Llama, response_format: Any) -> LlamaGrammar | None:
    """The grammar for a json_object response_format (with or without a schema)."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_object":
        return None
    schema = response_format.get("schema")
    if not isinstance(schema, dict):
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    key = ("response", id(llama._model), json.dumps(schema, sort_keys=True))

    def build() -> LlamaGrammar:
        try:
            text = schema_grammar(schema)
            if compiles(llama, text):
                return LlamaGrammar.from_string(text, verbose=False)
            log.warning("toolbridge: llama.cpp rejected the response_format grammar; using generic JSON")
        except _CONVERSION_ERRORS as e:
            log.warning("toolbridge: response_format schema not converted (%s); using generic JSON", e)
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)

    return _cached(key, build)
