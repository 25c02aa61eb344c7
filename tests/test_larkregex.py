"""Lark grammar -> one regex (toolbridge.larkregex): sound (every full match parses with lark), complete for
regular grammars, recursion bounded by depth, and what it cannot take refused by name."""
import re
from pathlib import Path
from functools import lru_cache

import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolbridge.larkregex import GrammarError, lark_to_regex

ENUM = 'start: "sunny" | "rainy" | "cloudy"'
DATE = r'''
start: YEAR "-" MONTH "-" DAY
YEAR: /[0-9]{4}/
MONTH: "0" "1".."9" | "1" "0".."2"
DAY: "0" "1".."9" | ("1" | "2") DIGIT | "3" ("0" | "1")
%import common.DIGIT
'''
EXPR = '''
start: expr
expr: term (("+"|"-") term)*
term: NUMBER | "(" expr ")"
%import common.NUMBER
%ignore " "
'''
KV = '''
start: pair ("," pair)*
pair: KEY "=" VALUE
KEY: /[a-z_]+/
VALUE: /[A-Za-z0-9]+/
'''
OPERATORS = 'start: "a" "b"? ["c"] "d"+ "e" ~ 2..4 "f" ~ 2 ("g" | "h")*'
GREETING = '''
start: "hello"i ("," | "!")? NAME
NAME: WS WORD
%import common.WORD
%import common.WS
'''
INTS = '''
start: "[" [INT ("," INT)*] "]"
%import common.INT
%import common.WS
%ignore WS
'''
CODES = r'''
start: CODE | NOTE
CODE: /[A-Z]{2}\d{3}(-[a-z]+)?/
NOTE: "#" /.+/
'''
SAY = '''
start: "say" WS_INLINE ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.WS_INLINE
'''
GRAMMARS = {"enum": ENUM, "date": DATE, "expr": EXPR, "kv": KV, "operators": OPERATORS, "greeting": GREETING,
            "ints": INTS, "codes": CODES, "say": SAY}

VALID = {
    "enum": ["sunny", "rainy", "cloudy"],
    "date": ["2024-01-31", "1999-12-09", "0000-10-20", "2024-02-29"],
    "expr": ["1", "1+2", "(1+(2-3))", " 1 + 2 ", "1.5e3-(2)", "((1))-3"],
    "kv": ["a=1", "city=Paris,unit=C", "max_len=20,x=Y,z_=0"],
    "operators": ["abdeeff", "adddeeeeffghgh", "acdeeeffg", "abcdeeff"],
    "greeting": ["hello world", "HeLLo, Bob", "hello!\tthere"],
    "ints": ["[]", "[1]", "[1,2,3]", " [ 1 , 22 ]\n", "[\n]"],
    "codes": ["AB123", "ZZ000-rev", "#anything at all"],
    "say": ['say "hi"', 'say  "a \\" b"', 'say\t"\\\\"', 'say ""'],
}
INVALID = {
    "enum": ["sun", "sunnyrainy", "Sunny", " sunny", ""],
    "date": ["2024-13-01", "2024-00-10", "2024-01-32", "24-01-01", "2024-1-01"],
    "expr": ["1+", "(1", "1)", "()", "+1", "1 2"],
    "kv": ["a=1,", "A=1", "a=", "a=1;b=2", "=1"],
    "operators": ["adee", "abdeef", "abdeeeeeff", "bdeeff", "abdeeffi"],
    "greeting": ["hello", "hi world", "hello,world", "hello, "],
    "ints": ["[1,]", "[,]", "1", "[1 2]"],
    "codes": ["AB12", "ab123", "AB123-", "AB123-X", "#", "#a\nb"],
    "say": ['say hi', 'say"hi"', 'say "a\\"', 'say "a\nb"', 'say "a" "b"'],
}


@lru_cache(maxsize=None)
def regex(name, depth=3):
    return re.compile(f"^(?:{lark_to_regex(GRAMMARS[name], depth=depth)})$")


@lru_cache(maxsize=None)
def parser(name):
    return lark.Lark(GRAMMARS[name], start="start", parser="earley", lexer="dynamic")


def parses(name, text):
    try:
        parser(name).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


# --- the four shapes, exactly -------------------------------------------------------------------------------------

def test_enum_is_an_alternation():
    assert lark_to_regex(ENUM) == "(?:sunny|rainy|cloudy)"


def test_date_terminals_inline_as_classes():
    assert lark_to_regex(DATE) == "[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"


def test_key_value_list():
    assert lark_to_regex(KV) == "[_a-z]+=[0-9A-Za-z]+(?:,[_a-z]+=[0-9A-Za-z]+)*"


def test_ignored_text_before_each_token_and_at_the_end():
    r = lark_to_regex(ENUM + '\n%ignore " "')
    assert re.fullmatch(f"(?:{r})", "  sunny ") and not re.fullmatch(f"(?:{r})", "sun ny")


# --- both ways -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", GRAMMARS)
def test_valid_strings_match_and_parse(name):
    for text in VALID[name]:
        assert parses(name, text), text  # the list itself is right
        assert regex(name).fullmatch(text), text


@pytest.mark.parametrize("name", GRAMMARS)
def test_invalid_strings_do_not_match(name):
    for text in INVALID[name]:
        assert not parses(name, text), text
        assert not regex(name).fullmatch(text), text


