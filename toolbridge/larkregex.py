"""A Lark grammar as one regular expression: the input constraint of an OpenAI custom tool.

OpenAI's custom tools may hold their input to a Lark grammar (`format: {"type": "grammar", "syntax":
"lark", "definition": ...}`). Both engines here constrain a call's input through a JSON-schema string
`pattern`, drawn by toolbridge's own GBNF pattern translator (toolbridge.constrain.pattern) on both, so a grammar
becomes one regex. Rules and terminals are inlined; a recursive rule is expanded to a
bounded depth, and what would recurse further is dropped. The regex is therefore a subset of the
grammar's language (all of it when the grammar is regular): sound, never free text.

The grammar is read by lark itself (`lark.load_grammar`), literals are evaluated by lark's own helper,
and a terminal's regex is read by Python's regex parser and written back in a small portable subset:
groups `(?:...)`, classes, `* + ? {n,m}`, `|`; no anchors, flags, lookaround or backreferences. The
parts of a terminal regex whose meaning differs between engines are narrowed to what they share
(`.` is `[^\\n]`; `\\d`, `\\w` are their ASCII sets), which keeps the regex a subset of Python's
meaning, the one lark parses with.

`%ignore`d terminals may come before every token of a rule and at the end of the text, as lark's
Earley parser allows them; never inside a terminal (terminals are atomic). One gap remains: lark's
dynamic lexer takes one match of a terminal where it starts (Python's `re.match`: greedy, first
alternative first), so where a terminal can swallow what follows it (`start: WORD "s"`) or an earlier
alternative shadows a longer one (`/a|ab/`), the regex holds strings (`cats`, `ab`) lark refuses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from lark import Token, Tree
from lark.exceptions import LarkError
from lark.grammar import NonTerminal, Terminal
from lark.lexer import PatternStr
from lark.load_grammar import _literal_to_pattern, _parse_grammar, eval_escaping, load_grammar

try:  # Python 3.11+ (sre_parse/sre_constants still exist there, but warn on import)
    import re._constants as C  # noqa: N812 - the names of the sre opcodes
    import re._parser as sre_parse
except ImportError:  # Python 3.10
    import sre_constants as C  # noqa: N812
    import sre_parse

__all__ = ["GrammarError", "lark_to_regex"]

START = "start"  # OpenAI's convention for the start rule
MAX_CHAR = 0x10FFFF
# Statements whose grammars this module refuses (lark resolves them, but they are out of scope here).
_REFUSED_STATEMENTS = {"declare": "%declare", "override": "%override", "extend": "%extend"}
# common.lark's ESCAPED_STRING ends in a lookbehind; its language, as lark matches it (`.*?` then the first
# quote after an even run of backslashes), is a quoted run of escapes and other non-newline characters.
_ESCAPED_STRING = r'"(?:[^"\\\n]|\\[^\n])*"'


class GrammarError(ValueError):
    """A grammar this module cannot turn into a regex; the message names the construct."""


def lark_to_regex(definition: str, depth: int = 3, max_length: int = 20000) -> str:
    """The regex (Python `re` syntax, no anchors, no flags, no lookaround, no backreferences) whose full
    matches are strings of the Lark grammar `definition` from its `start` rule.

    `depth` is how many times one rule may be open inside itself; deeper recursion is left out, so the
    regex is a subset of the language. The result is safe to embed (`^(?:R)$`). GrammarError for a
    grammar lark refuses, a construct this module does not take, or a regex over `max_length`.
    """
    if depth < 1:
        raise ValueError("depth must be at least 1")
    rules, terms, ignore = _load(definition)
    rx = _Translator(rules, terms, ignore, depth, max_length).translate()
    return rx.text if rx.kind != "alt" else f"(?:{rx.text})"


def _load(definition: str) -> tuple[dict, dict, list]:
    """The grammar's rules {name: tree}, terminals {name: tree} and ignored terminal names, as lark reads them."""
    try:
        statements = _parse_grammar(definition, "<grammar>").children
        grammar, _ = load_grammar(definition, "<grammar>", [], False)
    except LarkError as e:
        raise GrammarError(f"lark cannot read the grammar: {e}") from None
    for stmt in statements:
        if stmt.data in _REFUSED_STATEMENTS:
            raise GrammarError(f"`{_REFUSED_STATEMENTS[stmt.data]}` is not supported")
    rules = {}
    for name, params, tree, _options in grammar.rule_defs:
        if params:
            raise GrammarError(f"template rule `{name}{{{', '.join(params)}}}` is not supported")
        rules[str(name)] = tree
    terms = {}
    for name, (tree, _priority) in grammar.term_defs:
        if tree is None:
            raise GrammarError(f"`%declare`d terminal {name} is not supported")
        terms[str(name)] = tree
    if START not in rules:
        raise GrammarError("the grammar has no `start` rule")
    return rules, terms, list(grammar.ignore)


