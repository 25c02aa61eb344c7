"""A model's tokenizer directory in the ecosystem's own words: the wrapped chat template, and the
response template that reads what it makes the model write.

    toolbridge templates export MODEL -o DIR [--dialect X] [--link-weights]

MODEL is a Hugging Face model directory or a GGUF. DIR then serves as a tokenizer (`vllm serve MODEL
--tokenizer DIR --tool-call-parser response_template`, `tokenizer.parse_response`) and, with the
weights linked beside it, as a model (`transformers serve`, which takes no template of its own).
transformers writes the files (it is imported here only), so they are in the form it reads.
"""
from __future__ import annotations

import os
from pathlib import Path

from .dialects import DEFAULT_DIALECT
from .prompt.chat_templates import read_stock, wrap
from .prompt.response_template import response_template


def hf_source(model: Path) -> Path:
    """A Hugging Face directory for `model`: itself, or for a GGUF the copy transformers makes of it
    once (toolbridge.serving.models.hf_copy, in the toolbridge cache)."""
    if model.suffix != ".gguf":
        return model
    from .serving.models import default_dest, hf_copy

    return hf_copy(default_dest().parent / f"{model.stem.lower()}-hf", model)


def export(model: str | os.PathLike, out: str | os.PathLike, *, dialect: str | None = None,
           example: bool = True, system_role: bool | None = None, link_weights: bool = False) -> list[Path]:
    """Write the tokenizer directory `out` for `model` (see the module's doc); the paths written."""
    from transformers import AutoTokenizer

    model, out = Path(model), Path(out)
    dialect = dialect or DEFAULT_DIALECT
    template = wrap(read_stock(model), dialect=dialect, example=example, system_role=system_role)
    src = hf_source(model) if link_weights else model
    if src.suffix == ".gguf":  # the tokenizer alone: no need to convert the weights
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    else:
        tok = AutoTokenizer.from_pretrained(src)
    tok.chat_template = template
    tok.response_template = response_template(dialect, template, bos_token=tok.bos_token or "",
                                              eos_token=tok.eos_token or "")
    out.mkdir(parents=True, exist_ok=True)
    written = [Path(p) for p in tok.save_pretrained(out)]
    if link_weights:
        written += link_model_files(src, out)
    return written


def link_model_files(src: Path, out: Path) -> list[Path]:
    """Link every file of the model directory `src` that `out` does not hold yet (config, weights,
    generation config), so `out` loads as the model."""
    linked = []
    for path in sorted(src.iterdir()):
        target = out / path.name
        if path.is_file() and not path.name.startswith(".") and not target.exists():
            target.symlink_to(path.resolve())
            linked.append(target)
    return linked
