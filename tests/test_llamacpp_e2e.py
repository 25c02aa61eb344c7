"""End to end: `python -m llamacpp_ext` on the embedded default model (SmolLM2-135M-Instruct
GGUF, a ChatML template with no tool support), driven by the official openai client.

SmolLM2-135M never starts a call by itself under `auto`; the auto tests give the first token
of the dialect's marker ("<") a logit_bias, a sampling parameter the server honours, so the
lazy path (free text, trigger, grammar) runs for real. Every call produced under a grammar is
validated against its tool's schema with jsonschema.
"""
from __future__ import annotations

import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from jsonschema.validators import validator_for

import hostile
from request_options import check_request_options
from servers import PYTHON, Server, check_load, free_port, require
from toolsets import READ, SEARCH, WEATHER, bench_question

pytestmark = [pytest.mark.e2e, pytest.mark.llamacpp]

TOOLS = [WEATHER, SEARCH, READ]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(llamacpp_smollm2):
    """The session's shared `python -m llamacpp_ext` (tests/servers.py, LLAMACPP_SMOL_FLAGS): no --model
    and no --chat_format, so the embedded default model and the toolbridge handler."""
    require("llama_cpp")
    return llamacpp_smollm2


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def lt_bias(server) -> dict:
    """logit_bias that makes the model open its answer with '<' (the tags dialect's marker)."""
    r = httpx.post(f"http://127.0.0.1:{server.port}/extras/tokenize", json={"input": "<"}, timeout=30)
    (token,) = r.json()["tokens"]
    return {str(token): 6}


def valid(name: str, arguments: str, schemas: dict = SCHEMAS) -> dict:
    args = json.loads(arguments)
    errors = [e.message for e in validator_for(schemas[name])(schemas[name]).iter_errors(args)]
    assert not errors, (name, args, errors)
    return args


def ask(client, stream: bool, **kw):
    """One request; returns (content, calls [(id, name, arguments)], finish_reason, usage)."""
    kw.setdefault("model", "smol")
    kw.setdefault("temperature", 0)
    if not stream:
        r = client.chat.completions.create(**kw)
        ch = r.choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
        return ch.message.content, calls, ch.finish_reason, r.usage
    content, parts, finish, usage = [], {}, None, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            d = ch.delta
            if d.content:
                content.append(d.content)
            for tc in d.tool_calls or []:
                slot = parts.setdefault(tc.index, {"id": None, "names": [], "args": ""})
                if tc.id:
                    assert slot["id"] is None, "call id sent twice"
                    slot["id"] = tc.id
                if tc.function and tc.function.name:
                    slot["names"].append(tc.function.name)
                if tc.function and tc.function.arguments:
                    slot["args"] += tc.function.arguments
            if ch.finish_reason:
                finish = ch.finish_reason
    calls = []
    for index in sorted(parts):
        slot = parts[index]
        assert len(slot["names"]) == 1, f"name sent {len(slot['names'])} times"
        calls.append((slot["id"], slot["names"][0], slot["args"]))
    return ("".join(content) or None), calls, finish, usage


def check_calls(calls, names=None):
    for call_id, name, arguments in calls:
        assert call_id and call_id.startswith("call_")
        assert names is None or name in names
        valid(name, arguments)
    assert len({c[0] for c in calls}) == len(calls)


# -- tool_choice ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_required(client, stream):
    content, calls, finish, _ = ask(client, stream, messages=PARIS, tools=TOOLS, tool_choice="required",
                                    max_tokens=80)
    assert finish == "tool_calls"
    assert content is None
    assert calls
    check_calls(calls)


@pytest.mark.parametrize("stream", [False, True])
def test_named(client, stream):
    choice = {"type": "function", "function": {"name": "search"}}
    content, calls, finish, _ = ask(client, stream, messages=PARIS, tools=TOOLS, tool_choice=choice, max_tokens=80)
    assert finish == "stop"  # as OpenAI answers a named choice
    assert content is None
    assert [c[1] for c in calls] == ["search"]
    check_calls(calls)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool_choice", ["omitted", "auto"])
