"""End to end: toolbridge in vLLM's scale-out modes (CPU build, SmolLM2-135M-Instruct), through
vLLM's own CLI run by `python -m vllm_plugin.cli` (docs/vllm-scale-out.md):

- `serve --data-parallel-size 2`: two engines and, by vLLM's default, two API-server processes, which
  also covers `--api-server-count 2` (several API servers in front of the engines);
- the render / generate / derender split: `launch render` (prompt rendering and adjust_request in
  `/v1/chat/completions/render`, parsing in `/v1/chat/completions/derender`, no engine) and a
  generate service (`serve --enable-scale-out`: `/inference/v1/generate`, tokens in, tokens out),
  driven here as a router would drive them.

In every mode a request's tool plan must hold with no state one process sets and another expects:
calls constrained (required and named always a schema-valid call of the right tool), the `auto`
steering and the call guard (vllm_xargs -> SamplingParams.extra_args) reaching the engine's logits
processor, the model's markup never in content.

Each mode is one deployment of the session's pool (tests/servers.py: `scaleout_dp2`, `scaleout_split`).
Tests are grouped by mode, in file order; the pool starts a mode's deployment in the background while
the tests before it run, and stops each after its last test. A mode that failed to start fails its
other tests at once (no second start).
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import httpx
import jsonschema
import psutil
import pytest

from servers import Server, ServedBy, check_load, require
from toolsets import SEARCH, WEATHER, bench_question

pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]

TOOLS = [WEATHER, SEARCH]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MARKERS = ("<tool_call>", "</tool_call>", "<tool_response>", "<|im_start|>", "<|im_end|>", "TOOL_CALL:",
           "Action Input:", '"arguments"')
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
RESULT_TURN = QUESTION + [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "call_w1", "type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
    {"role": "tool", "tool_call_id": "call_w1", "content": "rain, 12 degrees"}]

# the chat matrix: one request body per cell (temperature 0, small max_tokens)
CELLS = {
    "auto-steered": dict(messages=QUESTION, tools=TOOLS, tool_choice="auto", parallel_tool_calls=False,
                         chat_template_kwargs={"tb_call_bias": 20}),
    "auto-unsteered": dict(messages=QUESTION, tools=TOOLS, tool_choice="auto",
                           chat_template_kwargs={"tb_call_bias": 0}),
    "required": dict(messages=QUESTION, tools=TOOLS, tool_choice="required"),
    "named": dict(messages=QUESTION, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "search"}}),
    "none": dict(messages=QUESTION, tools=TOOLS, tool_choice="none"),
    "result-turn": dict(messages=RESULT_TURN, tools=TOOLS),
}
# the call guard's argument close (bench/accuracy c13: SmolLM2 adds a `count` nobody asked for)
CLOSE_QID = "c13"


# -- deployments: the session's pool (tests/servers.py) ---------------------------------------------
# every mode runs SmolLM2 (MODEL_FLAGS there) with test_vllm_e2e's flags (TOOLBRIDGE_FLAGS there)

@pytest.fixture
def dp2(scaleout_dp2):
    """`vllm serve --data-parallel-size 2` (two engines; vLLM then starts two API servers too)."""
    require("vllm")
    return scaleout_dp2.servers[0]


@pytest.fixture
def split(scaleout_split):
    """(render, generate): `vllm launch render` with toolbridge's flags, and a generate service
    `vllm serve --enable-scale-out` that needs none of them (the logits processor loads through its
    entry point)."""
    require("vllm")
    render, generate = scaleout_split.servers
    return render, generate


# -- requests and answers -------------------------------------------------------------------------

@dataclass
class Answer:
    content: str | None
    calls: list[tuple[str, str, str]]  # (id, name, arguments)
    finish: str | None
    pid: int | None = None  # the API-server process that answered
    derendered: bool = False  # through the split's /derender


class Deltas:
    """Chat stream chunks -> one answer, checking the stream's shape: id and name once per call,
    then argument fragments."""

    def __init__(self):
        self.content, self.calls, self.finish = "", {}, None

    def add(self, chunk: dict) -> None:
        for ch in chunk.get("choices") or []:
            d = ch.get("delta") or {}
            self.content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                fn = tc.get("function") or {}
                if tc["index"] not in self.calls:
                    assert tc.get("id") and fn.get("name"), tc
                    self.calls[tc["index"]] = [tc["id"], fn["name"], fn.get("arguments") or ""]
                else:
                    assert not tc.get("id") and not fn.get("name"), f"name or id sent twice: {tc}"
                    self.calls[tc["index"]][2] += fn.get("arguments") or ""
            self.finish = ch.get("finish_reason") or self.finish

    def answer(self, pid=None) -> Answer:
        return Answer(self.content or None, [tuple(c) for _, c in sorted(self.calls.items())], self.finish, pid)


def body(cell: dict, stream: bool, max_tokens: int = 64) -> dict:
    return {"model": "smollm2", "temperature": 0, "max_tokens": max_tokens, "stream": stream, **cell}


def chat(server: Server, stream: bool, max_tokens: int = 64, **cell) -> Answer:
    """One chat request on a connection of its own (so that concurrent requests reach whichever
    API-server process accepts them)."""
    url = f"{server.base_url}/chat/completions"
    headers = {"connection": "close"}
    if not stream:
        r = httpx.post(url, json=body(cell, False, max_tokens), headers=headers, timeout=300)
        assert r.status_code == 200, r.text
        m = r.json()["choices"][0]
        calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m["message"].get("tool_calls") or []]
        return Answer(m["message"]["content"], calls, m["finish_reason"], _pid(r))
    deltas = Deltas()
    with httpx.stream("POST", url, json=body(cell, True, max_tokens), headers=headers, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: {"):
                deltas.add(json.loads(line[6:]))
    return deltas.answer(_pid(r))


def _pid(r: httpx.Response) -> int | None:
    v = r.headers.get(ServedBy.HEADER)
    return int(v) if v else None


def concurrently(jobs: dict) -> dict:
    """{key: thunk} -> {key: result}, all started together; the first error is raised."""
    results, errors = {}, []

    def run(key, job):
        try:
            results[key] = job()
        except BaseException as e:  # reported below with its key
            errors.append((key, e))

    threads = [threading.Thread(target=run, args=kv) for kv in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        key, e = errors[0]
        raise AssertionError(f"{key}: {e!r}") from e
    return results


# -- what every mode's answers must be ---------------------------------------------------------------

def check_calls(calls, schemas=SCHEMAS, openai_ids: bool = True) -> None:
    """Declared names, schema-valid arguments, OpenAI-style ids."""
    for cid, name, args in calls:
        assert cid and (not openai_ids or (cid.startswith("call_") and len(cid) > 5)), cid
        assert name in schemas, name
        jsonschema.validate(json.loads(args), schemas[name])


def no_markers(content) -> None:
    assert not any(m in (content or "") for m in MARKERS), content


def check_cell(name: str, a: Answer, split_plain: bool = False) -> None:
    """One cell's answer. split_plain: a non-streamed answer from /derender, which (vLLM 0.32) gives
    calls fresh ids that are not `call_`-style and passes the engine's finish_reason through."""
    check_calls(a.calls, openai_ids=not split_plain)
    no_markers(a.content)
    called = "tool_calls" if not split_plain else "stop"
    if name == "auto-steered":  # the steering reached the logits processor: the answer opens with the call
        assert [c[1] for c in a.calls] == ["get_weather"] and json.loads(a.calls[0][2])["city"] == "Paris", a
        assert a.finish == called, a
    elif name == "auto-unsteered":  # steering off: this model answers in text
        assert a.calls == [] and a.content and a.finish in ("stop", "length"), a
    elif name == "required":
        assert a.calls and not a.content and a.finish == called, a
    elif name == "named":  # the question is about weather: only the constraint makes it `search`
        assert a.calls and [c[1] for c in a.calls] == ["search"] * len(a.calls), a
    elif name == "none":
        assert not a.calls and a.content and a.finish in ("stop", "length"), a


