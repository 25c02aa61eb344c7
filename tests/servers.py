"""Real servers for end-to-end tests: start a process, wait until it answers, stop it.

End-to-end tests fail (they do not skip) when an engine is missing, unless the run says
otherwise with TOOLBRIDGE_SKIP_E2E=1, so CI cannot pass without having run them.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server subprocess whose output goes to a log file (shown when it fails to start)."""

    def __init__(self, argv: list[str], port: int, ready_path: str = "/v1/models", env: dict | None = None,
                 timeout: float = 600, cwd: Path = ROOT, pythonpath: bool = True):
        """pythonpath: put the checkout first on the server's path (False: run what is installed)."""
        self.argv, self.port, self.ready_path, self.timeout, self.cwd = argv, port, ready_path, timeout, cwd
        self.env = {**os.environ, **(env or {})}
        if pythonpath:
            self.env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        else:
            self.env.pop("PYTHONPATH", None)
        self.log = tempfile.NamedTemporaryFile("w+", prefix="toolbridge-server-", suffix=".log", delete=False)
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "Server":
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.cwd, start_new_session=True)
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}{self.ready_path}", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"server not ready after {self.timeout}s:\n{self.tail()}")

    def tail(self, n: int = 60) -> str:
        self.log.flush()
        return "".join(Path(self.log.name).read_text(errors="replace").splitlines(True)[-n:])

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def require(module: str) -> None:
    """Fail (or skip, when TOOLBRIDGE_SKIP_E2E=1) when an engine is not installed."""
    import importlib.util

    import pytest

    if importlib.util.find_spec(module) is None:
        if os.environ.get("TOOLBRIDGE_SKIP_E2E") == "1":
            pytest.skip(f"{module} is not installed and TOOLBRIDGE_SKIP_E2E=1", allow_module_level=True)
        pytest.fail(f"{module} is not installed: end-to-end tests need it (set TOOLBRIDGE_SKIP_E2E=1 to skip)")


PYTHON = sys.executable


def llama_server_binary() -> str:
    """Stock `llama-server`, as scripts/llama_server.sh builds it (or $TOOLBRIDGE_LLAMA_SERVER).
    Fails (or skips, when TOOLBRIDGE_SKIP_E2E=1) when it is not there."""
    import pytest

    path = os.environ.get("TOOLBRIDGE_LLAMA_SERVER") or str(ROOT / ".cache" / "llama-server" / "llama-server")
    if not os.access(path, os.X_OK):
        why = f"{path} is missing: run `bash scripts/llama_server.sh` (scripts/test.sh does)"
        if os.environ.get("TOOLBRIDGE_SKIP_E2E") == "1":
            pytest.skip(why)
        pytest.fail(why)
    return path


LOAD_STREAMS, LOAD_TOOLS = 16, 50


def check_load(base_url: str, model: str) -> None:
    """16 concurrent streams with 50 real tools (half must call), then without tools: every
    stream completes, every call is schema-valid, none is starved once it has started (the
    longest gap between chunks). Prints the figures."""
    from bench.load import load_tools, run, summary

    loaded = run(base_url, model, LOAD_STREAMS, load_tools(LOAD_TOOLS), max_tokens=64)
    plain = run(base_url, model, LOAD_STREAMS, None, max_tokens=64)
    print("\n" + summary(f"{LOAD_TOOLS} tools", loaded) + "\n" + summary("no tools", plain))
    print(f"output tokens/s with tools / without: {loaded['tokens_per_s'] / plain['tokens_per_s']:.1%} overall, "
          f"{loaded['stream_tokens_per_s'] / plain['stream_tokens_per_s']:.1%} per stream once started")
    for r in (loaded, plain):
        assert r["completed"] == LOAD_STREAMS, [s.error for s in r["streams"] if s.error]
        # a started stream is never left waiting: no gap between its chunks is both long in seconds
        # and a large share of the run (on a shared, busy machine the whole run slows down alike)
        assert r["longest_gap"] < max(30.0, r["wall"] / 4), (r["longest_gap"], r["wall"])
    assert loaded["invalid"] == 0, [s.invalid for s in loaded["streams"] if s.invalid]
    # required streams call; a 135M model may still be inside its call (a runaway array) at max_tokens
    required = loaded["streams"][::2]
    assert all(s.calls or (s.finish == "length" and not s.content) for s in required), \
        [(s.ask, s.content, s.finish) for s in required if not s.calls]
    assert loaded["calls"] > 0


# -- vLLM ------------------------------------------------------------------------------------------

def vllm_server(model: Path | str, name: str, template: Path, *extra: str, max_model_len: int = 4096,
                env: dict | None = None) -> Server:
    """vLLM's CPU build (bfloat16) serving `model` as `name` on a free port, with toolbridge's parser
    and the chat template given; `extra`: more flags."""
    port = free_port()
    argv = [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len), "--dtype", "bfloat16",
            "--enable-auto-tool-choice", "--tool-call-parser", "toolbridge", "--chat-template", str(template), *extra]
    return Server(argv, port, ready_path="/health", env={"VLLM_CPU_KVCACHE_SPACE": "2", **(env or {})}, timeout=900)



def vllm_cli(*args: str) -> list[str]:
    """argv running vLLM's CLI (`vllm serve ...`, `vllm launch render ...`) with the CPU build,
    through toolbridge's launcher (the `vllm` console script has no `vllm` metadata there)."""
    return [PYTHON, "-m", "vllm_plugin.cli", *args]


def with_tests_path(server: Server) -> Server:
    """Put tests/ on the server's path too (for `--middleware servers.ServedBy`)."""
    server.env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), server.env.get("PYTHONPATH", "")])
    return server


class ServedBy:
    """A pure ASGI middleware (`--middleware servers.ServedBy`, with `with_tests_path`): every answer
    names the server process that produced it in an `x-served-by` header, so a test can tell which
    of several API-server processes answered."""

    HEADER = "x-served-by"

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        pid = str(os.getpid()).encode()

        async def send_named(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (self.HEADER.encode(), pid)]}
            await send(message)

        await self.app(scope, receive, send_named)