def test_auto_calls_lazily(client, lt_bias, stream, tool_choice):
    kw = {} if tool_choice == "omitted" else {"tool_choice": "auto"}
    content, calls, finish, _ = ask(client, stream, messages=PARIS, tools=TOOLS, max_tokens=80, logit_bias=lt_bias,
                                    parallel_tool_calls=False, **kw)
    assert finish == "tool_calls"
    assert content is None
    assert [c[1] for c in calls] == ["get_weather"]
    check_calls(calls)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("question", ["Write a haiku about the sea.", "Write two lines about autumn."])
def test_auto_answers_in_text(client, stream, question):
    """No call, and the answer starts as the model's own: the start bias made `<` win on both, and the model
    went on with tags of its own (`<sea_hokai>`, `<pre>`) until a start the bias chose was taken back."""
    content, calls, finish, _ = ask(client, stream, messages=[{"role": "user", "content": question}],
                                    tools=TOOLS, tool_choice="auto", max_tokens=60)
    assert calls == []
    assert finish in ("stop", "length")
    assert content and "<tool_call>" not in content and not content.lstrip().startswith(("<", "{"))


@pytest.mark.parametrize("stream", [False, True])
def test_none(client, lt_bias, stream):
    # even pushed towards the marker, tool_choice none gives text and no calls
    content, calls, finish, _ = ask(client, stream, messages=PARIS, tools=TOOLS, tool_choice="none", max_tokens=30,
                                    logit_bias=lt_bias)
    assert calls == []
    assert content


@pytest.mark.parametrize("stream", [False, True])
def test_second_turn_with_tool_result(client, stream):
    first = client.chat.completions.create(model="smol", messages=PARIS, tools=[WEATHER], tool_choice="required",
                                           max_tokens=60, temperature=0)
    message = first.choices[0].message
    assert message.content is None and message.tool_calls
    # the client sends the assistant message back as is (content null + tool_calls), then a tool
    # message with no name: the handler finds the tool by tool_call_id
    messages = PARIS + [message, {"role": "tool", "tool_call_id": message.tool_calls[0].id,
                                  "content": "Sunny, 31 C"}]
    content, calls, finish, _ = ask(client, stream, messages=messages, tools=[WEATHER], max_tokens=40)
    assert calls == []
    assert finish == "stop"
    assert "31" in content  # the result reached the prompt


# -- parallel calls, concurrency -------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_parallel_calls(client, lt_bias, stream):
    two = [{"role": "user", "content": "Weather in Paris and London?"}]
    content, calls, finish, _ = ask(client, stream, messages=two, tools=TOOLS, max_tokens=100, logit_bias=lt_bias)
    assert len(calls) >= 2
    check_calls(calls)
    cities = {valid(name, args).get("city") for _, name, args in calls if name == "get_weather"}
    assert {"Paris", "London"} <= cities
    # the bias may keep starting calls until max_tokens; a call cut off comes back as written, with `length`
    assert finish in ("tool_calls", "length")
    _, single, finish1, _ = ask(client, stream, messages=two, tools=TOOLS, max_tokens=100, logit_bias=lt_bias,
                                parallel_tool_calls=False)
    assert len(single) == 1 and finish1 == "tool_calls"
    check_calls(single)


