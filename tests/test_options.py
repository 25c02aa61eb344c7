"""Per-request options: keys, environment, the defaults for each kind of model."""
import pytest

from toolbridge.options import DEFAULTS, resolve
from toolbridge.request import prepare


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


def test_tool_choice_none_stops_at_the_dialects_call_and_result_tags():
    """A text answer with tools in play ends where a model copying its history would write markup."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    msgs = [{"role": "user", "content": "hi"}]
    assert prepare(tools=tools, tool_choice="none", messages=msgs, stop=["END"], env={}).stop == (
        "END", "<tool_call>", "<tool_response>", "</tool_response>")
    assert prepare(tools=tools, tool_choice="none", messages=msgs, env={"TOOLBRIDGE_DIALECT": "fenced"}).stop == ()
    assert prepare(tools=None, messages=msgs, env={}).stop == ()


def test_the_next_call_bias_needs_an_answer_that_may_hold_several_calls():
    tools = [{"type": "function", "function": {"name": "f"}}]
    msgs = [{"role": "user", "content": "x"}]
    req = prepare(tools=tools, messages=msgs, template_kwargs={"tb_call_bias": 0, "tb_next_bias": 6}, env={})
    assert req.steer and req.next_bias == 6.0  # steering on for the next call alone
    assert prepare(tools=tools, messages=msgs, parallel_tool_calls=False, tool_trained=True, env={}).next_bias == 0.0
    assert prepare(tools=tools, messages=msgs, tool_trained=True, env={}).next_bias == DEFAULTS[True].next_bias
    assert resolve({}, env={"TOOLBRIDGE_NEXT_BIAS": "4"}).next_bias == 4.0
    off = prepare(tools=tools, messages=msgs, template_kwargs={"tb_call_bias": 0, "tb_next_bias": 0}, env={})
    assert not off.steer