# --- regex pieces -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Rx:
    """A piece of regex. kind: "atom" takes a quantifier as is, "seq" must be grouped first, "alt" must be
    grouped to be quantified or concatenated. `rep` is (inner, lo, hi) when the piece is a repetition,
    `chars` its character ranges when it is one character."""
    text: str
    kind: str = "seq"
    rep: Optional[tuple] = None
    chars: Optional[tuple] = None


EMPTY = _Rx("")


def _group(rx: _Rx) -> _Rx:
    return rx if rx.kind == "atom" else _Rx(f"(?:{rx.text})", "atom")


def _seq(parts: Iterable[Optional[_Rx]]) -> Optional[_Rx]:
    """Concatenation; None (unsatisfiable) when any part is."""
    parts = list(parts)
    if any(p is None for p in parts):
        return None
    parts = [p for p in parts if p.text]
    if len(parts) <= 1:
        return parts[0] if parts else EMPTY
    return _Rx("".join(_group(p).text if p.kind == "alt" else p.text for p in parts))


def _alt(parts: Iterable[Optional[_Rx]]) -> Optional[_Rx]:
    """Alternation of the satisfiable parts; None when there are none. An empty part makes the rest optional."""
    kept: list[_Rx] = []
    for p in parts:
        if p is not None and p not in kept:
            kept.append(p)
    if not kept:
        return None
    if EMPTY in kept:
        rest = _alt(p for p in kept if p != EMPTY)
        return EMPTY if rest is None else _repeat(rest, 0, 1)
    if len(kept) == 1:
        return kept[0]
    if all(p.chars for p in kept):  # a|b|[c-d] is [a-d]
        return _charset(_normalize(r for p in kept for r in p.chars))
    return _Rx("|".join(p.text for p in kept), "alt")


def _repeat(rx: Optional[_Rx], lo: int, hi: Optional[int]) -> Optional[_Rx]:
    """`rx` repeated lo..hi times (hi None: unbounded)."""
    if rx is None:
        return EMPTY if lo == 0 else None
    if hi == 0 or not rx.text:
        return EMPTY
    if (lo, hi) == (1, 1):
        return rx
    simple = {(0, 1), (0, None), (1, None)}
    if rx.rep and rx.rep[1:] in simple and (lo, hi) in simple:  # (x+)* is x*, (x?)? is x?, ...
        inner, ilo, ihi = rx.rep
        return _repeat(inner, ilo * lo, None if None in (ihi, hi) else 1)
    op = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((lo, hi))
    if op is None:
        op = "{%d}" % lo if lo == hi else "{%d,}" % lo if hi is None else "{%d,%d}" % (lo, hi)
    return _Rx(_group(rx).text + op, "seq", (rx, lo, hi))


def _literal(s: str) -> _Rx:
    if len(s) == 1:
        return _Rx(_escape(s), "atom", chars=((ord(s), ord(s)),))
    return _Rx("".join(_escape(c) for c in s))


def _escape(c: str) -> str:
    """One character outside a class."""
    return "\\" + c if c in "\\.^$*+?{}[]()|" else _printable(c)


