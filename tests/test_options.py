"""Per-request options: keys, environment, the defaults for each kind of model."""
import pytest

from pathlib import Path

from toolbridge.options import OPTIONS, PROFILES, check_environment, markdown_table, resolve
from toolbridge.request import prepare



def default(key: str, tool_trained: bool = False):
    """An option's default for the profile, as the option table gives it."""
    return next(o for o in OPTIONS if o.key == key).default_for(tool_trained)

def test_resolve_order_kwargs_then_env_then_default():
    assert resolve({}, env={}).dialect.name == "tags" and resolve({}, env={}).policy.call_bias == default("tb_call_bias")
    env = {"TOOLBRIDGE_DIALECT": "json", "TOOLBRIDGE_CALL_BIAS": "2"}
    assert (resolve({}, env=env).dialect.name, resolve({}, env=env).policy.call_bias) == ("json", 2.0)
    got = resolve({"tb_dialect": "react", "tb_call_bias": 0}, env=env)
    assert (got.dialect.name, got.policy.call_bias) == ("react", 0.0)


def test_a_tool_trained_model_gets_its_own_measured_defaults():
    assert resolve({}, env={}, tool_trained=True).policy.call_bias == default("tb_call_bias", True) < default(
        "tb_call_bias")
    assert resolve({"tb_call_bias": 5}, env={}, tool_trained=True).policy.call_bias == 5.0  # the user's wins
    assert PROFILES == ("no tool template", "tool-trained")
    req = prepare(tools=[{"type": "function", "function": {"name": "f"}}], messages=[{"role": "user", "content": "x"}],
                  tool_trained=True, env={})
    assert req.steer and req.policy.call_bias == default("tb_call_bias", True)


@pytest.mark.parametrize("kwargs", [{"tb_dialect": "xml"}, {"tb_call_bias": "lots"}, {"tb_formats": "maybe"},
                                    {"tb_word_checks": "spelling"}, {"tb_again_bias": 1}])
def test_resolve_rejects_unknown_values(kwargs):
    with pytest.raises(ValueError):
        resolve(kwargs, env={})


@pytest.mark.parametrize("env", [{"TOOLBRIDGE_GROUNDED": "1"}, {"TOOLBRIDGE_CALL_BIAS": "lots"},
                                 {"TOOLBRIDGE_DIALECT": "xml"}, {"TOOLBRIDGE_WORD_CHECKS": "spelling"}])
def test_a_bad_environment_stops_the_start(env):
    """The servers check the environment as they start (vllm_plugin.register, llamacpp_ext.server.install),
    and the error names the variable."""
    with pytest.raises(ValueError, match="^" + next(iter(env))):
        check_environment(env)


def test_a_good_environment_starts():
    check_environment({"TOOLBRIDGE_CALL_BIAS": "2", "TOOLBRIDGE_WORD_CHECKS": "asked,grounded", "PATH": "/bin"})


def test_a_server_reads_its_environment_once_as_it_starts(monkeypatch):
    """check_environment (run as each server starts) keeps the process's TOOLBRIDGE_* variables; a request
    then reads those, not os.environ again, and its own kwargs still win. Before any start, os.environ is read."""
    import toolbridge.options as options

    monkeypatch.setattr(options, "_STARTED", None)
    monkeypatch.setenv("TOOLBRIDGE_CALL_BIAS", "2")
    assert resolve().policy.call_bias == 2.0  # nothing started: read now
    check_environment()
    monkeypatch.setenv("TOOLBRIDGE_CALL_BIAS", "4")
    monkeypatch.setenv("TOOLBRIDGE_DIALECT", "json")
    assert (resolve().policy.call_bias, resolve().dialect.name) == (2.0, "tags")  # as it started
    assert resolve() is resolve()  # one value per profile, made once
    assert resolve(tool_trained=True).policy.call_bias == 2.0
    assert resolve({"tb_call_bias": 1}).policy.call_bias == 1.0
    assert resolve({"tb_call_bias": None}).policy.call_bias == default("tb_call_bias")  # null: the default
    assert resolve(env={}).policy.call_bias == default("tb_call_bias")  # a mapping given is read as it is
    check_environment()  # a server started again reads it again
    assert (resolve().policy.call_bias, resolve().dialect.name) == (4.0, "json")


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
    assert req.steer and req.decisions.next_bias == 6.0  # steering on for the next call alone
    assert prepare(tools=tools, messages=msgs, parallel_tool_calls=False, tool_trained=True, env={}).decisions.next_bias == 0.0
    assert prepare(tools=tools, messages=msgs, tool_trained=True, env={}).decisions.next_bias == default("tb_next_bias", True)
    assert resolve({}, env={"TOOLBRIDGE_NEXT_BIAS": "4"}).policy.next_bias == 4.0
    off = prepare(tools=tools, messages=msgs, template_kwargs={"tb_call_bias": 0, "tb_next_bias": 0}, env={})
    assert not off.steer


def test_every_option_reads_its_key_then_its_environment_variable():
    """The request keys and environment variables are the table's: each option resolves from its
    key over its variable over its default."""
    samples = {"dialect": ("json", "react"), "bool": (False, True), "number": (1.5, 2.5), "count": (16, 64),
               "checks": (frozenset({"asked"}), frozenset({"unrelated"}))}
    for o in OPTIONS:
        if o.key == "tb_template":
            continue  # read by the llama.cpp adapter (llamacpp_ext.prompt), a source text
        key_value, env_value = samples[o.kind]
        env = {o.env: ",".join(env_value) if o.kind == "checks" else str(env_value)}
        assert _read_back(resolve({}, env=env), o.key) == env_value
        assert _read_back(resolve({o.key: key_value}, env=env), o.key) == key_value


def _read_back(options, key):
    p = options.policy
    return {"tb_dialect": options.dialect.name, "tb_example": options.example, "tb_system_role": options.system_role,
            "tb_call_bias": p.call_bias, "tb_result_bias": p.result_bias, "tb_next_bias": p.next_bias,
            "tb_close_bias": p.close_bias, "tb_end_after_calls": p.end_after_calls, "tb_word_checks": p.word_checks,
            "tb_formats": p.formats, "tb_thinking_budget": p.thinking_budget}[key]


def test_the_readme_options_table_is_the_option_table():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme, "README's options table differs: paste toolbridge.options.markdown_table()"
    assert len(readme.splitlines()) <= 250


def test_a_thinking_budget_is_a_whole_number_of_tokens():
    assert resolve({"tb_thinking_budget": "32"}, env={}).policy.thinking_budget == 32
    assert resolve({"tb_thinking_budget": 32.0}, env={}).policy.thinking_budget == 32
    assert resolve({}, env={}).policy.thinking_budget is None
    for bad in (0, -3, 2.5, "lots", True):
        with pytest.raises(ValueError, match="tb_thinking_budget must be a whole number"):
            resolve({"tb_thinking_budget": bad}, env={})
