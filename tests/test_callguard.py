"""The guard of a call being generated (toolbridge.steer.callguard): loops closed, arguments closed after
the required ones; shared by both engines."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbridge.steer.args import ARG, from_args, to_args
from toolbridge.steer.callguard import MIN_RUN, CallGuard, closers, enders, loops
from test_options import default
from toolbridge.request import prepare

ENCODE = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character


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
    assert CallGuard.unpack({}) is None and from_args({}) == (None, None)
    assert CallGuard.unpack(CallGuard(["<tool_call>"]).pack()).starts == ("<tool_call>",)
    assert CallGuard.unpack(CallGuard().pack()).armed
    steering, guard = from_args(to_args(None, CallGuard(["<tool_call>"])))
    assert steering is None and guard.starts == ("<tool_call>",) and not guard.armed
    assert closers(ENCODE) == (ord('"'),)  # one token per character: every closing text starts with it


def test_each_mode_gets_its_guard():
    tools = [{"type": "function", "function": {"name": "f"}}]
    msgs = [{"role": "user", "content": "x"}]
    assert prepare(tools=tools, tool_choice="required", messages=msgs).call_guard().armed
    lazy = prepare(tools=tools, tool_choice="auto", messages=msgs).call_guard()
    assert not lazy.armed and lazy.starts == ("<tool_call>", '{"name": "')
    assert prepare(tools=tools, tool_choice="none", messages=msgs).call_guard() is None


# -- closing the arguments after the required ones (toolbridge.steer.callguard, toolbridge.steer.callreader) ----------

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
    assert CallGuard.unpack(CallGuard([], REQUIRED, 2).pack()).required == REQUIRED


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
    assert g.required == {"f": ["a"], "g": []} and g.close_bias == default("tb_close_bias", True)
    assert prepare(tools=tools, messages=msgs, env={}).call_guard().close_bias == default("tb_close_bias")


# -- only a call to a declared tool is a call (toolbridge.steer.callreader) -------------------------------

# An agent turn (Codex CLI's request, Qwen2.5-Coder-0.5B): JSON naming a tool the request does not declare,
# then the start of another object. The parser keeps both as text; so must every rule that counts calls.
UNDECLARED = ('To list the files in the current directory, use the ls command:\n```json\n'
              '{"name": "ls", "arguments": {"path": "."}}\n```\n{"name": "')


def test_json_naming_an_undeclared_tool_is_no_call_for_any_rule():
    follow = prepare(tools=[{"type": "function", "function": {"name": "shell"}}], tool_choice="auto",
                     messages=[{"role": "user", "content": "x"}], env={}).call_guard()
    assert follow.names == ("shell",) and follow.follow is not None
    for g in (follow, CallGuard.unpack(follow.pack())):
        g.feed(UNDECLARED)
        assert g.armed and g.calls == 0 and g.called == () and not g.between and not g.repeated
        assert g.tail is None  # the end after calls has nothing to hold
    anyname = CallGuard(["<tool_call>", '{"name": "'])  # no tool set given: any named call object counts
    anyname.feed(UNDECLARED)
    assert anyname.called == ("ls",)


def test_a_declared_call_after_a_non_call_counts_and_text_after_a_call_is_text():
    g = CallGuard(["<tool_call>", '{"name": "'], REQUIRED, names=list(REQUIRED))
    g.feed('{"name": "ls", "arguments": {}} then <tool_call>\n{"name": "search_web", "arguments": {"query": "a"}}')
    assert g.called == ("search_web",) and g.between
    g.feed('\n</tool_call>\n{"name": "ls", "arguments": {}}')  # a non-call after the call: no longer between calls
    assert g.called == ("search_web",) and not g.between
    g.feed('\n{"name": "search_web", "arguments": {"query": "a"}}')
    assert g.called == ("search_web", "search_web") and g.repeated and g.between


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='{}[]",:\\ abc\n0', max_size=80), st.text(alphabet='{}[]",:\\ ab', max_size=6))
def test_the_reader_never_raises_on_model_text(text, top):
    g = CallGuard([], {"a": [], "b": ["a"]}, 3)
    g.feed(text)
    g.changes(lambda: top, (9,), ENDING)


@pytest.mark.parametrize("args", [
    {ARG: {"steering": {"start_bias": 1, "call": ["x"]}}},
    {ARG: {"steering": {"start_bias": "much", "call": [1]}}},
    {ARG: {"steering": {"start_bias": 1, "call": [1], "names": 7}}},
    {ARG: {"steering": {"start_bias": 1, "call": [1], "names": ["ab", "cd"]}}},
    {ARG: {"steering": {"start_bias": 1, "call": [1], "next_bias": 2 ** 2000}}},  # too large for a float
    {ARG: {"guard": {"starts": 3}}},
    {ARG: {"guard": {"starts": [], "close": ["y", "z"]}}},
    {ARG: {"guard": {"starts": [], "close": [1, [2]]}}},
    {ARG: {"steering": 7, "guard": "x"}},
    {ARG: ["x", 3]},
    {ARG: "x"},
    {ARG: None},
    {"toolbridge_bias": 1, "toolbridge_bias_ids": [1], "toolbridge_call_guard": []},  # no longer toolbridge's
    ["x"],
])
def test_rule_arguments_not_of_toolbridges_making_are_ignored(args):
    """A client can send a vLLM request argument named like toolbridge's own; the logits processor
    must not raise on it (it runs in the engine, for every request in the batch)."""
    assert from_args(args) == (None, None)
