"""The `auto` steering at an answer's start (toolbridge.steer.steering), shared by both engines."""
import math

import pytest
from dataclasses import replace

from toolbridge.constrain.grammar import call_starts
from toolbridge.dialects import get_dialect
from toolbridge.request import follows_user_turn
from toolbridge.steer.args import ARG, from_args, to_args
from toolbridge.steer.steering import BAN, Steering

ENCODE = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character


def test_marker_tokens_are_the_whole_trigger_and_result_marker():
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, start_bias=5)
    assert (s.call, s.result, s.start_bias) == (tuple(ENCODE("<tool_call>")), tuple(ENCODE("<tool_response>")), 5.0)
    assert s.starts == (ord("<"), ord("{"))  # the dialect's marker and a bare JSON call, both favoured
    assert Steering.for_dialect(get_dialect("react"), ENCODE, start_bias=5).result == tuple(ENCODE("Observation"))
    assert Steering.for_dialect(get_dialect("tags"), ENCODE, start_bias=5).horizon == len("<tool_response>")


def test_steering_favours_the_call_and_cuts_a_result_where_the_markers_part():
    s = Steering((44, 19324, 79, 4350, 46), (44, 19324, 79, 7639, 46), 5.0)  # <tool_call>, <tool_response>
    assert s.changes([]) == [(44, 5.0)]
    assert s.changes([44, 19324]) == []  # still on the call's path
    assert s.changes([44, 19324, 79]) == [(7639, BAN)]  # "<tool_" -> not "response"
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

    assert set(Steering.for_dialect(get_dialect("tags"), encode, start_bias=5).starts) == {7, 8, 9, 10}


def test_a_bare_json_call_at_the_answers_start_names_a_declared_tool():
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, ["get_weather", "get_time"], start_bias=3)
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
    assert Steering.unpack(s.pack()) == s
    assert list(to_args(s, None)) == [ARG] and from_args(to_args(s, None)) == (s, None)
    named = Steering.for_dialect(get_dialect("tags"), ENCODE, ["f"], start_bias=3)
    assert Steering.unpack(named.pack()) == named
    assert Steering.unpack({}) is None and from_args({}) == from_args(None) == (None, None) and to_args(None, None) == {}
    assert Steering.unpack(Steering((1,), (), 0.0).pack()) is None  # a bias of 0 is off
    assert from_args(to_args(Steering((1,), (), 0.0), None)) == (None, None)


def test_steering_only_answers_a_user_turn():
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                                                                  "function": {"name": "f", "arguments": "{}"}}]}
    assert follows_user_turn([{"role": "user", "content": "hi"}, {"role": "system", "content": "late system"}])
    assert not follows_user_turn([{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "a", "content": "1"}])
    assert not follows_user_turn([])


def test_the_next_call_bias_travels_and_keeps_steering_on_without_a_start_bias():
    s = Steering.for_dialect(get_dialect("tags"), ENCODE, ["f"], start_bias=0, next_bias=7)
    assert Steering.unpack(s.pack()) == s and s.changes([]) == []  # nothing at the start
    assert s.after_call(["f"]) == [(t, 7.0) for t in s.starts] and s.after_call(["f", "f"]) == []
    assert Steering.for_dialect(get_dialect("tags"), ENCODE, start_bias=3).after_call(["f"]) == []
    banned = [(t, BAN) for t in (*s.starts, ord("`"))]  # `{` is a call start's first token here
    assert s.after_call(["f"], repeated=True) == s.after_call(["f", "g", "f"], repeated=True) == banned


def test_the_calls_bias_reads_which_asked_for_tools_are_called():
    s = replace(Steering.for_dialect(get_dialect("tags"), ENCODE, ["f", "g", "h"], start_bias=0, next_bias=7),
                asked=frozenset({"f", "g"}), again=3.5, enough=-5)
    assert s.after_call(["f"]) == [(t, 10.5) for t in s.starts]  # g is still asked for
    assert s.after_call(["h"]) == [(t, 10.5) for t in s.starts]
    assert s.after_call(["f", "g"]) == [(t, -5.0) for t in s.openings]  # each asked for is called
    assert s.after_call(["h", "g", "f"]) == [(t, -5.0) for t in s.openings]
    assert s.after_call(["f", "h"]) == []  # g still uncalled: the model decides alone
    one = replace(s, asked=frozenset({"f"}))
    assert one.after_call(["f"]) == [(t, 7.0) for t in s.starts]  # nothing else asked for
    assert one.after_call(["f", "f"]) == []  # one tool asked for: several calls to it may be wanted
    assert Steering.unpack(s.pack()) == s and Steering.unpack(one.pack()) == one
    alone = replace(Steering.for_dialect(get_dialect("tags"), ENCODE, ["f"], start_bias=0), asked=frozenset({"g"}), again=2.0)
    assert Steering.unpack(alone.pack()) == alone and alone.after_call(["f"]) == [(t, 2.0) for t in alone.starts]
    assert Steering.unpack({**s.pack(), "again": "nonsense"}) is None
    assert from_args({ARG: {"steering": {**s.pack(), "again": "nonsense"}}}) == (None, None)


def test_a_bias_against_calls_also_holds_back_every_opener_a_call_may_follow():
    """A tool-trained model opens a call with ``` or `{` and a newline as well as with the marker."""
    against = Steering.for_dialect(get_dialect("tags"), ENCODE, start_bias=-5)
    assert against.changes([]) == [(t, -5.0) for t in (*against.starts, ord("`"))]
    toward = Steering.for_dialect(get_dialect("tags"), ENCODE, start_bias=5)
    assert toward.changes([]) == [(t, 5.0) for t in toward.starts]  # a fence may be prose: not pushed


@pytest.mark.parametrize("dialect", ["tags", "json", "toolcall", "fenced", "react"])
def test_a_start_the_bias_chose_stands_only_once_the_model_writes_it_whole(dialect):
    s = Steering.for_dialect(get_dialect(dialect), ENCODE, ["get_weather"], start_bias=5)
    changes = s.changes([])
    for start in call_starts(get_dialect(dialect)):
        first, text = ord(start[0]), ord("I")
        assert s.bias_chose(first, text, changes)  # the model's own top was text: the bias chose the start
        assert not s.bias_chose(first, first, changes)  # the model's own top: nothing to check
        assert not s.bias_chose(text, text, changes) and not s.bias_chose(first, text, [])
        assert all(s.start_stands(start[:k]) is None for k in range(1, len(start)))  # still open
        assert s.start_stands(start) is s.start_stands(" " + start + "get") is True  # a call follows
        assert s.start_stands(start[0] + "pre>") is s.start_stands(start[:-1] + "\u00e9") is False  # stray
    assert Steering.unpack(s.pack()).texts == call_starts(get_dialect(dialect))