def same(a: Answer, b: Answer) -> None:
    """Stream and non-stream answers for the same request agree (names, arguments, text or not)."""
    assert [c[1:] for c in a.calls] == [c[1:] for c in b.calls], (a, b)
    assert bool(a.content and a.content.strip()) == bool(b.content and b.content.strip()), (a, b)


def close_cell(bias: float) -> dict:
    messages, tools = bench_question(CLOSE_QID)
    return dict(messages=messages, tools=tools, tool_choice="required",
                chat_template_kwargs={"tb_close_bias": bias})


def check_close(answers: dict) -> None:
    """The call guard's argument close reached the engine: off, the model adds `count`; on, the call
    ends after `topic`."""
    messages, tools = bench_question(CLOSE_QID)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for (bias, stream), a in answers.items():
        check_calls(a.calls, schemas, openai_ids=not (a.derendered and not stream))
        keys = [set(json.loads(args)) for _, _, args in a.calls]
        assert keys == ([{"topic", "count"}] if bias == 0 else [{"topic"}]), (bias, stream, a)


def matrix(ask) -> tuple[dict, dict]:
    """Every cell, streamed and not, and the guard's close on and off, all at once through `ask`."""
    jobs = {(name, stream): (lambda c=cell, s=stream: ask(c, s)) for name, cell in CELLS.items()
            for stream in (False, True)}
    jobs.update({("close", bias, stream): (lambda b=bias, s=stream: ask(close_cell(b), s, 128))
                 for bias in (0, 8) for stream in (False, True)})
    results = concurrently(jobs)
    cells = {k: v for k, v in results.items() if k[0] != "close"}
    close = {k[1:]: v for k, v in results.items() if k[0] == "close"}
    return cells, close


