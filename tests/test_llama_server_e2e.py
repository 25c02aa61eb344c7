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
"length" (python -m llamacpp_ext steers only the answer's first token and drops a call cut off).
What llama-server decides itself is tested as it is and documented in the README: a named
`tool_choice` falls back to `auto`, an unknown tool there is not an error, its `required`
grammar lets text come before the call, and `parallel_tool_calls: false` does not stop a
second call under `auto`.
"""
from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from servers import ROOT, Server, free_port, llama_server_binary
from test_llamacpp_e2e import ask, valid
# the same text-answer checks as for python -m llamacpp_ext, collected here, so they run against
# this module's `client` and `lt_bias` (stock llama-server)
from test_llamacpp_e2e import test_auto_answers_in_text, test_none  # noqa: F401
from test_render import HISTORY, NESTED
from test_templates import CONVERSATION, FORGERY
from test_templates import TOOLS as RENDER_TOOLS
from toolsets import READ, SEARCH, WEATHER

pytestmark = pytest.mark.llamaserver

TOOLS = [WEATHER, SEARCH, READ]
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


def gguf() -> str:
    from toolbridge.embedded import gguf_path

    return str(gguf_path())


def start(template: str, threads: int = 1, extra: tuple = ()) -> Server:
    port = free_port()
    argv = [llama_server_binary(), "-m", gguf(), "--jinja", "--chat-template-file", template, "--host", "127.0.0.1",
            "--port", str(port), "-c", "8192", "-t", str(threads), "-tb", str(threads), "--no-webui", *extra]
    return Server(argv, port, ready_path="/health", timeout=120).start()


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
    from toolbridge.render import compile_template

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
def server():
    s = start(str(ROOT / "templates" / "chatml.jinja"))
    yield s
    s.stop()


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


# -- every packaged family is read as the tags format --------------------------------------------

@pytest.mark.parametrize("family", [*FAMILIES, "wrapped-gguf"])
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
