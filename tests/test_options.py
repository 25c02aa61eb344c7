"""Per-request options and the `auto` steering, shared by both engines."""
import math

import pytest

from toolbridge.dialects import get_dialect
from toolbridge.options import DEFAULT_CALL_BIAS, resolve
from toolbridge.steer import Steering, follows_user_turn

ENCODE = lambda text: [ord(c) for c in text]  # noqa: E731 - one token per character


def test_resolve_order_kwargs_then_env_then_default():
    assert resolve({}, env={}).dialect.name == "tags" and resolve({}, env={}).call_bias == DEFAULT_CALL_BIAS
    env = {"TOOLBRIDGE_DIALECT": "json", "TOOLBRIDGE_CALL_BIAS": "2"}
    assert (resolve({}, env=env).dialect.name, resolve({}, env=env).call_bias) == ("json", 2.0)
    got = resolve({"tb_dialect": "react", "tb_call_bias": 0}, env=env)
    assert (got.dialect.name, got.call_bias) == ("react", 0.0)


@pytest.mark.parametrize("kwargs", [{"tb_dialect": "xml"}, {"tb_call_bias": "lots"}])
def test_resolve_rejects_unknown_values(kwargs):
    with pytest.raises(ValueError):
        resolve(kwargs, env={})


def test_marker_tokens_are_the_whole_trigger_and_result_marker():
    s = Steering.for_dialect(get_dialect("tags"), 5, ENCODE)
    assert (s.call, s.result, s.bias) == (tuple(ENCODE("<tool_call>")), tuple(ENCODE("<tool_response>")), 5.0)
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


def test_steering_travels_as_request_arguments():
    s = Steering((1, 2), (1, 3), 4.5)
    assert Steering.from_args(s.to_args()) == s
    assert Steering.from_args({}) is None
    assert Steering.from_args(Steering((1,), (), 0.0).to_args()) is None  # a bias of 0 is off


def test_steering_only_answers_a_user_turn():
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                                                                  "function": {"name": "f", "arguments": "{}"}}]}
    assert follows_user_turn([{"role": "user", "content": "hi"}, {"role": "system", "content": "late system"}])
    assert not follows_user_turn([{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "a", "content": "1"}])
    assert not follows_user_turn([])
