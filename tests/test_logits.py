"""The per-token logit rule's core (toolbridge.steer.logits, and what it reads: toolbridge.steer.callguard and
toolbridge.steer.callreader): the shortcuts engines take to run it cheaply leave its answers unchanged."""
import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from toolbridge.dialects import get_dialect
from toolbridge.constrain.grammar import call_starts
from toolbridge.steer.logits import start_marks, token_changes
from toolbridge.steer.callguard import MAX_UNIT, MIN_COPIES, MIN_RUN, CallGuard, loops
from toolbridge.steer.callreader import CallReader
from toolbridge.steer.steering import BAN, Steering

ENCODE = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character
STARTS = call_starts(get_dialect("tags"))
REQUIRED = {"f": ["a"], "g": []}
# pieces of model text: prose, JSON, call starts and their parts
PIECES = st.sampled_from(["the", " ", "a", "<", "<tool", "_call>", "<tool_call>", "\n", '{"', "name", '": "', '"',
                          ",", "f", "g", "arguments", '": {', "a", "}", "}}", "_2023", "\\", '\\"', "[", "]", "1",
                          '{"name": "', "xy", ":"])


def loops_before(value: str) -> bool:
    """toolbridge.steer.callguard.loops as it was: every unit tried."""
    for unit in range(1, MAX_UNIT + 1):
        run = max(MIN_RUN, MIN_COPIES * unit)
        if len(value) < run:
            return False
        tail = value[-run:]
        if tail[unit:] == tail[:-unit]:
            return True
    return False


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab_0", max_size=20), st.text(alphabet="ab_0", min_size=1, max_size=40), st.integers(0, 30),
       st.text(alphabet="ab_0", max_size=3))
def test_loops_tries_fewer_units_with_the_same_answer(head, unit, copies, tail):
    value = head + unit * copies + tail
    assert loops(value) == loops_before(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_reading_text_at_once_is_reading_it_character_by_character(pieces):
    at_once, by_char = CallReader(), CallReader()
    for piece in pieces:
        at_once.feed(piece)
        for c in piece:
            by_char.step(c)
        assert at_once == by_char


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_a_waiting_guard_may_skip_text_without_a_starts_first_character(pieces):
    """What engines that read tokens do (vllm_plugin.processor): while `waiting`, text holding none of
    `firsts` goes unread; the guard arms at the same text and reads the same call."""
    everything, skipping = CallGuard(STARTS, REQUIRED, 2.0), CallGuard(STARTS, REQUIRED, 2.0)
    for piece in pieces:
        everything.feed(piece)
        if not (skipping.waiting and not any(c in piece for c in skipping.firsts)):
            skipping.feed(piece)
        assert (everything.armed, everything.reader) == (skipping.armed, skipping.reader)


def test_start_marks_mark_the_tokens_a_start_may_begin_in():
    texts = ["a", "<", "x{", "b<c", "\u00e9"]
    assert start_marks(texts, "<{") == bytearray([0, 1, 1, 1, 0, 0])  # and a last 0, read by a placeholder -1
    assert CallGuard(STARTS).firsts == "<{" and CallGuard().firsts == "" and not CallGuard().waiting
    g = CallGuard(STARTS)
    g.feed("so <tool")
    assert not g.waiting  # a start may be forming: every text is read until it is not
    g.feed(" no")
    assert g.waiting


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30), st.sampled_from(['",', ",", "}", "x", '"}}', "", " ,"]))
def test_the_guard_asks_for_the_top_token_exactly_when_it_says_it_wants_it(pieces, top):
    g = CallGuard([], REQUIRED, 3.0)
    g.feed("".join(pieces))
    asked = []
    g.changes(lambda: asked.append(1) or top, (1,), ((2, "}"),))
    assert bool(asked) == g.wants_top