def _printable(c: str) -> str:
    if c.isprintable() and c != "\x7f":
        return c
    n = ord(c)
    return {"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(c) or (
        "\\x%02x" % n if n < 0x100 else "\\u%04x" % n if n < 0x10000 else "\\U%08x" % n)


def _charset(ranges: list[tuple[int, int]]) -> _Rx:
    """A character class for `ranges` (sorted, disjoint), negated when that is shorter."""
    if not ranges:
        raise GrammarError("a character class that matches nothing")
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _literal(chr(ranges[0][0]))
    missing = _complement(ranges)
    if ranges[-1][1] == MAX_CHAR and missing:
        return _Rx(f"[^{_class_body(missing)}]", "atom", chars=tuple(ranges))
    return _Rx(f"[{_class_body(ranges)}]", "atom", chars=tuple(ranges))


def _class_body(ranges: list[tuple[int, int]]) -> str:
    def one(n: int) -> str:
        c = chr(n)
        return "\\" + c if c in "\\]-^[" else _printable(c)
    return "".join(one(lo) if lo == hi else one(lo) + one(hi) if hi == lo + 1 else f"{one(lo)}-{one(hi)}"
                   for lo, hi in ranges)


def _normalize(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, nxt = [], 0
    for lo, hi in _normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    return out + [(nxt, MAX_CHAR)] if nxt <= MAX_CHAR else out


# --- terminal regexes (Python's parse, written back portably) -------------------------------------------------

_NON_ASCII = [(0x80, MAX_CHAR)]
_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE = _normalize((c, c) for c in range(0x3001) if chr(c).isspace())  # Python's \s; none lie above U+3000
# Each category as (subset, superset) of Python's Unicode meaning: \d and \w are narrowed to ASCII, and a
# negated class is the complement of the supersets, so every class stays within what Python matches.
_CATEGORIES = {
    C.CATEGORY_DIGIT: (_DIGIT, _DIGIT + _NON_ASCII),
    C.CATEGORY_WORD: (_WORD, _WORD + _NON_ASCII),
    C.CATEGORY_SPACE: (_SPACE, _SPACE),
}
_CATEGORIES.update({
    C.CATEGORY_NOT_DIGIT: (_complement(_DIGIT + _NON_ASCII), _complement(_DIGIT)),
    C.CATEGORY_NOT_WORD: (_complement(_WORD + _NON_ASCII), _complement(_WORD)),
    C.CATEGORY_NOT_SPACE: (_complement(_SPACE), _complement(_SPACE)),
})


def _user_regex(source: str) -> _Rx:
    """A terminal's regex `/source/`, checked and written back in the portable subset."""
    try:
        tree = sre_parse.parse(source)
    except re.error as e:
        raise GrammarError(f"invalid regex /{source}/: {e}") from None
    if tree.state.flags & ~re.UNICODE:
        raise GrammarError(f"inline flag in /{source}/ is not supported")
    rx = _re_seq(list(tree), source)
    if rx is None or not rx.text:
        raise GrammarError(f"regex /{source}/ matches nothing but the empty string")
    return rx


def _re_seq(items: list, source: str) -> Optional[_Rx]:
    return _seq(_re_node(op, av, source) for op, av in items)


def _re_node(op, av, source: str) -> Optional[_Rx]:
    if op is C.LITERAL:
        return _literal(chr(av))
    if op is C.NOT_LITERAL:
        return _charset(_complement([(av, av)]))
    if op is C.ANY:  # without DOTALL, Python's `.` is anything but a newline
        return _charset(_complement([(0x0A, 0x0A)]))
    if op is C.IN:
        return _re_class(av)
    if op is C.BRANCH:
        return _alt(_re_seq(list(alt), source) for alt in av[1])
    if op is C.SUBPATTERN:
        _group_id, add_flags, del_flags, sub = av
        if add_flags or del_flags:
            raise GrammarError(f"scoped flag in /{source}/ is not supported")
        return _re_seq(list(sub), source)
    if op in (C.MAX_REPEAT, C.MIN_REPEAT):  # a lazy repeat matches the same strings
        lo, hi, sub = av
        return _repeat(_re_seq(list(sub), source), lo, None if hi is C.MAXREPEAT else hi)
    raise GrammarError(f"{_RE_REFUSED.get(op, str(op).lower())} in /{source}/ is not supported")


def _re_refused() -> dict:
    names = {C.AT: "anchor", C.ASSERT: "lookahead/lookbehind", C.ASSERT_NOT: "negative lookahead/lookbehind",
             C.GROUPREF: "backreference", C.GROUPREF_EXISTS: "conditional group"}
    for opname, what in (("POSSESSIVE_REPEAT", "possessive repeat"), ("ATOMIC_GROUP", "atomic group")):
        if hasattr(C, opname):  # Python 3.11+
            names[getattr(C, opname)] = what
    return names


_RE_REFUSED = _re_refused()


def _re_class(items: list) -> _Rx:
    negate = bool(items) and items[0][0] is C.NEGATE
    subset, superset = [], []
    for op, av in items[int(negate):]:
        if op is C.LITERAL:
            subset.append((av, av))
            superset.append((av, av))
        elif op is C.RANGE:
            subset.append(av)
            superset.append(av)
        elif op is C.CATEGORY:
            lo, hi = _CATEGORIES[av]
            subset += lo
            superset += hi
        else:
            raise GrammarError(f"character class item {op} is not supported")
    return _charset(_complement(superset) if negate else _normalize(subset))


def _case_insensitive(s: str) -> _Rx:
    """`"s"i`: each character as the class of its case forms that Python's IGNORECASE matches."""
    parts = []
    for c in s:
        forms = {f for f in (c, c.lower(), c.upper(), c.swapcase()) if len(f) == 1
                 and re.fullmatch(re.escape(c), f, re.IGNORECASE)}
        parts.append(_charset(_normalize((ord(f), ord(f)) for f in forms)))
    return _seq(parts)


# --- the grammar ------------------------------------------------------------------------------------------------

class _Translator:
    """Walks lark's rule and terminal trees from `start`, inlining each, recursion bounded by `depth`."""

    def __init__(self, rules: dict, terms: dict, ignore: list, depth: int, max_length: int):
        self.rules, self.terms, self.depth, self.max_length = rules, terms, depth, max_length
        self.term_cache: dict[str, _Rx] = {}
        self.rule_cache: dict[tuple, Optional[_Rx]] = {}
        self._escaped_string = repr(_common_escaped_string())
        # Ignored text may precede any token; an ignored X+ (or X*) inside (...)* is just X.
        pieces = [self.terminal(name) for name in ignore]
        unwrapped = (p.rep[0] if p.rep and p.rep[1] <= 1 and p.rep[2] is None else p for p in pieces)
        self.ignored = _repeat(_alt(unwrapped), 0, None)

    def translate(self) -> _Rx:
        body = self.rule(START, ())
        if body is None:
            raise GrammarError(f"the `start` rule cannot be expanded within recursion depth {self.depth}")
        return self._checked(_seq([body, self.ignored]))

    def rule(self, name: str, path: tuple) -> Optional[_Rx]:
        """Rule `name` inside the open rules `path`; None when it may not open again (depth reached)."""
        if path.count(name) >= self.depth:
            return None
        path = path + (name,)
        key = (name, tuple(sorted((n, path.count(n)) for n in set(path))))
        if key not in self.rule_cache:
            self.rule_cache[key] = self._checked(self.node(self.rules[name], path))
        return self.rule_cache[key]

    def terminal(self, name: str) -> _Rx:
        if name not in self.term_cache:
            rx = self.node(self.terms[name], None)
            if rx is None:
                raise GrammarError(f"terminal {name} matches nothing")
            self.term_cache[name] = rx
        return self.term_cache[name]

    def node(self, tree, path: Optional[tuple]) -> Optional[_Rx]:
        """A tree of a rule (path: the open rules) or of a terminal (path None: no ignored text inside)."""
        if isinstance(tree, NonTerminal):
            return self.rule(tree.name, path)
        if isinstance(tree, Terminal):
            return self.token(self.terminal(tree.name), path)
        if path is None and repr(tree) == self._escaped_string:
            return self.token(_Rx(_ESCAPED_STRING), path)
        data = tree.data
        if data == "expansions":
            return _alt(self.node(child, path) for child in tree.children)
        if data == "expansion":
            return _seq(self.node(child, path) for child in tree.children)
        if data == "alias":
            return self.node(tree.children[0], path)
        if data == "value":
            return self.node(tree.children[0], path)
        if data == "maybe":
            return _repeat(self.node(tree.children[0], path), 0, 1)
        if data == "expr":
            return self.expr(tree.children, path)
        if data == "literal":
            return self.token(_pattern(tree.children[0]), path)
        if data == "range":
            return self.token(_range(*tree.children), path)
        if data == "template_usage":
            raise GrammarError(f"template `{tree.children[0].name}{{...}}` is not supported")
        raise GrammarError(f"grammar construct `{data}` is not supported")

    def expr(self, children: list, path: Optional[tuple]) -> Optional[_Rx]:
        """`x?`, `x*`, `x+`, `x ~ n`, `x ~ n..m`."""
        item, op, *counts = children
        inner = self.node(item, path)
        if op == "~":
            lo, hi = int(counts[0]), int(counts[-1])
            if lo > hi:
                raise GrammarError(f"bad repetition range ~ {lo}..{hi}")
            return _repeat(inner, lo, hi)
        return _repeat(inner, *{"?": (0, 1), "*": (0, None), "+": (1, None)}[str(op)])

    def token(self, rx: _Rx, path: Optional[tuple]) -> _Rx:
        """A terminal where it stands: inside a rule, ignored text may precede it."""
        if path is None:
            return rx
        return _seq([self.ignored, rx])

    def _checked(self, rx: Optional[_Rx]) -> Optional[_Rx]:
        if rx is not None and len(rx.text) > self.max_length:
            raise GrammarError(f"grammar too large to constrain once expanded (regex over {self.max_length} "
                               "characters); lower its recursion")
        return rx


def _pattern(token: Token) -> _Rx:
    """A literal `"..."`, `"..."i` or `/.../`, evaluated by lark."""
    try:
        pattern = _literal_to_pattern(token)
    except LarkError as e:
        raise GrammarError(str(e)) from None
    flags = set(pattern.flags)
    if isinstance(pattern, PatternStr):
        if flags - {"i"}:
            raise GrammarError(f"string flag `{''.join(sorted(flags - {'i'}))}` in {token} is not supported")
        return _case_insensitive(pattern.value) if flags else _literal(pattern.value)
    if flags:
        raise GrammarError(f"regex flag `{''.join(sorted(flags))}` in {token} is not supported")
    return _user_regex(pattern.value)


def _range(start: Token, end: Token) -> _Rx:
    """`"a".."z"`."""
    lo, hi = eval_escaping(start.value[1:-1]), eval_escaping(end.value[1:-1])
    if len(lo) != 1 or len(hi) != 1 or lo > hi:
        raise GrammarError(f"bad range {start}..{end}")
    return _charset([(ord(lo), ord(hi))])


_ESCAPED_STRING_TREE: list = []


def _common_escaped_string() -> Tree:
    """The tree lark reads for common.lark's ESCAPED_STRING (translated as a whole, see _ESCAPED_STRING)."""
    if not _ESCAPED_STRING_TREE:
        grammar, _ = load_grammar("start: ESCAPED_STRING\n%import common.ESCAPED_STRING", "<common>", [], False)
        _ESCAPED_STRING_TREE.append(dict(grammar.term_defs)["ESCAPED_STRING"][0])
    return _ESCAPED_STRING_TREE[0]
