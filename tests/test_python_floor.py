"""The code needs no newer Python than setup.py's python_requires declares.

vermin checks syntax, stdlib modules and members statically. It does not know the private
modules Python 3.11 split out of the stdlib (`re._parser` was `sre_parse`), so every stdlib
import is also looked up on a floor-version interpreter when one is installed (pyenv), and
the `re._*` ones must be guarded whatever is installed.
"""
from __future__ import annotations

import ast
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ["toolbridge", "vllm_plugin", "llamacpp_ext", "bench", "tests"]
FLOOR = re.search(r'python_requires\s*=\s*">=\s*(3\.\d+)"', (ROOT / "setup.py").read_text()).group(1)
FLOOR_INFO = tuple(int(x) for x in FLOOR.split("."))


def vermin(*paths: str | Path) -> tuple[bool, str]:
    """(no violation, report). vermin parses with the running Python: a file this Python cannot
    parse (newer syntax when it runs on the floor version) is only an `error:` line, exit 0."""
    # vermin has no __main__ module; call its console-script entry point
    r = subprocess.run([sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", f"-t={FLOOR}-",
                        "--violations", "--no-tips", *map(str, paths)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    return r.returncode == 0 and not re.search(r"^\s*error:", r.stdout, re.M), r.stdout + r.stderr


def test_vermin_finds_no_violations():
    ok, report = vermin(*CODE)
    assert ok, f"code needs a newer Python than {FLOOR}:\n{report}"


def test_vermin_reports_a_violation(tmp_path):
    # the check above can fail: a construct newer than the floor is reported
    newer = {(3, 9): "match 1:\n    case 1:\n        pass\n",  # 3.10
             (3, 10): "try:\n    pass\nexcept* ValueError:\n    pass\n",  # 3.11
             (3, 11): "type Alias = int\n"}  # 3.12
    if FLOOR_INFO not in newer:
        pytest.skip(f"no probe for a floor of {FLOOR}")
    (tmp_path / "probe.py").write_text(newer[FLOOR_INFO])
    ok, report = vermin(tmp_path)
    assert not ok and "probe.py" in report, report


def _catches_import_error(node: ast.Try) -> bool:
    return any(h.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
                                     for n in ast.walk(h.type)) for h in node.handlers)


def unguarded_stdlib_imports() -> set[tuple[str, str]]:
    """(module, "file:line") of every stdlib import outside a try that catches ImportError."""
    found = set()
    for path in (p for d in CODE for p in (ROOT / d).rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:  # newer syntax than this Python's: test_vermin_finds_no_violations reports it
            continue
        guarded = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) and _catches_import_error(t)
                   for stmt in t.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                mods = [node.module]
            else:
                continue
            found |= {(m, f"{path.relative_to(ROOT)}:{node.lineno}") for m in mods
                      if m.split(".")[0] in sys.stdlib_module_names}
    return found


def test_no_unguarded_private_re_modules():
    if FLOOR_INFO >= (3, 11):
        pytest.skip("re._parser and re._constants exist from 3.11")
    bad = sorted((m, at) for m, at in unguarded_stdlib_imports() if m.startswith("re._"))
    assert not bad, f"3.11+ only (3.10: sre_parse / sre_constants), import them in try/except ImportError: {bad}"


def _floor_python() -> str | None:
    candidates = [os.environ.get("TOOLBRIDGE_FLOOR_PYTHON"), shutil.which(f"python{FLOOR}"),
                  *sorted(glob.glob(os.path.expanduser(
                      f"{os.environ.get('PYENV_ROOT', '~/.pyenv')}/versions/{FLOOR}.*/bin/python{FLOOR}")))]
    for exe in filter(None, candidates):
        r = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == str(FLOOR_INFO):
            return exe
    return None


def test_stdlib_imports_exist_on_floor_python():
    exe = _floor_python()
    if exe is None:
        pytest.skip(f"no Python {FLOOR} interpreter found (set TOOLBRIDGE_FLOOR_PYTHON)")
    imports = sorted(unguarded_stdlib_imports())
    script = ("import importlib.util, sys\nfor line in sys.stdin.read().splitlines():\n"
              "    m, at = line.split(' ')\n"
              "    try:\n        ok = importlib.util.find_spec(m) is not None\n"
              "    except ImportError:\n        ok = False\n"
              "    ok or print(m, at)\n")
    r = subprocess.run([exe, "-I", "-c", script], input="\n".join(f"{m} {at}" for m, at in imports),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not r.stdout, f"stdlib modules missing on Python {FLOOR}:\n{r.stdout}"
