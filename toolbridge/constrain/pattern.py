"""JSON-schema `pattern` -> GBNF for the inside of a JSON string.

llama-cpp-python's converter copies a pattern almost verbatim: `\\d`, `\\w`, `\\s` end up in
the grammar (which then does not compile), unanchored patterns are rejected, and `.` or a
negated class may produce a raw `"` or control character (invalid JSON). This translator
works on Python's own parse of the pattern and emits a grammar for a subset of the strings
the pattern matches (`re.search` semantics, as jsonschema uses), every one of them written
as valid JSON string content. What it cannot translate raises `Unsupported`.
"""
from __future__ import annotations

import re

try:  # Python 3.11+ (sre_parse/sre_constants still exist there, but warn on import)
    import re._constants as C  # noqa: N812 - the names of the sre opcodes
    import re._parser as sre_parse
except ImportError:  # Python 3.10
    import sre_constants as C  # noqa: N812
    import sre_parse

from ..jsondata import json_escape, json_string
from ..memo import Memo

# Characters a JSON string cannot hold raw: the quote, the backslash, control characters.
_UNSAFE = '"\\\\\\x00-\\x1F'  # in GBNF class syntax: "  \\  \x00-\x1F
ANY_SAFE = f"[^{_UNSAFE}]"
_CATEGORY = {
    C.CATEGORY_DIGIT: [(0x30, 0x39)],
    C.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    C.CATEGORY_SPACE: [(0x20, 0x20)],  # tab and newlines are left out: raw they are not JSON
}
_NOT_CATEGORY = {C.CATEGORY_NOT_DIGIT: "0-9", C.CATEGORY_NOT_WORD: "a-zA-Z0-9_",
                 C.CATEGORY_NOT_SPACE: " \\t\\n\\r\\x0B\\x0C"}
_BEGIN = (C.AT_BEGINNING, C.AT_BEGINNING_STRING)
_END = (C.AT_END, C.AT_END_STRING)
# Characters a JSON string holds only as escapes that patterns commonly admit (code, multi-line text): where the
# pattern admits one, its escape is allowed. `.` and negated classes admit a quote, a backslash and a tab but no
# newline (a subset of what they match: a line stays one line); a class that names a newline (`\s`, `\n`) admits it.
ESCAPED = '"\\\t\n'
NEGATED_ESCAPED = '"\\\t'
_CATEGORY_RE = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s",
                C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W"}
# What has no GBNF translation, named as a client would name it
_REFUSED = {C.ASSERT: "lookahead/lookbehind", C.ASSERT_NOT: "negative lookahead/lookbehind",
            C.GROUPREF: "backreference", C.GROUPREF_EXISTS: "conditional group", C.AT: "anchor inside the pattern"}
MAX_COUNT = 1000  # larger bounded repeats are written as unbounded ones


class Unsupported(ValueError):
    """A pattern feature with no GBNF translation (lookaround, backreference, flags...)."""


# Drawn patterns: a custom tool's pattern is drawn when its request is checked (a pattern the translator cannot draw
# is a 400) and again when its constraint is built, in the same process
_DRAWN: Memo[str] = Memo(256)


def pattern_to_gbnf(pattern: str, any_char: str = "char") -> str:
    """A GBNF expression for JSON string content that matches `pattern` (re.search).

    `any_char` names the grammar's rule for one JSON string character; it fills the sides of
    an unanchored pattern.
    """
    return _DRAWN.get((pattern, any_char), lambda: _draw(pattern, any_char))


def _draw(pattern: str, any_char: str) -> str:
    try:
        tree = sre_parse.parse(pattern)
    except re.error as e:
        raise Unsupported(f"malformed regex {pattern!r}: {e}") from None
    if tree.state.flags & (re.IGNORECASE | re.VERBOSE):
        raise Unsupported("pattern flags")
    items = list(tree)
    if len(items) == 1 and items[0][0] is C.BRANCH:
        alts = [_anchored(list(alt), any_char) for alt in items[0][1][1]]
        return "( " + " | ".join(alts) + " )"
    return _anchored(items, any_char)


def _anchored(items: list, any_char: str) -> str:
    start = bool(items) and items[0][0] is C.AT and items[0][1] in _BEGIN
    end = bool(items) and items[-1][0] is C.AT and items[-1][1] in _END
    body = items[int(start):len(items) - int(end)]
    parts = [] if start else [f"{any_char}*"]
    parts.append(_seq(body))
    if not end:
        parts.append(f"{any_char}*")
    return " ".join(p for p in parts if p) or '""'


