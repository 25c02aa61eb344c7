"""End to end: a template whose generation prompt opens a thinking block (`<think>\\n`, as DeepSeek-R1's
distills' do), on `python -m llamacpp_ext` with SmolLM2-135M and a thinking budget. SmolLM2 was not
trained to think: under the template it writes a few sentences, which the budget cuts; what this shows
is every path a reasoning model takes (the thinking phase, its close written at the budget, the answer
and its grammar after it), not a reasoning model's quality. A stream and a whole answer are two
generations here, which llama.cpp does not always make alike (prompt-cache reuse moves a tiny model's
logits), so each is checked on its own; the parser's stream and whole answers agree for the same text
(tests/test_thinking.py)."""
from __future__ import annotations

import json

import httpx
import pytest

from servers import LLAMACPP_SMOL_FLAGS, ROOT, THINKING_BUDGET, llamacpp_ext, require
from toolsets import SEARCH, WEATHER

pytestmark = [pytest.mark.e2e, pytest.mark.llamacpp]

BUDGET = THINKING_BUDGET
TOOLS = [WEATHER, SEARCH]
ASKS = ["What is the weather in Paris?", "Search the web for the latest news about Mars rovers.",
        "How warm is it in Tokyo in fahrenheit?", "Find recipes for a vegan lasagna.", "Is it raining in London?"]
MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")
FORCED = {"required": "required", "named": {"type": "function", "function": {"name": "get_weather"}}}


@pytest.fixture(scope="module")
def server():
    require("llama_cpp")
    options = {"tb_template": str(ROOT / "tests" / "data" / "chatml_think.jinja"), "tb_thinking_budget": BUDGET}
    with llamacpp_ext(*LLAMACPP_SMOL_FLAGS, "--chat_template_kwargs", json.dumps(options)) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


def n_tokens(server, text: str) -> int:
    r = httpx.post(f"http://127.0.0.1:{server.port}/extras/tokenize", json={"input": text}, timeout=30)
    return len(r.json()["tokens"])


def ask(client, question: str, stream: bool, field: str = "reasoning_content", model: str = "smol",
        **kw) -> tuple[str | None, str | None, list, str]:
    """(reasoning, content, [(name, arguments)], finish_reason); `field`: the engine's reasoning field."""
    kw = dict(model=model, messages=[{"role": "user", "content": question}], tools=TOOLS, temperature=0,
              max_tokens=96, **kw)
    if not stream:
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        calls = [(c.function.name, c.function.arguments) for c in m.tool_calls or []]
        return (m.model_extra or {}).get(field), m.content, calls, r.choices[0].finish_reason
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        reasoning += (d.model_extra or {}).get(field) or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            name, args = calls.get(tc.index, ("", ""))
            calls[tc.index] = (name + (tc.function.name or ""), args + (tc.function.arguments or ""))
        finish = chunk.choices[0].finish_reason or finish
    return reasoning or None, content or None, [c for _, c in sorted(calls.items())], finish


@pytest.mark.parametrize("choice", list(FORCED))
def test_forced_calls_come_after_thinking_within_the_budget(server, client, choice):
    """required and named: every answer ends in a call; the thinking, apart, is at most the budget."""
    for question in ASKS:
        whole = ask(client, question, False, tool_choice=FORCED[choice])
        streamed = ask(client, question, True, tool_choice=FORCED[choice])
        for reasoning, content, calls, finish in (whole, streamed):
            assert calls and finish == "tool_calls" if choice == "required" else calls, (question, content)
            assert reasoning and n_tokens(server, reasoning) <= BUDGET, (question, reasoning)
            assert not any(m in (content or "") for m in MARKERS), content
            assert choice == "required" or {n for n, _ in calls} == {"get_weather"}


def test_auto_keeps_thinking_and_markup_out_of_content(client):
    for question in ASKS:
        for reasoning, content, calls, _ in (ask(client, question, False), ask(client, question, True)):
            assert reasoning, question
            assert not any(m in (content or "") for m in MARKERS), content


@pytest.mark.parametrize("stream", [False, True])
def test_official_clients_read_thinking_before_the_calls(server, stream):
    """The anthropic client reads a thinking block before tool_use; the openai client a reasoning item
    before the function_call."""
    official_clients_read_thinking_first(f"http://127.0.0.1:{server.port}", "smol", stream)


def official_clients_read_thinking_first(root: str, model: str, stream: bool) -> None:
    """A forced call asked through the official anthropic (Messages) and openai (Responses) clients comes
    after the thinking: a `thinking` block before the `tool_use`, a `reasoning` item before the
    `function_call` (with its reasoning text deltas when streamed)."""
    import anthropic
    import openai

    ant = anthropic.Anthropic(base_url=root, api_key="unused", max_retries=0, timeout=300)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    kw = dict(model=model, max_tokens=96, messages=[{"role": "user", "content": ASKS[0]}], tools=tools,
              tool_choice={"type": "any"}, extra_body={"temperature": 0})
    if stream:
        with ant.messages.stream(**kw) as s:
            msg = s.get_final_message()
    else:
        msg = ant.messages.create(**kw)
    assert [b.type for b in msg.content][:1] == ["thinking"] and msg.content[-1].type == "tool_use", msg.content
    assert msg.content[0].thinking
    oai = openai.OpenAI(base_url=root + "/v1", api_key="unused", max_retries=0, timeout=300)
    rkw = dict(model=model, input=ASKS[0], tools=[{"type": "function", **t["function"]} for t in TOOLS],
               tool_choice="required", temperature=0, max_output_tokens=96)
    if stream:
        events = list(oai.responses.create(stream=True, **rkw))
        resp = events[-1].response
        assert any(e.type == "response.reasoning_text.delta" for e in events), [e.type for e in events]
    else:
        resp = oai.responses.create(**rkw)
    kinds = [i.type for i in resp.output]
    assert kinds[0] == "reasoning" and kinds[-1] == "function_call", kinds
    assert resp.output[0].content[0].text


def test_each_api_sets_the_budget_per_request(server, client):
    """Messages `thinking.budget_tokens` and Chat `reasoning_effort` reach the thinking budget (over the
    model's own); a budget of 6 tokens closes the thinking within 6."""
    import anthropic

    ant = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="unused", max_retries=0, timeout=300)
    msg = ant.messages.create(model="smol", max_tokens=64, messages=[{"role": "user", "content": ASKS[0]}],
                              thinking={"type": "enabled", "budget_tokens": 6}, extra_body={"temperature": 0})
    assert msg.content[0].type == "thinking" and n_tokens(server, msg.content[0].thinking) <= 6, msg.content
    import openai

    with pytest.raises(openai.BadRequestError, match="reasoning effort must be one of"):
        client.chat.completions.create(model="smol", messages=[{"role": "user", "content": ASKS[0]}], max_tokens=8,
                                       extra_body={"reasoning_effort": "enormous"})
    r = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": ASKS[0]}], max_tokens=8,
                                       temperature=0, extra_body={"reasoning_effort": "low"})
    assert (r.choices[0].message.model_extra or {}).get("reasoning_content")
