"""The adapters' own logic without a server: OpenAI deltas from parser events (core), vLLM's
delta messages and bookkeeping, llama.cpp's request rewriting, response and chunks.

The llama.cpp answer is driven by a scripted session that hands it fixed text (the model's
part); everything after the text, the parser, deltas, finish reasons, is the real code.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from toolbridge.deltas import delta, message
from toolbridge.request import prepare

from servers import require
from toolsets import SEARCH, TOOLS, WEATHER, ids

CALLS = ('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": "2"}}\n</tool_call>\n'
         '<tool_call>{"name": "search", "arguments": {"query": "rain"}}</tool_call>')
PARIS = [{"role": "user", "content": "Weather in Paris?"}]


def split(text: str, cuts: list[int]) -> list[str]:
    cuts = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def client_view(deltas: list[dict]) -> tuple[str, list[dict]]:
    """What an OpenAI client assembles from deltas; checks id/name come once per call."""
    content, calls = "", {}
    for d in deltas:
        content += d.get("content", "")
        for tc in d.get("tool_calls", []):
            if tc["index"] not in calls:
                assert tc["id"].startswith("call_") and tc["type"] == "function" and tc["function"]["name"]
                calls[tc["index"]] = {"id": tc["id"], "name": tc["function"]["name"], "arguments": ""}
            else:
                assert "id" not in tc and "name" not in tc["function"]
            calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
    return content, [calls[i] for i in sorted(calls)]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 400), max_size=12))
def test_deltas_assemble_to_the_parsed_answer_for_any_split(cuts):
    req = prepare(tools=TOOLS, messages=PARIS)
    whole = req.parse(CALLS)
    p = req.parser(id_factory=ids())
    deltas = [d for piece in split(CALLS, cuts) for d in [delta(p.feed(piece))] if d]
    deltas += [d for d in [delta(p.finish())] if d]
    content, calls = client_view(deltas)
    assert content == whole.content
    assert [(c["name"], c["arguments"]) for c in calls] == [(c.name, c.arguments) for c in whole.calls]


def test_message_shape():
    r = prepare(tools=TOOLS, messages=PARIS).parse(CALLS)
    m = message(r.content, r.calls)
    assert m["content"] == "Sure." and [c["function"]["name"] for c in m["tool_calls"]] == ["get_weather", "search"]
    assert json.loads(m["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris", "days": 2}
    assert message(None, r.calls)["content"] is None  # only calls: null
    assert message(None, []) == {"role": "assistant", "content": ""}  # nothing at all: ""


# -- vLLM ------------------------------------------------------------------------------------------

def test_vllm_delta_messages_and_bookkeeping():
    require("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from vllm_plugin import ToolbridgeToolParser

    request = ChatCompletionRequest.model_validate({"model": "m", "messages": PARIS, "tools": TOOLS})
    parser = ToolbridgeToolParser(None)
    got = [parser.extract_tool_calls_streaming("", "", piece, [], [], [], request) for piece in split(CALLS, [7, 31, 80])]
    got.append(parser.finish_streaming())
    deltas = [m.model_dump(exclude_none=True) for m in got if m is not None]
    for d in deltas:
        for tc in d.get("tool_calls", []):
            tc["function"].setdefault("arguments", "")
    content, calls = client_view(deltas)
    final = parser.extract_tool_calls(CALLS, request)
    assert content == final.content == "Sure."
    assert [(c["name"], c["arguments"]) for c in calls] == [(c.function.name, c.function.arguments)
                                                            for c in final.tool_calls]
    # vLLM's end-of-stream flush compares these with what was streamed: nothing may be left over
    assert parser.streamed_args_for_tool == [c["arguments"] for c in calls]
    assert [a["arguments"] for a in parser.prev_tool_call_arr] == parser.streamed_args_for_tool


# -- llama.cpp -------------------------------------------------------------------------------------

def test_llamacpp_request_rewriting():
    require("llama_cpp")
    from llamacpp_ext.fields import adapt_request

    data = {"messages": [{"role": "developer", "content": "Be brief."}, *PARIS,
                         {"role": "assistant", "content": None, "tool_calls": []},
                         {"role": "tool", "tool_call_id": "x", "content": [{"type": "text", "text": "a"},
                                                                          {"type": "text", "text": "b"}]}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}},
            "max_completion_tokens": 7}
    adapt_request(data)
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant", "tool"]
    assert data["messages"][2]["content"] == "" and data["messages"][3]["content"] == "a\nb"
    assert data["tools"][0]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert data["response_format"] == {"type": "json_object", "schema": {"type": "object"}}
    assert data["max_tokens"] == 7 and data["repeat_penalty"] == 1.0
    data = {"messages": PARIS, "repeat_penalty": 1.3, "max_tokens": 3, "max_completion_tokens": 9}
    adapt_request(data)
    assert data["repeat_penalty"] == 1.3 and data["max_tokens"] == 3  # what the request sets wins


class ScriptedSession:
    """Stands in for generation: each phase yields the next scripted text and ends as told."""

    def __init__(self, texts: list[str], ended: str):
        self.texts, self.last_ended = texts, ended
        self.ended = ""
        self.n_prompt, self.completion_tokens = 10, 0

    def prefill(self):
        pass

    def phase(self, grammar=None, triggers=None, stop=()):
        text = self.texts.pop(0) if self.texts else ""
        self.completion_tokens += len(text)
        self.ended = self.last_ended
        yield from split(text, [3, 17, 40])


@pytest.mark.parametrize("choice, finish", [("auto", "tool_calls"), ("required", "tool_calls"),
                                            ({"type": "function", "function": {"name": "search"}}, "stop")])
def test_llamacpp_response_and_chunks_agree(choice, finish):
    require("llama_cpp")
    from llamacpp_ext.generate import EOG
    from llamacpp_ext.handler import Completion

    text = '<tool_call>{"name": "search", "arguments": {"query": "rain"}}</tool_call>'
    req = prepare(tools=[WEATHER, SEARCH], tool_choice=choice, messages=PARIS)
    whole = Completion(ScriptedSession([text], EOG), req, None, [], "m").response()
    chunks = list(Completion(ScriptedSession([text], EOG), req, None, [], "m").chunks(include_usage=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"] == finish
    assert chunks[-1]["usage"] == whole["usage"] and chunks[-1]["choices"] == []
    content, calls = client_view([c["choices"][0]["delta"] for c in chunks[1:-1]])
    msg = whole["choices"][0]["message"]
    assert msg["content"] is None and not content
    assert [(c["name"], c["arguments"]) for c in calls] == [(c["function"]["name"], c["function"]["arguments"])
                                                            for c in msg["tool_calls"]]


def test_llamacpp_cut_off_call_comes_back_as_written_with_length():
    require("llama_cpp")
    from llamacpp_ext.generate import LENGTH
    from llamacpp_ext.handler import Completion

    req = prepare(tools=[WEATHER], tool_choice="required", messages=PARIS)
    r = Completion(ScriptedSession(['<tool_call>{"name": "get_weather", "arguments": {"city": "Pa'], LENGTH),
               req, None, [], "m").response()
    assert r["choices"][0]["finish_reason"] == "length"
    calls = r["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("get_weather", {"city": "Pa"})]


# -- the request guard (toolbridge.serving.asgi), as an ASGI app in front of a recording app ---------------

def guarded(body: bytes, guard_class=None) -> tuple[int, dict | None, bytes | None]:
    """(status, error body, what the app behind received) for one POST through the guard."""
    import asyncio

    from toolbridge.serving.asgi import CheckMiddleware

    seen: dict = {}

    async def app(scope, receive, send):
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    sent: list = []
    chunks = [body[:5], body[5:]]

    async def receive():
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    asyncio.run((guard_class or CheckMiddleware)(app)(scope, receive, send))
    status = sent[0]["status"]
    return status, json.loads(sent[1]["body"]) if status != 200 else None, seen.get("body")


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"', b"", b'{"messages": [], "x": "\xff"}',
                                  json.dumps({"messages": PARIS, "tools": 5}).encode(),
                                  json.dumps({"messages": PARIS, "tools": [SEARCH],
                                              "tool_choice": {"type": "function", "function": {"name": "nope"}}}).encode(),
                                  json.dumps({"messages": PARIS, "tools": [SEARCH], "tool_choice": "required",
                                              "stop": ["<tool_call>"]}).encode()])
def test_guard_refuses_bad_bodies_with_an_openai_error(body):
    status, error, passed = guarded(body)
    assert status == 400 and error["error"]["message"] and passed is None


def test_guard_passes_a_good_body_through_unchanged():
    body = json.dumps({"messages": PARIS, "tools": [SEARCH], "tool_choice": "required"}).encode()
    assert guarded(body) == (200, None, body)


QWEN_LIKE = ("{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools><|im_end|>\n"
             "{%- endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
             "{% for tc in m.tool_calls or [] %}<tool_call>\n{{ tc.function | tojson }}\n</tool_call>{% endfor %}"
             "<|im_end|>\n{% endfor %}<|im_start|>assistant\n")


def test_a_template_that_renders_tools_marks_a_tool_trained_model():
    """Both engines read the model's own template this way (llama.cpp: the GGUF's; vLLM: the
    tokenizer's) to pick the defaults measured for such models (toolbridge.options.DEFAULTS)."""
    from toolbridge.dialects import get_dialect
    from toolbridge.prompt.chat_templates import FAMILIES, renders_tools, writes_calls

    assert renders_tools(QWEN_LIKE) and writes_calls(QWEN_LIKE, get_dialect("tags"))
    lists_only = QWEN_LIKE.replace("<tool_call>\n{{ tc.function | tojson }}\n</tool_call>", "{{ tc.function.name }}")
    assert renders_tools(lists_only) and not writes_calls(lists_only, get_dialect("tags"))
    for src in (FAMILIES["chatml"].stock, None, "", "{{ raise_exception('no') }}", "{% broken"):
        assert not renders_tools(src)


