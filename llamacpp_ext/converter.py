"""Tool parameter schemas -> GBNF rules, through llama-cpp-python's own converter.

`ToolSchemaConverter` subclasses llama-cpp-python's `SchemaConverter` (via compat.ConverterBase)
where it falls short on real tool schemas; each override says what it fixes. The call frames
around the rules come from grammar.py.
"""
from __future__ import annotations

import copy
import logging
import math
from typing import Any

from toolbridge.engine import Unsupported, engine_schema, json_string, pattern_to_gbnf, resolve_ref

from .compat import INVALID_RULE_CHARS_RE, RESERVED_NAMES, BuiltinRule, ConverterBase

log = logging.getLogger("toolbridge.llamacpp")

# One JSON string character: the stock rule lets raw newlines, tabs and other control
# characters through, which strict JSON parsers reject.
CHAR_RULE = BuiltinRule(r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})', [])
MAX_DIGITS = 16  # as the stock integer rule: at most 16 digits
# Keywords the stock converter acts on; a schema with none of them (and no type) is "any value".
_STRUCTURAL = ("$ref", "anyOf", "oneOf", "allOf", "const", "enum", "properties", "additionalProperties",
               "items", "prefixItems", "pattern", "format", "type")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


class ToolSchemaConverter(ConverterBase):
    """llama-cpp-python's converter, fixed for real-world tool schemas.

    One instance converts all the tools of a request, so helper rules are shared; each schema
    resolves its `$ref`s under its own prefix, so equal definition names do not collide.
    """

    def __init__(self) -> None:
        super().__init__()
        self._ref_names: dict[str, str] = {}

    # -- literals: the stock version does not escape backslashes or control characters ------
    def format_literal(self, literal: str) -> str:
        return json_string(literal)

    # -- primitives: strict JSON strings -----------------------------------------------------
    def primitive_rule(self, name: str, rule: BuiltinRule) -> BuiltinRule:
        return CHAR_RULE if name == "char" else rule

    # -- $ref: every local ref rewritten (the stock one skips refs under a root-level $ref),
    # and rule names per schema (the stock one names a definition by its last path part) ----
    def resolve_refs(self, schema: Any, url: str) -> Any:
        def walk(node: Any) -> None:
            if isinstance(node, list):
                for x in node:
                    walk(x)
            elif isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    full = url + ref
                    node["$ref"] = full
                    self.set_ref_target(full, resolve_ref(schema, ref))
                for key, value in node.items():
                    if key != "$ref":
                        walk(value)

        walk(schema)
        return schema

    def resolve_ref(self, ref: str) -> str:
        name = self._ref_names.get(ref)
        if name is None:
            base = INVALID_RULE_CHARS_RE.sub("-", ref.split("#")[0] + "-ref-" + ref.split("/")[-1]).strip("-")
            name, i = base, 0
            while self.has_rule(name) or name in RESERVED_NAMES or name in self._ref_names.values():
                i += 1
                name = f"{base}{i}"
            self._ref_names[ref] = name
            got = self.visit(self.ref_target(ref), name)
            if got != name:
                self.set_rule(name, got)
        return name

    # -- patterns: translated from Python's parse of the regex (toolbridge.constrain.pattern) ----------------
    def visit_pattern(self, pattern: str, name: str) -> str:
        char = self.primitive("char")
        try:
            body = pattern_to_gbnf(pattern, any_char=char)
        except Unsupported as e:
            log.info("toolbridge: pattern %r is not constrained (%s)", pattern, e)
            return self.add_rule(name, self.primitive("string"))
        return self.add_rule(name, r'"\"" ' + body + r' "\"" space')

    # -- the schema walk -----------------------------------------------------------------------
    def visit(self, schema: Any, name: str) -> str:
        rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
        if not isinstance(schema, dict):  # boolean schemas: true (and, unsatisfiable, false)
            return self.add_rule(rule_name, self.primitive("value"))
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
            return self.add_rule(rule_name, self.primitive("value"))
        if t in ("integer", "number") and "enum" not in schema and "const" not in schema \
                and any(k in schema for k in _BOUNDS):
            rule = _number_rule(schema, integer=t == "integer")
            if rule is not None:
                self.primitive("decimal-part")
                return self.add_rule(rule_name, rule + " space")
        if t in (None, "object") and schema.get("required") and not isinstance(schema.get("properties"), dict):
            schema = {**schema, "properties": {}}
        if t in (None, "object") and isinstance(schema.get("properties"), dict):
            missing = [k for k in schema.get("required", ()) if k not in schema["properties"]]
            if missing:  # required but undeclared: stock leaves them out, so the object fails
                schema = {**schema, "properties": {**schema["properties"], **{k: {} for k in missing}}}
        return super().visit(schema, name)

    def _deref(self, node: Any) -> Any:
        for _ in range(32):
            target = self.ref_target(node["$ref"]) if isinstance(node, dict) and isinstance(node.get("$ref"), str) else None
            if target is not None:
                rest = {k: v for k, v in node.items() if k != "$ref"}
                node = _merge(rest, target) if rest else target
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
        return json_string(a)
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
            conv.set_rule(name, got)
    return conv.format_grammar()


def schema_grammar(schema: dict) -> str:
    """A whole-answer grammar for one JSON schema (response_format json_object)."""
    conv = ToolSchemaConverter()
    schema = conv.resolve_refs(copy.deepcopy(engine_schema(schema)), "schema")  # it rewrites $refs in place
    got = conv.visit(schema, "")
    if got != "root":
        conv.set_rule("root", got)
    return conv.format_grammar()
