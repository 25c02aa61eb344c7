# Sourced by the scripts here: the repository root as working directory, and $py, the Python of
# a virtual environment ($TOOLBRIDGE_VENV, default .venv; made with $PYTHON or python3) with pip current.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${TOOLBRIDGE_VENV:-.venv}
if [ ! -x "$venv/bin/python" ]; then "${PYTHON:-python3}" -m venv "$venv"; fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip
