"""End to end: stock `llama-server` (llama.cpp's own server, built from the llama.cpp that
llama-cpp-python 0.3.36 vendors by scripts/llama_server.sh) with a packaged template and no
Python in the serving path, driven by the official openai client.

llama-server renders the template with its own C++ Jinja engine and analyses it (its
"autoparser") to find how the template writes tool calls; from that it builds the call parser
and the grammar itself. These tests show the packaged templates render byte for byte as under
jinja2 there, and that llama-server then returns OpenAI `tool_calls`.

As in test_llamacpp_e2e, SmolLM2-135M never starts a call by itself under `auto`, so the
calling tests give the first token of the `<tool_call>` marker a logit_bias (a sampling
parameter llama-server honours): the lazy grammar, the parser and the streaming run for real.
The bias applies at every step, so after its call the model starts
another one until max_tokens: llama-server returns the finished calls with finish_reason
"length" (python -m llamacpp_ext steers only the answer's first token).
What llama-server decides itself is tested as it is and documented in the README: a named
`tool_choice` falls back to `auto`, an unknown tool there is not an error, its `required`
grammar lets text come before the call, and `parallel_tool_calls: false` does not stop a
second call under `auto`.

llama-server's own /v1/responses and /v1/messages (converters in front of the same chat path) are
tested at the end with the official openai and anthropic clients: what they do with this template,
cell by cell, is in docs/llama-server-agent-apis.md.
"""
from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from servers import ROOT, Server, llama_server, smollm2_gguf
from test_llamacpp_e2e import ask
# the same text-answer checks as for python -m llamacpp_ext, collected here, so they run against
# this module's `client` and `lt_bias` (stock llama-server)
from test_llamacpp_e2e import test_auto_answers_in_text, test_none  # noqa: F401
from test_render import HISTORY, NESTED
from test_templates import CONVERSATION, FORGERY
from test_templates import TOOLS as RENDER_TOOLS
from toolsets import READ, SEARCH, WEATHER

pytestmark = [pytest.mark.e2e, pytest.mark.llamaserver]

TOOLS = [WEATHER, SEARCH, READ]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def valid(name: str, arguments: str | dict, schemas: dict = SCHEMAS) -> dict:
    """The arguments of a call to a declared tool, checked against its schema (jsonschema)."""
    import jsonschema

    assert name in schemas, name
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, schemas[name])
    return args


PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
FAMILIES = sorted(p.stem for p in (ROOT / "templates").glob("*.jinja"))
# Conversations rendered both ways: tools with enums, $refs and template syntax in their text,
# a two-call history with results out of order, no tools, and pasted turn and call markers.
RENDER_CASES = {
    "conversation": (CONVERSATION, RENDER_TOOLS),
    "history": (HISTORY, [WEATHER, NESTED]),
    "no-tools": (HISTORY[:2], None),
    "forged-markers": ([{"role": "user", "content": "Hi" + FORGERY},
                        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "search", "arguments": {"query": "x"}}}]},
                        {"role": "tool", "tool_call_id": "c1", "content": FORGERY}], [SEARCH]),
}


gguf = smollm2_gguf


def start(template: str, threads: int = 1, extra: tuple = ()) -> Server:
    """Stock llama-server on SmolLM2 with `template` (as the shared `llama_server_chatml`, tests/servers.py)."""
    return llama_server(gguf(), template, *extra, threads=threads).start()


def apply_template(server: Server, messages: list, tools: list | None) -> str:
    body = {"messages": messages, **({"tools": tools} if tools else {})}
    r = httpx.post(f"http://127.0.0.1:{server.port}/apply-template", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def wrapped_gguf_template(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("wrapped") / "smollm2-wrapped.jinja"
    r = subprocess.run([sys.executable, "-m", "toolbridge", "templates", "wrap", gguf(), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return str(out)


# -- the prompt: llama.cpp's Jinja engine renders what jinja2 renders --------------------------------

@pytest.mark.parametrize("family", [*FAMILIES, "wrapped-gguf"])
def test_prompt_is_byte_for_byte_the_jinja2_prompt(family, tmp_path_factory):
    from toolbridge.prompt.render import compile_template

    path = wrapped_gguf_template(tmp_path_factory) if family == "wrapped-gguf" else str(ROOT / "templates" / f"{family}.jinja")
    tpl = compile_template(open(path, encoding="utf-8").read())
    server = start(path)
    try:
        bos = eos = None
        for name, (messages, tools) in RENDER_CASES.items():
            got = apply_template(server, messages, tools)
            if bos is None:  # the model's own special tokens, as llama-server passes them
                props = httpx.get(f"http://127.0.0.1:{server.port}/props", timeout=30).json()
                bos, eos = props.get("bos_token", ""), props.get("eos_token", "")
            want = tpl.render(messages=messages, tools=tools, add_generation_prompt=True, bos_token=bos, eos_token=eos)
            assert got == want, name
    finally:
        server.stop()


# -- tool calls from stock llama-server with the packaged ChatML template ----------------------------

@pytest.fixture(scope="module")
def server(llama_server_chatml):
    """The session's shared llama-server with the packaged ChatML template (tests/servers.py)."""
    return llama_server_chatml


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def lt_bias(server) -> dict:
    """logit_bias that makes the model open its answer with '<' (the tags dialect's marker)."""
    r = httpx.post(f"http://127.0.0.1:{server.port}/tokenize", json={"content": "<"}, timeout=30)
    (token,) = r.json()["tokens"]
    return {str(token): 6}


def test_template_is_read_as_tool_capable(server):
    caps = httpx.get(f"http://127.0.0.1:{server.port}/props", timeout=30).json()["chat_template_caps"]
    assert caps["supports_tools"] and caps["supports_tool_calls"] and caps["supports_parallel_tool_calls"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool_choice", ["omitted", "auto"])
def test_auto_calls(client, lt_bias, stream, tool_choice):
    kw = {} if tool_choice == "omitted" else {"tool_choice": "auto"}
    content, calls, finish, _ = ask(client, stream, messages=PARIS, tools=TOOLS, max_tokens=80, logit_bias=lt_bias, **kw)
    assert finish in ("tool_calls", "length")
    assert not content
    assert calls and calls[0][1] == "get_weather"
    assert valid("get_weather", calls[0][2])["city"] == "Paris"
    for _, name, arguments in calls:
        valid(name, arguments)


def test_streamed_call_equals_the_whole_answer(client, lt_bias):
    kw = dict(messages=PARIS, tools=TOOLS, max_tokens=80, logit_bias=lt_bias)
    whole, streamed = ask(client, False, **kw), ask(client, True, **kw)
    assert [c[1:] for c in whole[1]] == [c[1:] for c in streamed[1]]


@pytest.mark.parametrize("stream", [False, True])
def test_required_call_is_grammar_bound(client, lt_bias, stream):
    # llama-server's own `required` grammar lets text come first (see the module docstring); once
    # the marker is written, the call is held to the tools' schemas
    content, calls, finish, _ = ask(client, stream, messages=PARIS, tools=TOOLS, tool_choice="required",
                                    max_tokens=80, logit_bias=lt_bias)
    assert finish in ("tool_calls", "length") and calls
    for _, name, arguments in calls:
        valid(name, arguments)


@pytest.mark.parametrize("stream", [False, True])
def test_second_turn_with_tool_result(client, server, lt_bias, stream):
    first = client.chat.completions.create(model="smol", messages=PARIS, tools=[WEATHER], max_tokens=60,
                                           temperature=0, logit_bias=lt_bias)
    message = first.choices[0].message
    assert message.tool_calls
    # only the first call: llama-server also returns one cut off by max_tokens (see above)
    message = {"role": "assistant", "content": "", "tool_calls": [message.tool_calls[0].model_dump()]}
    messages = PARIS + [message,
                        {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "Sunny, 31 C"}]
    # the call and its result reach the prompt in the template's own format
    prompt = apply_template(server, messages, [WEATHER])
    arguments = json.dumps(json.loads(message["tool_calls"][0]["function"]["arguments"]))
    assert f'<tool_call>\n{{"name": "get_weather", "arguments": {arguments}}}\n</tool_call>' in prompt
    assert '<tool_response>\n{"name": "get_weather", "content": "Sunny, 31 C"}\n</tool_response>' in prompt
    content, calls, finish, _ = ask(client, stream, messages=messages, tools=[WEATHER], max_tokens=40)
    assert calls == [] and finish == "stop"
    assert "31" in content


@pytest.mark.parametrize("stream", [False, True])
def test_parallel_calls(client, lt_bias, stream):
    two = [{"role": "user", "content": "Weather in Paris and London?"}]
    _, calls, finish, _ = ask(client, stream, messages=two, tools=TOOLS, max_tokens=120, logit_bias=lt_bias)
    assert len(calls) >= 2 and finish in ("tool_calls", "length")
    cities = {valid(name, args).get("city") for _, name, args in calls if name == "get_weather"}
    assert {"Paris", "London"} <= cities
    assert len({c[0] for c in calls}) == len(calls)


def test_named_choice_falls_back_to_auto(client, lt_bias):
    """llama-server does not honour a named tool_choice (it answers as under `auto`), nor
    reject an unknown one: documented in the README, checked here so a change shows."""
    kw = dict(messages=PARIS, tools=TOOLS, max_tokens=80, logit_bias=lt_bias)
    auto = ask(client, False, **kw)
    for name in ("search", "no_such_tool"):
        named = ask(client, False, tool_choice={"type": "function", "function": {"name": name}}, **kw)
        assert [c[1:] for c in named[1]] == [c[1:] for c in auto[1]]


# -- the agent APIs: stock llama-server's own /v1/responses and /v1/messages ---------------------------
# llama-server converts both into a Chat Completions body and runs its chat path (server-chat.cpp), so
# the packaged template, the autoparser and the grammars are the same as above. Measured cell by cell
# in docs/llama-server-agent-apis.md; what is tested here is what holds at temperature 0.
# Calls need the push on "<" as above: Responses passes `logit_bias` (and `stop`) through to the chat
# body, Messages passes neither logit_bias nor tool_choice "none" (only temperature, top_p, top_k, stream,
# chat_template_kwargs, stop_sequences), so its calling tests use a second server with llama-server's
# own `--logit-bias` flag. The bias applies at every step, so the model starts a second call after its
# first and is cut off by max_tokens (returned half-written); a stop sequence at the start of a second
# call ends the answer after one whole call.

AGENT_TOOLS = [WEATHER, SEARCH]
AGENT_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in AGENT_TOOLS}
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in AGENT_TOOLS]
MESSAGES_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in AGENT_TOOLS]
ASK = PARIS[0]["content"]
ONE_CALL = ["\n<tool_call>"]  # the start of a second call
MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_start|>", "<|im_end|>")
# llama-server sometimes drops a kept-alive connection right after a stream: each request on its own
CLOSE = {"Connection": "close"}


def no_markup(text: str | None) -> None:
    assert not any(m in (text or "") for m in MARKUP), repr(text)


def schema_valid(name: str, arguments: str | dict) -> dict:
    return valid(name, arguments, AGENT_SCHEMAS)  # only the two tools these requests declare


@pytest.fixture(scope="module")
def oai(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300, default_headers=CLOSE)


def anthropic_client(server):
    import anthropic

    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="unused", max_retries=0,
                               timeout=300, default_headers=CLOSE)


@pytest.fixture(scope="module")
def ant(server):
    return anthropic_client(server)


@pytest.fixture(scope="module")
def ant_pushed(lt_bias):
    """Messages on a llama-server started with `--logit-bias` on '<' (Messages drops a request's logit_bias)."""
    ((token, bias),) = lt_bias.items()
    s = start(str(ROOT / "templates" / "chatml.jinja"), extra=["--logit-bias", f"{token}+{bias}"])
    yield anthropic_client(s)
    s.stop()


def respond(oai, stream: bool, **kw):
    """One Responses request (official client); the final response. Streamed: raw events from
    responses.create(stream=True), whose function-call argument deltas must add up to each call's
    final arguments (the SDK's responses.stream helper fails here: see test_responses_stream_helper...)."""
    kw = {"model": "smol", "temperature": 0, "max_output_tokens": 64, **kw}
    if not stream:
        return oai.responses.create(**kw)
    events = list(oai.responses.create(stream=True, **kw))
    (done,) = [e for e in events if e.type == "response.completed"]
    deltas: dict = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            deltas[e.item_id] = deltas.get(e.item_id, "") + e.delta
    for item in done.response.output:
        if item.type == "function_call":
            assert deltas.get(item.id, "") == item.arguments
    return done.response


def items(response, kind: str) -> list:
    return [i for i in response.output if i.type == kind]


def output_text(response) -> str:
    return "".join(c.text for m in items(response, "message") for c in m.content if c.type == "output_text")


def message(ant, stream: bool, **kw):
    """One Messages request (official client): the final message."""
    kw = {"model": "smol", "max_tokens": 64, **kw, "extra_body": {"temperature": 0, **kw.get("extra_body", {})}}
    if not stream:
        return ant.messages.create(**kw)
    with ant.messages.stream(**kw) as s:
        for _ in s:
            pass
        return s.get_final_message()


def the_call(response) -> tuple[str, dict]:
    """The answer is one schema-valid function_call item and nothing else."""
    assert response.status == "completed"
    assert [i.type for i in response.output] == ["function_call"], response.output
    (call,) = items(response, "function_call")
    assert call.call_id and call.id and call.status == "completed"
    return call.name, schema_valid(call.name, call.arguments)


def the_tool_use(msg) -> tuple[str, dict]:
    """The answer is one schema-valid tool_use block, with stop_reason tool_use."""
    assert msg.stop_reason == "tool_use", msg
    assert [b.type for b in msg.content] == ["tool_use"], msg.content
    (block,) = msg.content
    assert block.id
    return block.name, schema_valid(block.name, block.input)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_responses_call(oai, lt_bias, tool_choice, stream):
    r = respond(oai, stream, input=ASK, tools=RESPONSES_TOOLS, tool_choice=tool_choice,
                extra_body={"logit_bias": lt_bias, "stop": ONE_CALL})
    name, args = the_call(r)
    assert name == "get_weather" and args["city"] == "Paris"


def test_responses_named_choice_is_not_honoured(oai, lt_bias):
    """llama-server reads tool_choice only as a string: an object (a named tool) is taken as
    `auto`, so the pushed model calls get_weather though search was named."""
    r = respond(oai, False, input=ASK, tools=RESPONSES_TOOLS, tool_choice={"type": "function", "name": "search"},
                extra_body={"logit_bias": lt_bias, "stop": ONE_CALL})
    assert the_call(r)[0] == "get_weather"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_none_answers_in_text(oai, stream):
    r = respond(oai, stream, input=ASK, tools=RESPONSES_TOOLS, tool_choice="none")
    assert not items(r, "function_call")
    assert output_text(r).strip()
    no_markup(output_text(r))


RESULT_INPUT = [{"role": "user", "content": ASK},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 31 C"}]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_result_turn(oai, stream):
    r = respond(oai, stream, input=RESULT_INPUT, tools=RESPONSES_TOOLS)
    assert r.status == "completed" and not items(r, "function_call")
    assert "31" in output_text(r)
    no_markup(output_text(r))


def test_responses_cut_off_reads_completed(oai):
    """Known: an answer cut off by max_output_tokens is still `completed` (no `incomplete`)."""
    r = respond(oai, False, input="Tell me a long story.", max_output_tokens=4)
    assert r.usage.output_tokens == 4 and output_text(r)
    assert r.status == "completed" and r.incomplete_details is None


def test_responses_stream_helper_cannot_follow_the_events(oai):
    """Known: llama-server's Responses events carry no output_index / sequence_number, which the
    openai SDK's responses.stream helper needs to assemble the response."""
    events = list(oai.responses.create(model="smol", input=ASK, max_output_tokens=4, temperature=0, stream=True))
    added = [e for e in events if e.type == "response.output_item.added"]
    assert added and all(getattr(e, "output_index", None) is None for e in added)
    with pytest.raises((TypeError, RuntimeError)):
        with oai.responses.stream(model="smol", input=ASK, max_output_tokens=4, temperature=0) as s:
            for _ in s:
                pass


BAD_SCHEMA = {"type": "function", "name": "x", "parameters": {"type": "nope"}}


@pytest.mark.parametrize("body", [{}, {"input": 5}, {"input": [{"foo": 1}]},
                                  {"input": ASK, "tools": RESPONSES_TOOLS, "tool_choice": "bogus"},
                                  {"input": ASK, "tools": [BAD_SCHEMA]}],
                         ids=["no-input", "input-not-a-list", "unknown-item", "bad-tool-choice", "bad-schema"])
def test_responses_bad_body_is_a_400(oai, body):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="smol", max_output_tokens=4, extra_body=body)
    err = e.value.response.json()["error"]
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error" and err["message"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("tool_choice", ["auto", "any"])
def test_messages_tool_use(ant_pushed, tool_choice, stream):
    msg = message(ant_pushed, stream, messages=PARIS, tools=MESSAGES_TOOLS, tool_choice={"type": tool_choice},
                  stop_sequences=ONE_CALL)
    name, args = the_tool_use(msg)
    assert name == "get_weather" and args["city"] == "Paris"


def test_messages_stream_equals_create(ant_pushed):
    kw = dict(messages=PARIS, tools=MESSAGES_TOOLS, tool_choice={"type": "any"}, stop_sequences=ONE_CALL)
    whole, streamed = message(ant_pushed, False, **kw), message(ant_pushed, True, **kw)
    assert the_tool_use(whole) == the_tool_use(streamed)


def test_messages_named_and_none_choices_are_mapped_away(ant_pushed):
    """Known: llama-server turns {"type": "tool"} into `required` (any tool: the pushed model calls
    get_weather though search was named) and drops {"type": "none"} (so it acts as `auto`)."""
    for choice in ({"type": "tool", "name": "search"}, {"type": "none"}):
        msg = message(ant_pushed, False, messages=PARIS, tools=MESSAGES_TOOLS, tool_choice=choice,
                      stop_sequences=ONE_CALL)
        assert the_tool_use(msg)[0] == "get_weather"


@pytest.mark.parametrize("stream", [False, True])
def test_messages_auto_answers_in_text(ant, stream):
    # not pushed, SmolLM2 never writes the marker: prose, and none of the template's markup
    msg = message(ant, stream, messages=PARIS, tools=MESSAGES_TOOLS, tool_choice={"type": "auto"})
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text.strip()
    assert msg.stop_reason in ("end_turn", "max_tokens")
    no_markup(msg.content[0].text)


RESULT_MESSAGES = [{"role": "user", "content": ASK},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                      "input": {"city": "Paris"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                 "content": "Sunny, 31 C"}]}]


@pytest.mark.parametrize("stream", [False, True])
def test_messages_tool_result_turn(ant, stream):
    msg = message(ant, stream, messages=RESULT_MESSAGES, tools=MESSAGES_TOOLS)
    assert msg.stop_reason == "end_turn" and [b.type for b in msg.content] == ["text"]
    assert "31" in msg.content[0].text
    no_markup(msg.content[0].text)


@pytest.mark.parametrize("body", [{"max_tokens": "many"},
                                  {"tools": [{"name": "x", "input_schema": {"type": "nope"}}]}],
                         ids=["bad-max-tokens", "bad-schema"])
def test_messages_bad_field_is_a_400_in_openai_shape(ant, body):
    """Known: the chat path's 400 comes in OpenAI's error shape ({"error": {...}}), not Anthropic's
    ({"type": "error", "error": {...}})."""
    import anthropic

    with pytest.raises(anthropic.BadRequestError) as e:
        ant.messages.create(model="smol", max_tokens=4, messages=PARIS, extra_body=body)
    got = e.value.response.json()
    assert e.value.status_code == 400 and got["error"]["type"] == "invalid_request_error" and got["error"]["message"]
    assert "type" not in got


def test_messages_missing_messages_is_a_500(ant):
    """Known: errors raised while converting a Messages body (here: no `messages`) are 500 server_error."""
    import anthropic

    with pytest.raises(anthropic.InternalServerError) as e:
        ant.messages.create(model="smol", max_tokens=4, messages=anthropic.omit)
    assert e.value.status_code == 500 and "messages" in e.value.response.json()["error"]["message"]


