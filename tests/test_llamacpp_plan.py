"""The llama.cpp server in this process (llama-cpp-python's app, a real model, starlette's test
client): the seams toolbridge installs, and one request plan per request (the request check reads
the tool fields once and hands them to the handler, which plans once)."""
import pytest

from servers import require

require("llama_cpp")
import llama_cpp.server.__main__ as server_main  # noqa: E402
from llama_cpp.server.settings import ModelSettings, ServerSettings  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from llamacpp_ext import handler, server  # noqa: E402
from toolbridge.serving import asgi  # noqa: E402
from toolbridge.serving.models import gguf_path  # noqa: E402
from toolsets import TOOLS  # noqa: E402


@pytest.fixture(scope="module")
def client():
    original = server_main.create_app
    server.install()
    wrapped = server_main.create_app
    server.install()  # idempotent: wrapped once
    assert wrapped is not original and server_main.create_app is wrapped
    app = wrapped(server_settings=ServerSettings(),
                  model_settings=[ModelSettings(model=str(gguf_path()), n_ctx=2048, verbose=False)])
    with TestClient(app) as c:
        yield c


def test_importing_the_server_module_patches_nothing():
    """The seams go in with install() (run by `python -m llamacpp_ext`), not at import."""
    import subprocess
    import sys
    code = ("import llama_cpp.server.__main__ as m; before = m.create_app\n"
            "import llamacpp_ext.server\nprint(m.create_app is before)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True", r.stderr[-2000:]


@pytest.mark.parametrize("stream", [False, True])
def test_one_check_and_one_plan_per_request(client, monkeypatch, stream):
    checks, plans = [], []
    real_check, real_plan = asgi.check, handler.plan
    monkeypatch.setattr(asgi, "check", lambda **kw: checks.append(1) or real_check(**kw))
    monkeypatch.setattr(handler, "check", lambda **kw: checks.append(1) or real_check(**kw))
    monkeypatch.setattr(handler, "plan", lambda *a, **kw: plans.append(1) or real_plan(*a, **kw))
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS,
            "tool_choice": "required", "max_tokens": 48, "temperature": 0, "stream": stream}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert "get_weather" in r.text or "search" in r.text
    assert (len(checks), len(plans)) == (1, 1)


def test_a_bad_request_is_refused_by_the_check_before_any_plan(client, monkeypatch):
    plans = []
    real_plan = handler.plan
    monkeypatch.setattr(handler, "plan", lambda *a, **kw: plans.append(1) or real_plan(*a, **kw))
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
                                                  "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice" and plans == []


def test_a_retired_environment_variable_stops_the_start(monkeypatch):
    """install() (what `python -m llamacpp_ext` runs first) refuses it before any model loads."""
    monkeypatch.setenv("TOOLBRIDGE_GROUNDED", "1")
    with pytest.raises(ValueError, match="TOOLBRIDGE_GROUNDED is no longer an option; TOOLBRIDGE_WORD_CHECKS"):
        server.install()


def test_the_chat_route_hands_the_handler_the_requests_context(client, monkeypatch):
    """The fields the stock request model drops reach the handler with the call (handler.ChatContext):
    parallel_tool_calls as the plan reads it, stream_options as the stream's usage chunk."""
    seen = []
    real = handler.prepare_answer
    monkeypatch.setattr(handler, "prepare_answer", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    body = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS,
            "max_tokens": 8, "temperature": 0, "stream": True, "parallel_tool_calls": False,
            "stream_options": {"include_usage": True}}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert seen[0]["parallel_tool_calls"] is False and seen[0]["checked"] is not None
    assert '"usage": {' in r.text.split("data: [DONE]")[0].rsplit("data: ", 1)[-1]
