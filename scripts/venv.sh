# Sourced by the scripts here: the repository root as working directory, and $py, the Python of
# a virtual environment ($TOOLBRIDGE_VENV, default .venv; made with $PYTHON or python3) with pip current.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${TOOLBRIDGE_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then "${PYTHON:-python3}" -m venv "$venv"; fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip

# llama-cpp-python is published only as source: build its wheel once (~6 minutes on 2 cores) into
# .cache/wheels, where every install of these scripts finds it, this environment's and the fresh
# ones the packaging tests make (also when pip's own cache is off).
LLAMA_CPP="llama-cpp-python==0.3.36"
wheels="$PWD/.cache/wheels"
# Built for AVX2, not -march=native: on CPUs with AMX (Sapphire Rapids and later) a native build
# takes llama.cpp's AMX kernels, which crash on the first decode of the Q4_1 model (seen here);
# the portable build also runs on any x86-64 machine that later finds the cached wheel.
if ! compgen -G "$wheels/llama_cpp_python-0.3.36-*.whl" >/dev/null; then
  CMAKE_ARGS="-DGGML_NATIVE=OFF ${CMAKE_ARGS:-}" "$py" -m pip wheel -q --no-cache-dir --no-deps -w "$wheels" "$LLAMA_CPP"
fi
export PIP_FIND_LINKS="${PIP_FIND_LINKS:+$PIP_FIND_LINKS }$wheels"