EIGHT = [
    WEATHER, SEARCH, READ,
    {"type": "function", "function": {"name": "convert_currency", "parameters": {
        "type": "object", "required": ["amount", "to"], "properties": {
            "amount": {"type": "number"}, "to": {"type": "string", "enum": ["EUR", "USD", "JPY"]}}}}},
    {"type": "function", "function": {"name": "send_email", "parameters": {
        "type": "object", "required": ["to", "subject"], "properties": {
            "to": {"type": "array", "items": {"type": "string"}, "minItems": 1}, "subject": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "set_alarm", "parameters": {
        "type": "object", "required": ["hour", "minute"], "properties": {
            "hour": {"type": "integer", "minimum": 0, "maximum": 23},
            "minute": {"type": "integer", "minimum": 0, "maximum": 59}}}}},
    {"type": "function", "function": {"name": "add_event", "parameters": {
        "type": "object", "required": ["event"], "properties": {"event": {
            "type": "object", "required": ["title", "day"], "properties": {
                "title": {"type": "string"}, "day": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"}}}}}}},
    {"type": "function", "function": {"name": "rate_movie", "parameters": {
        "type": "object", "required": ["title", "stars"], "properties": {
            "title": {"type": "string"}, "stars": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
            "review": {"type": ["string", "null"]}}}}},
]


ASKS = {"get_weather": "What is the weather in Paris?", "search": "Search the web for cat pictures.",
        "read": "Show me the file notes.txt.", "convert_currency": "Convert 20 dollars to euros.",
        "send_email": "Email bob@example.com with the subject Lunch.", "set_alarm": "Wake me at 7:30.",
        "add_event": "Put lunch with Ann on my calendar for 2025-05-01.", "rate_movie": "Give the movie Up 5 stars."}


def test_eight_concurrent_streams(client):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in EIGHT}
    barrier = threading.Barrier(len(EIGHT))

    def one(spec):
        name = spec["function"]["name"]
        barrier.wait()
        _, calls, finish, usage = ask(client, True, messages=[{"role": "user", "content": ASKS[name]}],
                                      tools=[spec], tool_choice="required", max_tokens=64,
                                      stream_options={"include_usage": True})
        return name, calls, finish, usage

    with ThreadPoolExecutor(len(EIGHT)) as pool:
        results = list(pool.map(one, EIGHT))
    for name, calls, finish, usage in results:
        assert finish == "tool_calls", (name, finish)
        assert calls and all(c[1] == name for c in calls), (name, calls)
        for _, n, args in calls:
            valid(n, args, schemas)
        assert usage.completion_tokens > 0
    assert len({c[0] for _, calls, _, _ in results for c in calls}) == sum(len(r[1]) for r in results)


# -- limits, usage, sampling parameters ---------------------------------------------------------------

def test_call_cut_by_max_tokens_comes_back_as_written_with_length(client):
    """A cut-off call is returned as far as it was written, closed by repair, streamed or not, and the
    finish reason says it was cut off."""
    got = [ask(client, stream, messages=PARIS, tools=TOOLS, tool_choice="required", max_tokens=18)
           for stream in (False, True)]
    for content, calls, finish, _ in got:
        assert finish == "length" and len(calls) == 1 and not content
        assert calls[0][1] in {t["function"]["name"] for t in TOOLS} and isinstance(json.loads(calls[0][2]), dict)
    assert [c[1:] for c in got[0][1]] == [c[1:] for c in got[1][1]]


# bench/accuracy questions on which SmolLM2-135M under `required` loops inside a string value
# (`"symbol": "NVDA_SCOPE_1_2_2023_2023_2023...`) and, without the loop guard, was cut off at 128
# tokens with no call
LOOPING = ["s11", "s12", "c15", "p08"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("qid", LOOPING)
def test_required_closes_a_string_the_model_loops_in(client, qid, stream):
    messages, tools = bench_question(qid)
    _, calls, finish, _ = ask(client, stream, messages=messages, tools=tools, tool_choice="required", max_tokens=128)
    assert calls and finish == "tool_calls", (qid, calls, finish)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for _, name, args in calls:
        valid(name, args, schemas)


def test_usage(client):
    _, _, _, usage = ask(client, False, messages=PARIS, tools=TOOLS, tool_choice="required", max_tokens=60)
    _, _, _, streamed = ask(client, True, messages=PARIS, tools=TOOLS, tool_choice="required", max_tokens=60,
                            stream_options={"include_usage": True})
    assert usage.prompt_tokens > 50 and usage.completion_tokens > 5
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (usage.prompt_tokens, usage.completion_tokens)
    assert streamed.total_tokens == streamed.prompt_tokens + streamed.completion_tokens
    _, _, _, none = ask(client, True, messages=PARIS, tools=TOOLS, tool_choice="required", max_tokens=20)
    assert none is None  # only when asked


def test_sampling_parameters(client):
    story = [{"role": "user", "content": "Tell me a story about a dragon."}]
    kw = dict(messages=story, tools=TOOLS, max_tokens=24, temperature=1.2, top_p=0.9)
    # llama.cpp's logits differ in the last bits between a fresh prompt evaluation and a cached
    # prefix; a first run puts the prompt in the cache so the compared runs start alike
    ask(client, False, seed=11, **kw)
    a = ask(client, False, seed=11, **kw)[0]
    b = ask(client, False, seed=11, **kw)[0]
    c = ask(client, False, seed=12, **kw)[0]
    assert a == b
    assert a != c
    greedy = ask(client, False, messages=story, tools=TOOLS, max_tokens=24)[0]
    word = next(w for w in greedy.split()[1:] if len(w) >= 4 and w.isalpha() and greedy.index(w) > 0)
    cut, _, finish, _ = ask(client, False, messages=story, tools=TOOLS, max_tokens=24, stop=[word])
    assert finish == "stop"
    assert cut == greedy[:greedy.index(word)]
    _, _, finish, usage = ask(client, False, messages=story, tools=TOOLS, max_completion_tokens=5)
    assert finish == "length" and usage.completion_tokens == 5


def test_response_format_json_schema_without_tools(client):
    schema = {"type": "object", "additionalProperties": False, "required": ["name", "age"], "properties": {
        "name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}}
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Invent a person."}],
                                       max_tokens=60, temperature=0, response_format={
                                           "type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    data = json.loads(r.choices[0].message.content)
    assert not list(validator_for(schema)(schema).iter_errors(data))


# -- bad requests: 400 with an OpenAI error body, stream or not --------------------------------------

BAD = {
    "unknown tool in tool_choice": (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
                                    "tool_choice"),
    "parameters not a schema": (dict(tools=[{"type": "function", "function": {
        "name": "x", "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}}]),
                                "tools[0].function.parameters"),
    "parameters not an object": (dict(tools=[{"type": "function", "function": {"name": "x", "parameters": [1]}}]),
                                 "tools[0].function.parameters"),
    "tool message answers no call": (dict(tools=TOOLS, messages=PARIS + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_a", "type": "function", "function": {
            "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_b", "content": "Sunny"}]), "messages[2].tool_call_id"),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_requests_answer_400(client, case, stream):
    import openai

    kw, param = BAD[case]
    kw = {"messages": PARIS, "max_tokens": 5, **kw}
    with pytest.raises(openai.BadRequestError) as info:
        if stream:
            for _ in client.chat.completions.create(model="smol", stream=True, **kw):
                pass
        else:
            client.chat.completions.create(model="smol", **kw)
    assert info.value.status_code == 400
    error = info.value.body
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["message"]


def test_bad_grammar_is_400_not_a_crash(client, server):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="smol", messages=PARIS, max_tokens=5,
                                       extra_body={"grammar": "root ::= undefined-rule"})
    assert info.value.status_code == 400
    # in a stream the check runs once the response has started: an OpenAI error event
    with pytest.raises(openai.APIError) as info:
        for _ in client.chat.completions.create(model="smol", messages=PARIS, max_tokens=5, stream=True,
                                                extra_body={"grammar": "root ::= undefined-rule"}):
            pass
    assert info.value.body["type"] == "invalid_request_error" and info.value.body["param"] == "grammar"
    assert server.proc.poll() is None
    assert ask(client, False, messages=PARIS, max_tokens=3)[0]  # and it still answers


# -- the entry point with a config file and a packaged template / dialect -------------------------

def test_config_file_console_script(tmp_path):
    require("llama_cpp")
    import openai

    from llamacpp_ext.__main__ import default_model

    script = shutil.which("toolbridge-llamacpp") or str(Path(PYTHON).parent / "toolbridge-llamacpp")

    port = free_port()
    config = {"host": "127.0.0.1", "port": port, "models": [{
        "model": default_model(), "model_alias": "smol-json", "n_ctx": 2048, "n_threads": 1, "n_threads_batch": 1,
        "verbose": False, "chat_template_kwargs": {"tb_template": "chatml", "tb_dialect": "json"}}]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with Server([script, "--config_file", str(path)], port, timeout=300) as s:
        c = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=300)
        content, calls, finish, _ = ask(c, True, messages=PARIS, tools=TOOLS, tool_choice="required", max_tokens=80)
        assert finish == "tool_calls" and calls
        check_calls(calls)
        content, calls, _, _ = ask(c, False, messages=[{"role": "user", "content": "Say hello."}], tools=TOOLS,
                                   max_tokens=20)
        assert calls == [] and content


# -- load ------------------------------------------------------------------------------------------

def test_load_4_streams_with_20_tools(server):
    """Requests queue for the one model (llama-cpp-python serves them in turn): all complete,
    calls are valid, and a stream, once started, is never left waiting. Four streams and 20 tools,
    not vLLM's sixteen and 50: answered one at a time, each stream more only adds its 64 tokens to the
    queue, and on one thread the 50 tools' 7.4k-token prompt was most of the check's 4 to 5 minutes."""
    check_load(server.base_url, "smol", streams=4, tools=20)


# -- hostile and broken requests (tests/hostile.py) ----------------------------------------------

@pytest.mark.parametrize("case", hostile.CASES, ids=lambda c: c.name)
def test_hostile_request(server, case):
    hostile.check_case(server.base_url, "smol", case)


def test_clients_that_hang_up(server):
    hostile.cut_streams(server.base_url, "smol")


def test_fuzzed_requests(server):
    hostile.run_fuzz(server.base_url, "smol", examples=150)


# -- agent APIs: /v1/responses and /v1/messages, by translation (tests/agent_apis.py) -------------

from agent_apis import *  # noqa: E402,F401,F403  (the shared agent-API tests run against this server)
from agent_apis import ASK as API_ASK, RESPONSES_TOOLS, responses_kind  # noqa: E402


@pytest.fixture(scope="module")
def api_model():
    return "smol"


@pytest.fixture(scope="module")
def api_foreign_bad():
    return set()


from api_shapes import *  # noqa: E402,F401,F403  (every error and cut answer in the API's shape)


@pytest.fixture(scope="module")
def api_refused():
    return set()


def test_responses_store(oai):
    """A stored response is continued by previous_response_id; an unknown id, or one that asked
    not to be stored, is a 400."""
    import openai

    first = oai.responses.create(model="smol", input=API_ASK, tools=RESPONSES_TOOLS, tool_choice="required",
                                 temperature=0, max_output_tokens=64)
    call = next(i for i in first.output if i.type == "function_call")
    second = oai.responses.create(model="smol", previous_response_id=first.id, tools=RESPONSES_TOOLS,
                                  temperature=0, max_output_tokens=64,
                                  input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Sunny."}])
    assert responses_kind(second) == ("message",) and second.previous_response_id == first.id
    unstored = oai.responses.create(model="smol", input="Hi", store=False, max_output_tokens=4)
    for rid in ("resp_unknown", unstored.id):
        with pytest.raises(openai.BadRequestError) as e:
            oai.responses.create(model="smol", previous_response_id=rid, input="Hi", max_output_tokens=4)
        assert e.value.body["param"] == "previous_response_id"


def test_a_requests_own_options_take_effect(client):
    """tb_call_bias and tb_dialect in a request's chat_template_kwargs take effect, as on vLLM."""
    check_request_options(client, "smollm2")


def test_the_stock_template_is_not_a_requests_option(client):
    """tb_template names a file or family on the server: a request that sets it is refused, with a 400
    that says where it goes."""
    import openai

    with pytest.raises(openai.BadRequestError, match="served model's setting"):
        client.chat.completions.create(model="smollm2", messages=PARIS, max_tokens=4,
                                       extra_body={"chat_template_kwargs": {"tb_template": "/etc/hostname"}})
