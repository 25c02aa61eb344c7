"""Per-request options, the `auto` steering and the loop guard, shared by both engines."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbridge.dialects import get_dialect
from toolbridge.callguard import MIN_RUN, CallGuard, closers, enders, loops
from toolbridge.options import DEFAULTS, resolve
from toolbridge.request import prepare
from toolbridge.steer import Steering, follows_user_turn

ENCODE = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character


def test_resolve_order_kwargs_then_env_then_default():
    assert resolve({}, env={}).dialect.name == "tags" and resolve({}, env={}).call_bias == DEFAULTS[False].call_bias
    env = {"TOOLBRIDGE_DIALECT": "json", "TOOLBRIDGE_CALL_BIAS": "2"}
    assert (resolve({}, env=env).dialect.name, resolve({}, env=env).call_bias) == ("json", 2.0)
    got = resolve({"tb_dialect": "react", "tb_call_bias": 0}, env=env)
    assert (got.dialect.name, got.call_bias) == ("react", 0.0)


def test_a_tool_trained_model_gets_its_own_measured_defaults():
    assert resolve({}, env={}, tool_trained=True).call_bias == DEFAULTS[True].call_bias < DEFAULTS[False].call_bias
    assert resolve({"tb_call_bias": 5}, env={}, tool_trained=True).call_bias == 5.0  # what the user sets wins
    assert all(d.measured_on for d in DEFAULTS.values())
    req = prepare(tools=[{"type": "function", "function": {"name": "f"}}], messages=[{"role": "user", "content": "x"}],
                  tool_trained=True, env={})
    assert req.steer and req.options.call_bias == DEFAULTS[True].call_bias


@pytest.mark.parametrize("kwargs", [{"tb_dialect": "xml"}, {"tb_call_bias": "lots"}])
def test_resolve_rejects_unknown_values(kwargs):
    with pytest.raises(ValueError):
        resolve(kwargs, env={})


def test_marker_tokens_are_the_whole_trigger_and_result_marker():
    s = Steering.for_dialect(get_dialect("tags"), 5, ENCODE)
    assert (s.call, s.result, s.bias) == (tuple(ENCODE("<tool_call>")), tuple(ENCODE("<tool_response>")), 5.0)
    assert s.starts == (ord("<"), ord("{"))  # the dialect's marker and a bare JSON call, both favoured
    assert Steering.for_dialect(get_dialect("react"), 5, ENCODE).result == tuple(ENCODE("Observation"))
    assert Steering.for_dialect(get_dialect("tags"), 5, ENCODE).horizon == len("<tool_response>")


def test_steering_favours_the_call_and_cuts_a_result_where_the_markers_part():
    s = Steering((44, 19324, 79, 4350, 46), (44, 19324, 79, 7639, 46), 5.0)  # <tool_call>, <tool_response>
    assert s.changes([]) == [(44, 5.0)]
    assert s.changes([44, 19324]) == []  # still on the call's path
    assert s.changes([44, 19324, 79]) == [(7639, -math.inf)]  # "<tool_" -> not "response"
    assert s.changes([9, 44]) == []  # later in the answer: free
    assert Steering((44, 19324), (), 5.0).changes([44]) == []
    assert s.changes([44, 19324, 79, 7639, 46, 1]) == []  # past the horizon


def test_a_space_led_start_is_favoured_too_when_the_vocabulary_merges_it():
    merged = {'{"': 7, ' {"': 8, "<": 9, " <": 10}

    def encode(text):  # a vocabulary where ` {"` and ` <` are single tokens
        for piece, token in sorted(merged.items(), key=lambda kv: -len(kv[0])):
            if text.startswith(piece):
                return [token] + encode(text[len(piece):])
        return [ord(text[0])] + encode(text[1:]) if text else []

    assert set(Steering.for_dialect(get_dialect("tags"), 5, encode).starts) == {7, 8, 9, 10}


def test_a_bare_json_call_at_the_answers_start_names_a_declared_tool():
    s = Steering.for_dialect(get_dialect("tags"), 3, ENCODE, ["get_weather", "get_time"])
    opening = ENCODE('{"name": "')
    assert s.only([]) is None and s.only(opening[:3]) is None  # not yet a call's opening: free
    assert s.only(opening) == (ord("g"),)
    assert s.only(opening + ENCODE("get_")) == (ord("t"), ord("w"))
    assert s.only(opening + ENCODE("get_time")) == (ord('"'),)  # the name ends there, quoted
    assert s.only(ENCODE(' {"name": "get_w')) == (ord("e"),)  # after a space too
    assert s.only(ENCODE('{"city": "')) is None  # other JSON stays free
    assert s.only(opening + ENCODE('get_time"')) is None  # past the name: the grammar's part
    assert s.horizon >= len(ENCODE(' {"name": "get_weather"'))


def test_steering_travels_as_request_arguments():
    s = Steering((1, 2), (1, 3), 4.5)
    assert Steering.from_args(s.to_args()) == s
    named = Steering.for_dialect(get_dialect("tags"), 3, ENCODE, ["f"])
    assert Steering.from_args(named.to_args()) == named
    assert Steering.from_args({}) is None
    assert Steering.from_args(Steering((1,), (), 0.0).to_args()) is None  # a bias of 0 is off


def test_steering_only_answers_a_user_turn():
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                                                                  "function": {"name": "f", "arguments": "{}"}}]}
    assert follows_user_turn([{"role": "user", "content": "hi"}, {"role": "system", "content": "late system"}])
    assert not follows_user_turn([{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "a", "content": "1"}])
    assert not follows_user_turn([])


# -- the loop guard (toolbridge.callguard) -------------------------------------------------------------

@pytest.mark.parametrize("value", ["NVDA_SCOPE_1_2_2023" + "_2023" * 10, "https://x.com/search" + "/v/search_web" * 4,
                                   "1548." + "00000000000001222." * 3, "0" * MIN_RUN])
def test_a_string_ending_in_a_repeated_unit_loops(value):
    assert loops(value)


@pytest.mark.parametrize("value", ["1000000", "ha " * 10, "0x" + "0" * 40, "a" * (MIN_RUN - 1),
                                   "The quick brown fox jumps over the lazy dog, then the lazy dog sleeps.",
                                   "_2023" * 10 + " and then the text moves on to something else entirely"])
def test_a_string_that_only_contains_a_repeat_does_not(value):
    assert not loops(value)


def test_the_guard_reads_json_strings_after_a_call_starts():
    g = CallGuard(["<tool_call>", '{"name": "'])
    g.feed('I will say "' + "la " * 30)  # quoted prose before any call: not read
    assert not g.armed and not g.looping
    g.feed('<tool_c')
    g.feed('all>\n{"name": "f", "arguments": {"q": "')
    assert g.armed and g.reader.in_string and not g.looping
    g.feed("_2023" * 9)
    assert not g.looping
    g.feed("_2023" * 2)
    assert g.looping
    g.feed('"}')  # the string closed: the guard rests
    assert not g.looping and not g.reader.in_string


def test_escaped_quotes_do_not_end_the_string():
    g = CallGuard()  # no starts: the whole answer is a call
    g.feed('{"q": "a \\"b\\" ' + "xy" * 30)
    assert g.reader.in_string and g.looping


def test_the_guard_travels_as_request_arguments_and_closes_with_quote_tokens():
    assert CallGuard.from_args({}) is None
    assert CallGuard.from_args(CallGuard(["<tool_call>"]).to_args()).starts == ("<tool_call>",)
    assert CallGuard.from_args(CallGuard().to_args()).armed
    assert closers(ENCODE) == (ord('"'),)  # one token per character: every closing text starts with it


def test_each_mode_gets_its_guard():
    tools = [{"type": "function", "function": {"name": "f"}}]
    msgs = [{"role": "user", "content": "x"}]
    assert prepare(tools=tools, tool_choice="required", messages=msgs).call_guard().armed
    lazy = prepare(tools=tools, tool_choice="auto", messages=msgs).call_guard()
    assert not lazy.armed and lazy.starts == ("<tool_call>", '{"name": "')
    assert prepare(tools=tools, tool_choice="none", messages=msgs).call_guard() is None


# -- closing the arguments after the required ones (toolbridge.callguard, toolbridge.callreader) ----------

REQUIRED = {"search_web": ["query"], "set_reminder": ["message", "minutes"]}
ENDING = [(1, '"}}'), (2, "}}"), (3, '"'), (4, "}"), (5, ","), (6, '" }')]


def _guard(text, starts=("<tool_call>", '{"name": "'), bias=5.5):
    g = CallGuard(starts, REQUIRED, bias)
    g.feed(text)
    return g


def test_going_on_past_the_required_arguments_gives_way_to_closing_them():
    g = _guard('<tool_call>\n{"name": "search_web", "arguments": {"query": "vegan lasagna')
    assert g.deciding and g.reader.name == "search_web"
    assert g.changes(lambda: '",', (), ENDING) == [(1, 5.5), (6, 5.5)]  # closing the string and the object
    assert g.changes(lambda: " recipes", (), ENDING) == []  # the value goes on: nothing changes
    g.feed('", "max_results": 10')
    assert g.changes(lambda: ",", (), ENDING) == [(2, 5.5), (4, 5.5)]
    assert g.changes(lambda: "}}", (), ENDING) == []  # closing anyway
    ending = enders(ENCODE, chr)  # one token per character: the first characters of the ending texts
    assert dict(ending) == {ord("}"): "}", ord(" "): " ", ord('"'): '"'}
    assert g.changes(lambda: ",", (), ending) == [(ord("}"), 5.5)]  # only the tokens that do end them


def test_nothing_changes_before_every_required_argument_is_written():
    g = _guard('{"name": "set_reminder", "arguments": {"message": "call mom')
    assert not g.deciding and g.changes(lambda: '",', (), ENDING) == []
    g.feed('", "minutes": 30')
    assert g.deciding and g._next(",") == "more" and g._next(', "') == "more" and g._next("0") is None


def test_nested_values_unknown_tools_and_no_bias_are_left_alone():
    g = _guard('{"name": "search_web", "arguments": {"query": {"a": 1')
    assert not g.deciding  # inside a nested object
    g.feed("}")
    assert g.deciding  # back at the arguments' level, after the value
    assert not _guard('{"name": "other", "arguments": {"x": 1').deciding
    assert not _guard('{"name": "search_web", "arguments": {"query": "x"', bias=0).deciding
    assert not _guard('{"name": "search_web", "arguments": {"query": "x"', starts=["<tool_call>"]).deciding  # no start
    assert CallGuard.from_args(CallGuard([], REQUIRED, 2).to_args()).required == REQUIRED


def test_the_second_call_of_an_answer_is_read_afresh():
    g = _guard('<tool_call>\n{"name": "search_web", "arguments": {"query": "a"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "set_reminder", "arguments": {"message": "b"')
    assert g.reader.name == "set_reminder" and g.reader.keys == {"message"} and not g.deciding


def test_the_request_carries_each_tools_required_arguments_and_the_measured_bias():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}},
             {"type": "function", "function": {"name": "g"}}]
    msgs = [{"role": "user", "content": "x"}]
    g = prepare(tools=tools, messages=msgs, tool_trained=True, env={}).call_guard()
    assert g.required == {"f": ["a"], "g": []} and g.close_bias == DEFAULTS[True].close_bias
    assert prepare(tools=tools, messages=msgs, env={}).call_guard().close_bias == DEFAULTS[False].close_bias


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]",:\\ abc\n0', max_size=80), st.text(alphabet='{}[]",:\\ ab', max_size=6))
def test_the_reader_never_raises_on_model_text(text, top):
    g = CallGuard([], {"a": [], "b": ["a"]}, 3)
    g.feed(text)
    g.changes(lambda: top, (9,), ENDING)


@pytest.mark.parametrize("args", [
    {"toolbridge_bias": 1, "toolbridge_bias_ids": ["x"]},
    {"toolbridge_bias": "much", "toolbridge_bias_ids": [1]},
    {"toolbridge_bias": 1, "toolbridge_bias_ids": [1], "toolbridge_name_ids": 7},
    {"toolbridge_bias": 1, "toolbridge_bias_ids": [1], "toolbridge_name_ids": ["ab", "cd"]},
    {"toolbridge_call_guard": 3},
    {"toolbridge_call_guard": [], "toolbridge_close": ["y", "z"]},
    {"toolbridge_call_guard": [], "toolbridge_close": [1, [2]]},
])
def test_rule_arguments_not_of_toolbridges_making_are_ignored(args):
    """A client can send vLLM request arguments named like toolbridge's own; the logits processor
    must not raise on them (it runs in the engine, for every request in the batch)."""
    assert Steering.from_args(args) is None and CallGuard.from_args(args) is None
