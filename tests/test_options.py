"""Per-request options and the call-marker bias, shared by both engines."""
import math

import pytest

from toolbridge.dialects import get_dialect
from toolbridge.options import DEFAULT_CALL_BIAS, call_bias_tokens, resolve, result_tokens, steer, steers


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


def test_marker_tokens_are_the_whole_trigger():
    encode = lambda text: [ord(c) for c in text]  # one token per character
    assert call_bias_tokens(get_dialect("tags"), encode) == encode("<tool_call>")


def test_steering_favours_the_call_and_cuts_a_result_where_the_markers_part():
    call, result = [44, 19324, 79, 4350, 46], [44, 19324, 79, 7639, 46]  # <tool_call>, <tool_response>
    assert steer(call, result, 5.0, []) == [(44, 5.0)]
    assert steer(call, result, 5.0, [44, 19324]) == []  # still on the call's path
    assert steer(call, result, 5.0, [44, 19324, 79]) == [(7639, -math.inf)]  # "<tool_" -> not "response"
    assert steer(call, result, 5.0, [9, 44]) == []  # later in the answer: free
    assert steer(call, [], 5.0, [44]) == []


def test_result_marker_tokens_per_dialect():
    encode = lambda text: [ord(c) for c in text]
    assert result_tokens(get_dialect("tags"), encode) == encode("<tool_response>")
    assert result_tokens(get_dialect("react"), encode) == encode("Observation")


def test_steering_only_answers_a_user_turn():
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                                                                  "function": {"name": "f", "arguments": "{}"}}]}
    assert steers([{"role": "user", "content": "hi"}, {"role": "system", "content": "late system"}])
    assert not steers([{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "a", "content": "1"}])
    assert not steers([])