def test_llamacpp_native_template_takes_only_a_tool_capable_one():
    """tb_template "native" renders with the GGUF's own template, unwrapped: only when that
    template renders tools itself and writes a past call as the request's dialect does (else
    toolbridge's steering and grammar would fight the prompt); past calls' arguments reach it
    as objects."""
    require("llama_cpp")
    from llamacpp_ext.prompt import native_template, object_arguments
    from toolbridge.dialects import get_dialect
    from toolbridge.prompt.chat_templates import FAMILIES

    assert native_template(QWEN_LIKE, get_dialect("tags")) == QWEN_LIKE
    assert native_template(QWEN_LIKE, get_dialect("react")) is None  # writes tags, not ReAct
    lists_only = QWEN_LIKE.replace("<tool_call>\n{{ tc.function | tojson }}\n</tool_call>", "{{ tc.function.name }}")
    for src in (FAMILIES["chatml"].stock, None, lists_only, "{{ raise_exception('no') }}"):
        assert native_template(src, get_dialect("tags")) is None
    history = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}]}]
    assert object_arguments(history)[0]["tool_calls"][0]["function"]["arguments"] == {"query": "x"}
    assert history[0]["tool_calls"][0]["function"]["arguments"] == '{"query": "x"}'  # not changed in place


def test_llamacpp_watch_finds_any_trigger_and_holds_what_may_become_one():
    """An auto answer watches every entry's trigger (129 for 128 tools) and the stop strings;
    what may still become one is held back, looked up by prefix, not string by string."""
    require("llama_cpp")
    from llamacpp_ext.generate import Watch

    w = Watch(["</s>"], {"<tool_call>": False, '{"name": "get_weather"': False, "Action:": True})
    anywhere = lambda at: True  # noqa: E731
    assert w.find('so {"name": "get_weather", "a', anywhere) == (3, '{"name": "get_weather"')
    assert w.find('{"name": "get_time"', anywhere) is None
    assert w.find("x</s>", anywhere) == (1, "</s>")
    assert w.find("see Action: f", lambda at: at == 0) is None  # a line-start trigger mid-line
    assert w.held('ok {"name": "get_w') == len('{"name": "get_w')
    assert w.held("ok <tool") == len("<tool") and w.held("ok") == 0 and w.held("</") == 2


def test_the_adapters_reach_the_core_through_one_module():
    """Each adapter's generation side imports the core through toolbridge.engine, its server side through
    toolbridge.serving and toolbridge.apis: a name that moves inside the core is mended in one place."""
    import ast

    root = Path(__file__).resolve().parents[1]
    allowed = ("toolbridge.engine", "toolbridge.serving", "toolbridge.apis")
    reached = {}
    for path in [*root.glob("vllm_plugin/*.py"), *root.glob("llamacpp_ext/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                if (name == "toolbridge" or name.startswith("toolbridge.")) and not name.startswith(allowed):
                    reached.setdefault(name, []).append(f"{path.parent.name}/{path.name}")
    assert reached == {}
