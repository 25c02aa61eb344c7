"""The value formats a string argument's description states by example, as a `pattern`.

Tool authors state a string's format in prose: "in the format of 'City, State' (e.g., 'Austin,
TX')", "formatted as 'YYYY-MM-DD'". A small model reads past it and writes `"Berkeley"` or
`"March 12"`. What the quoted examples share is their separators: the commas, dashes and colons
between the parts. When every example in a description has them, the argument's grammar
(`stated`, used for `Tool.engine_parameters` only) asks for the same separators in the same order,
and leaves the parts free up to MAX_PART characters each: `"Berkeley"` cannot close until a comma
has come, and the model writes `"Berkeley, CA"`.

A description whose quotes include one without separators ('City' for a city with no state,
'dontcare', 'null') or one with a slash (paths and URLs, whose depth varies), a string default
without separators, an `enum`, `const`, `format` or `pattern` of its own: no pattern is added, the
argument is as free as before. Calls are still validated against the tool's own schema, which this
never changes.
"""
from __future__ import annotations

import re
from typing import Any

SEPARATORS = ",-:"
MAX_PART = 32  # characters between separators: a model that will not write them cannot run on to max_tokens
# A quoted span: opened after a space, bracket or the start, closed before a non-word character;
# an apostrophe inside a word ("the user's") opens nothing.
_QUOTED = re.compile(r"""(?:(?<=[\s(\[:=])|^)(['"`])([^'"`\n]{1,60}?)\1(?!\w)""")
_HAS_ALNUM = re.compile(r"\w")


def quoted(description: Any) -> list[str]:
    """The quoted spans of a description that hold a letter or digit (examples and format
    names: 'Austin, TX', 'YYYY-MM-DD'; a quoted ',' names a character, not a value)."""
    if not isinstance(description, str):
        return []
    return [m.group(2) for m in _QUOTED.finditer(description) if _HAS_ALNUM.search(m.group(2))]


def skeleton(text: str) -> str:
    """The separators of a value, in order: 'New York, NY' -> ',', '2024-03-19 10:00' -> '--:'."""
    return "".join(c for c in text if c in SEPARATORS)


def stated_pattern(spec: Any) -> str | None:
    """The pattern a string argument's description states by example, or None: every quoted
    example has separators, and so does its string default."""
    if not isinstance(spec, dict) or spec.get("type") != "string":
        return None
    if any(k in spec for k in ("enum", "const", "format", "pattern")):
        return None
    examples = quoted(spec.get("description"))
    if isinstance(spec.get("default"), str):
        examples.append(spec["default"])
    shapes = sorted({skeleton(e) for e in examples})
    if not shapes or "" in shapes or any("/" in e for e in examples):
        return None
    seps = "".join(re.escape(c) for c in sorted(set("".join(shapes))))
    parts = [p for e in examples for p in re.split(f"[{seps}]", e)]
    # every example stays writable: parts may be empty, or longer than MAX_PART, where an example's are
    cls = f"[^{seps}]{{{1 if all(parts) else 0},{max(MAX_PART, *map(len, parts))}}}"
    alts = [cls + "".join(re.escape(c) + cls for c in shape) for shape in shapes]
    return "^" + (alts[0] if len(alts) == 1 else "(" + "|".join(alts) + ")") + "$"


def stated(schema: Any) -> Any:
    """A copy of a parameter schema with each string property's stated pattern added (properties
    and array items, at any depth); nodes without one are shared, not copied."""
    if not isinstance(schema, dict):
        return schema
    out = schema
    pattern = stated_pattern(schema)
    if pattern:
        out = dict(schema, pattern=pattern)
    props = schema.get("properties")
    if isinstance(props, dict):
        new = {k: stated(v) for k, v in props.items()}
        if any(new[k] is not props[k] for k in props):
            out = dict(out, properties=new)
    items = schema.get("items")
    if isinstance(items, dict):
        new_items = stated(items)
        if new_items is not items:
            out = dict(out, items=new_items)
    return out