@pytest.mark.parametrize("name", GRAMMARS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_full_match_parses_with_lark(name, data):
    # the recursive grammar at depth 2: the same expansion, and a regex half as long for hypothesis to draw from
    text = data.draw(st.from_regex(regex(name, depth=2 if name == "expr" else 3).pattern, fullmatch=True))
    assert parses(name, text), text


# --- recursion -----------------------------------------------------------------------------------------------------

def test_recursion_is_bounded_by_depth():
    r = regex("expr")
    assert r.fullmatch("(1+(2-3))") and r.fullmatch("((1))")
    assert not r.fullmatch("(((1)))") and parses("expr", "(((1)))")  # in the language, past depth 3
    shallow = regex("expr", depth=1)
    assert shallow.fullmatch("1 + 2 - 3") and not shallow.fullmatch("(1)")


def test_recursion_without_a_base_case_within_depth_drops_that_alternative():
    r = lark_to_regex('start: a\na: "x" a | "y"', depth=2)
    assert [s for s in ("y", "xy", "xxy", "xxxy") if re.fullmatch(r, s)] == ["y", "xy"]


def test_a_start_rule_that_only_recurses_is_refused():
    with pytest.raises(GrammarError, match="depth"):
        lark_to_regex('start: "(" start ")"')


def test_a_regex_over_max_length_is_refused():
    json_like = '''
start: value
value: "[" [value ("," value)*] "]" | "{" [pair ("," pair)*] "}" | ESCAPED_STRING | SIGNED_NUMBER
pair: ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
'''
    assert len(lark_to_regex(json_like, depth=2)) < 20000
    with pytest.raises(GrammarError, match="too large"):
        lark_to_regex(json_like, depth=6)


# --- refusals ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("definition, named", [
    ('start: pair{"a"}\npair{x}: x "=" x', "template"),
    ("start: /abc/i", "flag `i`"),
    ("start: /(?i)abc/", "inline flag"),
    ("start: /a(?=b)b/", "lookahead"),
    ("start: /(?<!a)b/", "lookbehind"),
    (r"start: /(a)\1/", "backreference"),
    ("start: /^a/", "anchor"),
    ('main: "a"', "`start`"),
    ('start "a"', "lark"),
    ("start: UNDEFINED", "lark"),
    ('start: A\n%declare A', "%declare"),
    ('start: "a"\n%extend start: "b"', "%extend"),
    ('start: "a"\n%override start: "b"', "%override"),
    ('start: "a" ~ 3..1', "range"),
])
def test_refused_with_the_construct_named(definition, named):
    with pytest.raises(GrammarError, match=re.escape(named)):
        lark_to_regex(definition)


def test_priorities_and_rule_options_do_not_change_the_language():
    r = lark_to_regex('?start: _a | b\n_a.2: "x"\n!b: B\nB.3: "y"')
    assert [s for s in ("x", "y", "z") if re.fullmatch(r, s)] == ["x", "y"]


def test_terminal_regexes_are_written_in_the_portable_subset():
    r = lark_to_regex(r"start: /(?P<n>\d+)\.\w?.\s*/")
    assert r == r"[0-9]+\.[0-9A-Z_a-z]?[^\n][\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*"
    assert "(?P" not in r and "(?i" not in r


@pytest.mark.parametrize("source, written", [
    (r"[\s\S]", r"[\x00-\U0010ffff]"),
    ('[^"\\\\]', '[^"\\\\]'),
    (r"a|ab", r"ab?"),  # Python's parser factors the prefix: the same strings
    (r"x*?y{2,}?", r"x*y{2,}"),  # lazy repeats match the same strings
    (r"[^\d]", r"[\x00-/:-\x7f]"),  # \d is Unicode in Python: its complement is narrowed to ASCII
])
def test_terminal_regex_classes(source, written):
    assert lark_to_regex(f"start: /{source}/") == written


def test_output_is_a_pattern_the_gbnf_translator_takes():
    from toolbridge.engine import pattern_to_gbnf
    for definition in GRAMMARS.values():
        assert pattern_to_gbnf(f"^(?:{lark_to_regex(definition)})$")


@pytest.mark.slow  # importing xgrammar takes seconds
def test_output_is_a_pattern_xgrammar_takes():
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string
    for name, definition in GRAMMARS.items():
        grammar = xgr.Grammar.from_regex(f"^(?:{lark_to_regex(definition)})$")
        for text in VALID[name]:
            assert _is_grammar_accept_string(grammar, text), (name, text)


PATCH = (Path(__file__).parent / "data" / "apply_patch.lark").read_text()  # Codex CLI's apply_patch tool grammar


def test_codex_apply_patch_grammar_becomes_one_regex():
    """Codex's apply_patch custom tool (its lines are terminals that may be empty, `/(.*)/`): a patch with quotes,
    backslashes and empty lines fullmatches; text that is no patch does not."""
    r = lark_to_regex(PATCH)
    good = ['*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    x = "1"\n+    x = \'\\\\n\'\n \n*** End Patch\n',
            "*** Begin Patch\n*** Add File: b.txt\n+\n+hello\n*** End Patch",
            "*** Begin Patch\n*** Delete File: c\n*** End Patch\n"]
    for patch in good:
        assert re.fullmatch(r, patch), patch
    for text in ("hello", "*** Begin Patch\n*** End Patch\n", "*** Begin Patch\n*** Delete File: c\n"):
        assert not re.fullmatch(r, text), text
