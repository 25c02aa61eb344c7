"""End to end: `transformers serve DIR`, with no toolbridge code in the serving process, returns OpenAI
tool calls to the official openai client, through the directory `toolbridge templates export
--link-weights` writes: the wrapped chat template puts the tools in the prompt, and the response
template reads the call back.

The model is the embedded SmolLM2-135M-Instruct (a Hugging Face copy of its GGUF, bfloat16, on the
CPU). Without toolbridge's steering it answers a lone tool question in prose (tests/data's recorded
answers: no call in any dialect); in a conversation where it has called the tool before, it calls
again, which is what this shows (one server start, one request whole and one streamed).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from servers import PYTHON, Server, free_port, require, smollm2_hf
from response_corpus import conversation

pytestmark = [pytest.mark.transformers, pytest.mark.slow]


MESSAGES, TOOLS = conversation("w1")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`transformers serve` on the exported directory (the default `tags` dialect, weights linked)."""
    require("fastapi")
    require("uvicorn")
    import openai

    from toolbridge.cli import main as cli

    out = tmp_path_factory.mktemp("exported") / "smollm2-tools"
    assert cli(["templates", "export", str(smollm2_hf()), "-o", str(out), "--link-weights"]) == 0
    port = free_port()
    script = Path(PYTHON).with_name("transformers")  # the console script, as users run it
    cli_argv = ([str(script)] if script.exists()
                else [PYTHON, "-c", "from transformers.cli.transformers import main; main()"])
    argv = [*cli_argv, "serve", str(out), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
            "--dtype", "bfloat16"]
    # one torch thread: on a busy 2-core machine more threads wait on each other (as llama.cpp's do)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "OMP_NUM_THREADS": "1"}
    with Server(argv, port, ready_path="/health", env=env, timeout=300) as server:
        yield openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300), str(out)


def test_tool_calls_whole_and_streamed(served):
    client, model = served
    r = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, temperature=0,
                                       max_tokens=48)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert "<tool_call>" not in (choice.message.content or "")

    calls, text, finish = [], [], None
    for chunk in client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS,
                                                temperature=0, max_tokens=48, stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is not None:
            text.append(delta.content or "")
            calls += [(c.function.name, json.loads(c.function.arguments)) for c in delta.tool_calls or []]
        finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
    assert calls == [("get_weather", {"city": "Paris"})] and finish == "tool_calls"
    assert "<tool_call>" not in "".join(text)