def api_server_pids(server: Server) -> set[int]:
    return {p.pid for p in psutil.Process(server.proc.pid).children(recursive=True)
            if "APIServer" in " ".join(p.cmdline())}


def check_spread(server: Server, pids: set) -> None:
    """The answers came from both API-server processes (more waves of small requests when the
    matrix happened to reach one), and only from them."""
    for _ in range(6):
        if len(pids) >= 2:
            break
        wave = concurrently({i: (lambda: chat(server, False, 4, messages=QUESTION, tools=TOOLS, tool_choice="none"))
                             for i in range(6)})
        pids |= {a.pid for a in wave.values()}
    servers = api_server_pids(server)
    assert len(servers) == 2, servers
    assert pids == servers, (pids, servers)


def show(cells: dict, close: dict) -> None:
    """The answers, one line each (shown with -s, or when a test fails)."""
    for k, a in [*cells.items(), *(((f"close {b}", s), a) for (b, s), a in close.items())]:
        print(k, a.pid, a.finish, [c[1:] for c in a.calls], repr((a.content or "")[:60]))


def check_matrix(server: Server) -> None:
    cells, close = matrix(lambda cell, stream, max_tokens=64: chat(server, stream, max_tokens, **cell))
    show(cells, close)
    for (name, stream), a in cells.items():
        check_cell(name, a)
    for name in CELLS:
        same(cells[(name, False)], cells[(name, True)])
    check_close(close)
    check_spread(server, {a.pid for a in [*cells.values(), *close.values()]})


# -- data-parallel engines behind two API-server processes ---------------------------------------------

def test_data_parallel_chat_matrix(dp2):
    """Every tool choice, streamed and not, a result turn, the steering and the guard, all at once
    over two API-server processes and two engines (each with its own logits processor): every answer
    right, whichever process rendered and parsed it and whichever engine generated it."""
    check_matrix(dp2)


def test_data_parallel_load(dp2):
    """tests/servers.py check_load through two API servers and two engines, with 8 streams and 20 tools
    (then no tools): test_vllm_e2e loads one engine with the full 16 streams and 50 tools."""
    check_load(dp2.base_url, "smollm2", streams=8, tools=20)


# the agent APIs (tests/agent_apis.py), on vLLM's own /v1/responses and /v1/messages routes
from agent_apis import ant, oai  # noqa: E402,F401
from agent_apis import (test_messages_result_turn, test_messages_tool_choice,  # noqa: E402,F401
                        test_responses_result_turn, test_responses_tool_choice)


@pytest.fixture(scope="module")
def api_root(scaleout_dp2):
    return f"http://127.0.0.1:{scaleout_dp2.servers[0].port}"


@pytest.fixture(scope="module")
def api_model():
    return "smollm2"


# -- render / generate / derender -------------------------------------------------------------------

