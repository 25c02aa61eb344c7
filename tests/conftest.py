"""The session's shape: unit and property tests first, then the end-to-end modules (marked `e2e`),
whose servers the pool in tests/servers.py starts in the background meanwhile, shares between modules
and stops after their last test.

`pytest -m "not e2e"` is the fast set (README, "Set up")."""
import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from servers import POOL, SPECS, stop_all  # noqa: E402

# The end-to-end modules, in the order they run (after every other test): a module's servers start
# while the modules before it run, so modules on llama.cpp (one thread) alternate with those on vLLM.
E2E_ORDER = [
    "test_llamacpp_e2e",
    "test_vllm_e2e",
    "test_faults_e2e",  # hang-ups, SIGTERM and a short soak, on the two servers above while they are up
    # the parser-level tests on vLLM 0.33, in their own environment: run by the pool from the session's start,
    # read here, late enough that the run has ended
    "test_vllm_033",
    "test_llama_server_e2e",
    "test_thinking_vllm_e2e",
    "test_tool_trained_e2e",
    "test_vllm_scaleout_e2e",  # its deployments take longest to start: before gemma's, behind the modules above
    "test_gemma_e2e",
    "test_transformers_serve_e2e",
    "test_package",
]
# items with one of these marks (or `slow`) are end to end wherever they are
ENGINE_MARKS = {"vllm", "llamacpp", "llamaserver", "transformers"}


def _shared(key: str):
    @pytest.fixture(scope="session", name=key)
    def fixture():
        """A server of the session's pool (tests/servers.py SPECS), shared by every module asking for it."""
        return POOL.get(key)
    return fixture


for _key in SPECS:
    globals()[f"_shared_{_key}"] = _shared(_key)


def _module(item) -> str:
    return Path(str(item.fspath)).stem


def _is_e2e(item) -> bool:
    """End to end, or slow (a real model run in process): not in the fast set."""
    return _module(item) in E2E_ORDER or any(item.get_closest_marker(m) for m in {"e2e", "slow", *ENGINE_MARKS})


def pytest_itemcollected(item):
    """Mark end-to-end items `e2e` (before `-m` selects)."""
    if _is_e2e(item) and item.get_closest_marker("e2e") is None:
        item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Run every other test first, then the end-to-end modules in E2E_ORDER (each module's items
    keep their order), so their servers start while the tests before them run."""
    rank = {m: i for i, m in enumerate(E2E_ORDER)}
    # end-to-end items of other modules (in-process runs of the real model) first: no server to wait for
    items[:] = sorted(items, key=lambda it: (0, 0) if not _is_e2e(it) else (1, rank.get(_module(it), -1)))


def shared_keys(item) -> list[str]:
    """The pool keys an item uses: fixtures named after a key, and keys chosen by a parameter
    (a module's SHARED_BY_PARAM: {param: {value: key}})."""
    keys = [n for n in item.fixturenames if n in POOL.specs]
    callspec = getattr(item, "callspec", None)
    for param, by_value in getattr(getattr(item, "module", None), "SHARED_BY_PARAM", {}).items():
        if callspec is not None and callspec.params.get(param) in by_value:
            keys.append(by_value[callspec.params[param]])
    return keys


_LAST: dict[str, list[str]] = {}  # nodeid -> keys whose last test it is


def pytest_collection_finish(session):
    if session.config.option.collectonly or not session.items:
        return
    plan, last = [], {}
    for item in session.items:
        for key in shared_keys(item):
            if key not in plan:
                plan.append(key)
            last[key] = item.nodeid
    for key, nodeid in last.items():
        _LAST.setdefault(nodeid, []).append(key)
    POOL.start_ahead(plan)


def pytest_runtest_setup(item):
    if not POOL.e2e and item.get_closest_marker("e2e") is not None:
        POOL.begin_e2e()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    for key in _LAST.get(item.nodeid, []):
        POOL.release(key)


def _terminated(signum, frame):
    """Killed (a CI time limit): stop the servers, which run in sessions of their own, then die as asked."""
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def pytest_configure(config):
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _terminated)


def pytest_sessionfinish(session):
    POOL.close()


def pytest_terminal_summary(terminalreporter):
    lines = POOL.report()
    if lines:
        terminalreporter.write_sep("-", "shared servers (tests/servers.py)")
        for line in lines:
            terminalreporter.write_line(line)
