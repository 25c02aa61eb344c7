"""The value formats a description states by example, as a grammar pattern (toolbridge.constrain.formats), and
that both engines' grammars hold a call's value to it."""
import json
import re

import pytest
from hypothesis import given, settings, strategies as st

from toolbridge.constrain.formats import MAX_PART, quoted, skeleton, stated, stated_pattern
from toolbridge.dialects import get_dialect
from toolbridge.constrain.grammar import frames
from toolbridge.request import prepare
from toolbridge.tools import make_tool


def string(description, **more):
    return {"type": "string", "description": description, **more}


CITY = string("The city where the salon is located, in the format of 'City, State' (e.g., 'Austin, TX'). "
              "State names must be abbreviated with two letters.")  # BFCL live_multiple_394-138-2
WHEN = string("Start of the period, in the format 'YYYY-MM-DD HH:mm:ss' or 'YYYY-MM-DD'.")


def test_quoted_spans_are_examples_not_apostrophes_or_bare_punctuation():
    assert quoted(CITY["description"]) == ["City, State", "Austin, TX"]
    assert quoted("the user's name, e.g. \"Ada Lovelace\"") == ["Ada Lovelace"]
    assert quoted("Separate values with ','.") == []
    assert quoted(None) == [] and quoted(3) == []


def test_the_skeleton_is_the_separators_in_order():
    assert skeleton("New York, NY") == "," and skeleton("2024-03-19 10:00") == "--:" and skeleton("Paris") == ""


@pytest.mark.parametrize("spec, good, bad", [
    (CITY, ["Berkeley, CA", "New York, NY", "St. Louis, MO"], ["Berkeley", "Berkeley,", "A, B, C"]),
    (WHEN, ["2024-03-19", "2024-03-19 10:00:00"], ["March 19", "2024-03-19 10:00", "19/03/2024"]),
    (string("Pick-up time 'HH:MM'."), ["09:30"], ["half past nine", "9:30:00"]),
])
def test_the_pattern_asks_for_the_examples_separators_and_leaves_the_parts_free(spec, good, bad):
    pattern = stated_pattern(spec)
    for value in good:
        assert re.search(pattern, value), (pattern, value)
    for value in bad:
        assert not re.search(pattern, value), (pattern, value)


@pytest.mark.parametrize("spec", [
    string("formatted as 'City, State' or 'City' if the city has no state, e.g. 'New York, NY' or 'Paris'."),
    string("The date in the format 'YYYY-MM-DD'.", default="dontcare"),  # the default has no separators
    string("The date in the format 'YYYY-MM-DD', or 'null' if open-ended."),
    string("One of 'a-b' or 'c-d'.", enum=["a-b", "c-d"]),
    string("A time 'HH:MM'.", pattern="^[0-9:]+$"),  # its own pattern stands
    string("A date 'YYYY-MM-DD'.", format="date"),
    string("The name of the city."),  # no example
    string("A date like '04/27/2023', or a path such as 'v1/items/5'."),  # slashes: paths and URLs vary in depth
    {"type": "integer", "description": "In the format '1-4'."},
])
def test_no_pattern_where_an_example_or_the_schema_allows_other_shapes(spec):
    assert stated_pattern(spec) is None


def test_the_parts_are_bounded_so_a_model_that_will_not_write_the_separator_stops():
    pattern = stated_pattern(CITY)
    assert re.search(pattern, "x" * MAX_PART + ", CA") and not re.search(pattern, "x" * (MAX_PART + 1) + ", CA")
    long = "Llanfairpwllgwyngyllgogerychwyrndrobwll, Wales"  # an example's own part is never cut
    assert re.search(stated_pattern(string(f"A town such as '{long}'.")), long)


def test_stated_adds_patterns_at_any_depth_and_copies_only_what_it_changes():
    plain = {"type": "object", "properties": {"n": {"type": "integer"}}}
    schema = {"type": "object", "properties": {"city": CITY, "stops": {"type": "array", "items": CITY},
                                               "other": plain}}
    out = stated(schema)
    assert out["properties"]["city"]["pattern"] == out["properties"]["stops"]["items"]["pattern"] == stated_pattern(CITY)
    assert out["properties"]["other"] is plain and "pattern" not in schema["properties"]["city"]
    assert stated(plain) is plain


def test_the_grammar_carries_it_where_the_policy_says_and_validation_does_not():
    tool = make_tool("find", "Find a salon.", {"type": "object", "required": ["city"], "properties": {"city": CITY}})
    (on,) = frames([tool], get_dialect("tags"), formats=True)
    (off,) = frames([tool], get_dialect("tags"), formats=False)
    assert on.schema["properties"]["city"]["pattern"] == stated_pattern(CITY) and "pattern" not in off.schema[
        "properties"]["city"]
    assert tool.errors({"city": "Berkeley"}) == []  # the tool's own schema judges the call
    tools = [{"type": "function", "function": {"name": "find", "parameters": tool.parameters}}]
    msgs = [{"role": "user", "content": "a salon in Berkeley"}]
    for formats in (True, False):
        (entry, *_) = prepare(tools=tools, messages=msgs, template_kwargs={"tb_formats": formats}, env={}).entries
        assert ("pattern" in entry.frames()[0].schema["properties"]["city"]) is formats


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab '\",-:/()e.g1 \n")), max_size=80), st.one_of(st.none(), st.text(max_size=12)))
def test_any_description_gives_a_pattern_every_example_matches_or_none(description, default):
    spec = string(description) if default is None else string(description, default=default)
    pattern = stated_pattern(spec)
    if pattern is not None:
        for example in quoted(description) + ([default] if default is not None else []):
            assert re.search(pattern, example), (pattern, example)


def test_the_llamacpp_grammar_holds_a_value_to_it():
    pytest.importorskip("llama_cpp")
    from llamacpp_ext.converter import schema_grammar

    tool = make_tool("find", "", {"type": "object", "required": ["city"], "properties": {"city": CITY}})
    grammar = schema_grammar(frames([tool], get_dialect("tags"), formats=True)[0].schema)
    assert '"," ( ( [^,"' in grammar and "{1,%d}" % MAX_PART in grammar, grammar


def test_the_vllm_grammar_holds_a_value_to_it():
    xgr = pytest.importorskip("xgrammar")
    tool = make_tool("find", "", {"type": "object", "required": ["city"], "properties": {"city": CITY}})
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([])).compile_json_schema(json.dumps(frames([tool], get_dialect("tags"), formats=True)[0].schema))

    def accepts(text: str) -> bool:
        return xgr.GrammarMatcher(compiled, terminate_without_stop_token=True).accept_string(text)

    assert accepts('{"city": "Berkeley, CA"}')
    assert not accepts('{"city": "Berkeley"}')