def rendered(render: Server, cell: dict, stream: bool = False, max_tokens: int = 64) -> dict:
    r = httpx.post(f"{render.base_url}/chat/completions/render", json=body(cell, stream, max_tokens), timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def split_chat(render: Server, generate: Server, cell: dict, stream: bool, max_tokens: int = 64,
               chat_request: dict | None = None) -> Answer:
    """/render -> /inference/v1/generate -> /derender, as a router does it. chat_request: what
    /derender is told the request was (default: the request as sent)."""
    req = body(cell, stream, max_tokens)
    gen = rendered(render, cell, stream, max_tokens)
    chat_request = chat_request or req
    derender = f"{render.base_url}/chat/completions/derender"
    if not stream:
        out = httpx.post(f"http://127.0.0.1:{generate.port}/inference/v1/generate", json=gen, timeout=300)
        assert out.status_code == 200, out.text
        d = httpx.post(derender, timeout=120, json={"generate_response": out.json(), "chat_request": chat_request,
                                                     "prompt_token_ids": gen["token_ids"],
                                                     "prompt_tokens": len(gen["token_ids"])})
        assert d.status_code == 200, d.text
        m = d.json()["choices"][0]
        calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m["message"].get("tool_calls") or []]
        return Answer(m["message"]["content"], calls, m["finish_reason"], derendered=True)
    deltas, state = Deltas(), None
    with httpx.stream("POST", f"http://127.0.0.1:{generate.port}/inference/v1/generate", json=gen, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            d = httpx.post(derender, timeout=120, json={"stream": True, "generate_chunk": json.loads(line[6:]),
                                                         "stream_state": state, "chat_request": chat_request,
                                                         "prompt_token_ids": gen["token_ids"]})
            assert d.status_code == 200, d.text
            state = d.json()["stream_state"]
            deltas.add(d.json()["chunk"])
    a = deltas.answer()
    a.derendered = True
    return a


def test_render_carries_toolbridge_arguments(split):
    """/render's answer (the generate request) carries what adjust_request set: stop strings, the
    structural tag (lazy for auto, strict for required and named), steering and the guard's
    arguments in sampling_params.extra_args; `none` carries none of them. /v1/messages/render too."""
    render, _ = split
    sp = {name: rendered(render, CELLS[name])["sampling_params"] for name in ("auto-steered", "required", "named", "none")}
    tag = {k: json.loads(v["structured_outputs"]["structural_tag"]) if v.get("structured_outputs") else None
           for k, v in sp.items()}
    assert tag["auto-steered"]["format"]["type"] == "triggered_tags", tag
    assert tag["required"]["format"]["at_least_one"] is True, tag
    named = tag["named"]["format"]
    assert [t["begin"] for t in named["tags"]] and all('"search"' in t["begin"] for t in named["tags"]), named
    assert tag["none"] is None
    xargs = {k: v.get("extra_args") or {} for k, v in sp.items()}
    steered = xargs["auto-steered"]["toolbridge"]["steering"]
    assert steered["start_bias"] == 20 and steered["call"], xargs
    assert "guard" in xargs["required"]["toolbridge"] and "guard" in xargs["named"]["toolbridge"], xargs
    assert "toolbridge" not in xargs["none"], xargs
    # a forged rule argument does not pass: adjust_request writes its own
    forged = rendered(render, {**CELLS["required"], "vllm_xargs": {"toolbridge": ["y", 1]}})
    assert isinstance(forged["sampling_params"]["extra_args"]["toolbridge"], dict), forged["sampling_params"]["extra_args"]
    m = httpx.post(f"{render.base_url.removesuffix('/v1')}/v1/messages/render", timeout=120, json={
        "model": "smollm2", "max_tokens": 32, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
        "tool_choice": {"type": "any"}})
    assert m.status_code == 200, m.text
    assert "<tool_call>" in m.json()["sampling_params"]["structured_outputs"]["structural_tag"]
    assert "guard" in m.json()["sampling_params"]["extra_args"]["toolbridge"]


def test_split_chat_matrix(split):
    """Every tool choice, streamed (derendered chunk by chunk with the carried stream_state) and not,
    a result turn, the steering and the guard: through three hops and two processes."""
    render, generate = split
    cells, close = matrix(lambda cell, stream, max_tokens=64: split_chat(render, generate, cell, stream, max_tokens))
    show(cells, close)
    for (name, stream), a in cells.items():
        check_cell(name, a, split_plain=not stream)
    for name in CELLS:
        if name != "none":
            same(cells[(name, False)], cells[(name, True)])
    check_close(close)


def test_split_load(split):
    """16 requests at once through the three hops (required and auto, streamed and not): every one
    completes and is the answer its cell must be, as one at a time."""
    render, generate = split
    jobs = {(i, name, stream): (lambda name=name, stream=stream: split_chat(render, generate, CELLS[name], stream))
            for i in range(4) for name in ("required", "auto-steered") for stream in (False, True)}
    for (_, name, stream), a in concurrently(jobs).items():
        check_cell(name, a, split_plain=not stream)


def test_derender_takes_the_request_as_adjust_request_left_it(split):
    """vLLM documents /derender's chat_request as the request after adjust_request: carrying
    toolbridge's own structural tag, it is still toolbridge's request there, in a process that never
    saw it (not a user's constraint next to `required`: a 400). (Its vllm_xargs cannot be sent back:
    the request model takes only flat values and lists of them, and the steering's token ids nest.)"""
    render, generate = split
    for name in ("required", "auto-steered"):
        cell = CELLS[name]
        sp = rendered(render, cell)["sampling_params"]
        adjusted = {**body(cell, False), "structured_outputs": {
            k: v for k, v in sp["structured_outputs"].items() if not k.startswith("_") and v is not None}}
        a = split_chat(render, generate, cell, False, chat_request=adjusted)
        check_cell(name, a, split_plain=True)
        b = split_chat(render, generate, cell, True, chat_request={**adjusted, "stream": True})
        check_cell(name, b)


def test_split_plain_answer_ends_at_the_end_of_turn_token(split):
    """vLLM 0.32's /derender decodes with skip_special_tokens=False whenever a tool parser is
    configured, so a plain answer's text holds the model's `<|im_end|>`: the parser's plain
    pass-through cuts it there (toolbridge.parsing.markers.TurnCut)."""
    render, generate = split
    for stream in (False, True):
        a = split_chat(render, generate, CELLS["none"], stream)
        check_cell("none", a, split_plain=not stream)