def test_token_changes_is_steering_then_guard():
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, ["get_weather", "get_time"], start_bias=5)
    g = CallGuard([])
    g.feed('{"q": "' + "ab" * 30)
    assert token_changes(s, [], None, str, (9,), ()) == (s.changes([]), None)
    opening = ENCODE('{"name": "get_')
    assert token_changes(s, opening, None, str, (9,), ()) == ([], (ord("t"), ord("w")))
    assert token_changes(None, opening, g, str, (9,), ()) == ([(9, 100.0)], None)
    both = token_changes(s, [], g, str, (9,), ())
    assert both == ([*s.changes([]), (9, 100.0)], None)
    far = ENCODE("x" * s.horizon)
    assert token_changes(s, far, None, str, (), ()) == ([], None)
    result = ENCODE("<tool_")
    assert token_changes(s, result, None, str, (), ()) == ([(ord("r"), BAN)], None)


def test_right_after_a_call_the_next_call_bias_favours_every_call_start():
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, ["f"], start_bias=0, next_bias=7)
    g = CallGuard(STARTS)
    g.feed("<tool_call>\n")
    assert token_changes(s, ENCODE("x" * 40), g, str, (), ()) == ([], None)  # in no call yet
    g.feed('{"name": "f", "arguments": {"a": "}"}}')
    assert g.between
    after = token_changes(s, ENCODE("x" * 40), g, str, (), ())
    assert after == (s.after_call(["f"]), None) and {t for t, _ in after[0]} == set(s.starts)
    for piece in ("\n", "</tool", "_call>", "\n"):  # its closing markup, whole or begun
        g.feed(piece)
        assert g.between
    g.feed("The")  # text after the call: the moment has passed
    assert not g.between and token_changes(s, ENCODE("x" * 40), g, str, (), ()) == ([], None)
    g.feed('{"name": "f", "arguments": {}}')  # after the second call the model decides alone
    assert g.between and g.calls == 2 and token_changes(s, ENCODE("x" * 40), g, str, (), ()) == ([], None)
    off = Steering.for_dialect(get_dialect("tags"), ENCODE, ["f"], start_bias=5)
    assert token_changes(off, ENCODE("x" * 40), g, str, (), ()) == ([], None)  # no next-call bias: nothing


def test_the_calls_bias_reads_the_names_of_the_calls_written():
    s = replace(Steering.for_dialect(get_dialect("tags"), ENCODE, ["f", "g"], start_bias=0, next_bias=7),
                asked=frozenset({"f", "g"}), again=3, enough=-4)
    call = '<tool_call>\n{"name": "%s", "arguments": {}}\n</tool_call>\n'
    g = CallGuard(STARTS)
    g.feed(call % "f")
    assert g.between and g.called == ("f",)
    assert token_changes(s, ENCODE("x" * 40), g, str, (), ()) == ([(t, 10.0) for t in s.starts], None)
    g.feed(call % "g")
    assert g.between and g.called == ("f", "g")
    assert token_changes(s, ENCODE("x" * 40), g, str, (), ()) == ([(t, -4.0) for t in s.openings], None)


def test_after_a_call_the_answer_already_held_no_call_may_start():
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, ["f"], start_bias=5)  # no next-call bias
    g = CallGuard(STARTS)
    call = '<tool_call>\n{"name": "f", "arguments": {"a": "x"}}\n</tool_call>\n'
    g.feed(call + call.replace('"x"', '"y"'))
    assert g.between and not g.repeated and token_changes(s, ENCODE("x" * 40), g, str, (), ()) == ([], None)
    g.feed(call.replace('{"a"', '{\n  "a"'))  # the first call again, pretty-printed
    assert g.between and g.repeated and g.calls == 3
    banned = token_changes(s, ENCODE("x" * 40), g, str, (), ())
    assert banned == (s.after_call(["f", "f", "f"], repeated=True), None)
    assert {t for t, v in banned[0] if v == BAN} == {*s.starts, ord("{"), ord("`")}
    g.feed("\n```json\n")  # a fence's opening: no longer right after the call, and still nothing may open
    assert not g.between and token_changes(s, ENCODE("x" * 40), g, str, (), ()) == banned


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_between_calls_is_the_same_whatever_the_split(pieces):
    whole, split = CallGuard(STARTS), CallGuard(STARTS)
    whole.feed("".join(pieces))
    for piece in pieces:
        split.feed(piece)
    assert (whole.between, whole.calls, whole.repeated) == (split.between, split.calls, split.repeated)