def _seq(items) -> str:
    out: list[str] = []
    literal: list[str] = []
    for op, av in items:
        if op is C.LITERAL:
            literal.append(json_escape(chr(av)))
            continue
        if literal:
            out.append(json_string("".join(literal)))
            literal = []
        out.append(_node(op, av))
    if literal:
        out.append(json_string("".join(literal)))
    return " ".join(x for x in out if x)


def _node(op, av) -> str:
    if op is C.ANY:
        return _with_escapes(ANY_SAFE, NEGATED_ESCAPED)
    if op is C.NOT_LITERAL:
        return _with_escapes(f"[^{_class_char(chr(av))}{_UNSAFE}]", [c for c in NEGATED_ESCAPED if c != chr(av)])
    if op is C.IN:
        return _in(av)
    if op is C.SUBPATTERN:
        group, add_flags, del_flags, sub = av
        if add_flags or del_flags:
            raise Unsupported("inline flags")
        return "( " + (_seq(sub) or '""') + " )"
    if op is C.BRANCH:
        return "( " + " | ".join(_seq(alt) or '""' for alt in av[1]) + " )"
    # POSSESSIVE_REPEAT and ATOMIC_GROUP exist from 3.11; 3.10's parser rejects `a*+` and `(?>...)`
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, getattr(C, "POSSESSIVE_REPEAT", None)):
        lo, hi, sub = av
        inner = "( " + (_seq(sub) or '""') + " )"
        if hi is C.MAXREPEAT or hi > MAX_COUNT:
            hi = None
        if (lo, hi) == (0, None):
            return inner + "*"
        if (lo, hi) == (1, None):
            return inner + "+"
        if (lo, hi) == (0, 1):
            return inner + "?"
        return inner + ("{%d,}" % lo if hi is None else "{%d}" % lo if lo == hi else "{%d,%d}" % (lo, hi))
    if op is getattr(C, "ATOMIC_GROUP", None):
        return "( " + (_seq(av) or '""') + " )"
    raise Unsupported(_REFUSED.get(op, f"pattern construct {op}"))


def _in(items) -> str:
    negate = bool(items) and items[0][0] is C.NEGATE
    if negate:
        items = items[1:]
    ranges: list[tuple[int, int]] = []
    negated_cats: list[str] = []
    for op, av in items:
        if op is C.LITERAL:
            ranges.append((av, av))
        elif op is C.RANGE:
            ranges.append(av)
        elif op is C.CATEGORY and av in _CATEGORY:
            ranges.extend(_CATEGORY[av])
        elif op is C.CATEGORY and av in _NOT_CATEGORY and not negate:
            negated_cats.append(f"[^{_NOT_CATEGORY[av]}{_UNSAFE}]")
        else:
            raise Unsupported(f"class item {op} {av}")
    if negate:
        return _with_escapes(f"[^{_class(ranges)}{_UNSAFE}]", [c for c in NEGATED_ESCAPED if not _has(items, c)])
    escaped = [json_string(json_escape(c)) for c in ESCAPED if _has(items, c)]
    safe = _class(_safe_ranges(ranges))
    alts = ([f"[{safe}]"] if safe else []) + negated_cats + escaped
    if not alts:
        raise Unsupported("a character class with no JSON-safe member")
    return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"


def _with_escapes(safe: str, chars: list[str]) -> str:
    """A class of raw JSON-safe characters, or one of `chars` written as its JSON escape."""
    escapes = [json_string(json_escape(c)) for c in chars]
    return "( " + " | ".join([safe, *escapes]) + " )" if escapes else safe


def _has(items, c: str) -> bool:
    """Whether a character class's items (sre's parse, its negation taken off) hold `c`."""
    for op, av in items:
        if (op is C.LITERAL and av == ord(c)) or (op is C.RANGE and av[0] <= ord(c) <= av[1]) or \
                (op is C.CATEGORY and av in _CATEGORY_RE and re.match(_CATEGORY_RE[av], c)):
            return True
    return False


def _safe_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges without the characters JSON strings cannot hold raw."""
    out = []
    for lo, hi in ranges:
        lo = max(lo, 0x20)
        for cut in (0x22, 0x5C):
            if lo <= cut <= hi:
                if lo < cut:
                    out.append((lo, cut - 1))
                lo = cut + 1
        if lo <= hi:
            out.append((lo, hi))
    return out


def _class(ranges: list[tuple[int, int]]) -> str:
    return "".join(_class_char(chr(lo)) if lo == hi else f"{_class_char(chr(lo))}-{_class_char(chr(hi))}"
                   for lo, hi in ranges)


def _class_char(c: str) -> str:
    """A character inside a GBNF class."""
    if c in "]\\-^[":
        return "\\" + c
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02X}"
    return c