# -- every packaged family is read as the tags format --------------------------------------------

# llama.cpp finds DeepSeek-R1's own call branch in this template's text and takes R1's call markers
# instead (tests/test_thinking_templates.py, docs/llama-server.md)
READS_OWN_FORMAT = {"deepseek_r1_distill"}


@pytest.mark.parametrize("family", [*(f for f in FAMILIES if f not in READS_OWN_FORMAT), "wrapped-gguf"])
def test_autoparser_reads_the_tags_format(family, tmp_path_factory):
    """SmolLM2 only writes calls in its own ChatML turns, so for the other families the check is
    on what llama-server's template analysis found (its debug log): calls as JSON objects
    (name, arguments) between <tool_call> and </tool_call>, and from those the call grammar."""
    path = wrapped_gguf_template(tmp_path_factory) if family == "wrapped-gguf" else str(ROOT / "templates" / f"{family}.jinja")
    server = start(path, extra=["-lv", "5"])
    try:
        r = httpx.post(f"{server.base_url}/chat/completions", timeout=120, json={
            "messages": PARIS, "tools": TOOLS, "tool_choice": "required", "max_tokens": 1})
        assert r.status_code == 200, r.text
        log = server.tail(100000)
        for found in ("tool_mode: JSON_NATIVE", "per_call_start: '<tool_call>\n'", "per_call_end: '</tool_call>'",
                      "name_field: 'name'", "args_field: 'arguments'",
                      'tool-get-weather ::= "{" space "\\"name\\"" space ":" space ("\\"" "get_weather" "\\"")'):
            assert found in log, found
    finally:
        server.stop()
