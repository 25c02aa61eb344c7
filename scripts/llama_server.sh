#!/usr/bin/env bash
# Build llama.cpp's own `llama-server` once, from the llama.cpp that llama-cpp-python 0.3.36
# vendors (the same engine the Python server runs), into .cache/llama-server; print its path.
# ~10-13 minutes on 2 cores the first time; later runs find the binary and print it at once.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.cache/llama-server"
if [ ! -x "$out/llama-server" ]; then
  src="$PWD/.cache/llama-src"
  mkdir -p "$src" "$out"
  py="${TOOLBRIDGE_VENV:-.venv}/bin/python"
  [ -x "$py" ] || py=python3
  if [ ! -d "$src/llama_cpp_python-0.3.36" ]; then
    "$py" -m pip download -q --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d "$src" >&2
    tar xzf "$src/llama_cpp_python-0.3.36.tar.gz" -C "$src"
  fi
  # AVX2, not -march=native: see scripts/venv.sh (llama.cpp's AMX kernels crash here)
  cmake -S "$src/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$src/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >&2
  cmake --build "$src/build" --target llama-server -j"$(nproc)" >&2
  cp "$src/build/bin/llama-server" "$out/llama-server"
fi
echo "$out/llama-server"
