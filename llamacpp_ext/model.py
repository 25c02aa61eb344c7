"""The loaded model as the adapter reads it: its facts, read once per model and handed down to the
plan, the prompt, the grammars and the session, so that none of them goes back to the model for them."""
from __future__ import annotations

from dataclasses import dataclass

import llama_cpp

from toolbridge.engine import Vocabulary, renders_tools

from .compat import model_key, token_text, vocabulary


@dataclass(frozen=True)
class Model:
    llama: llama_cpp.Llama
    key: tuple[str, int]  # names the model for caches of what depends on its file (compat.model_key)
    vocab: Vocabulary
    bos: str  # the texts of its start and end tokens ("" where it has none)
    eos: str
    template: str | None  # its own chat template (the GGUF's)
    tool_trained: bool  # its own template renders tools (the core's defaults differ: toolbridge.options.PROFILES)


def model_of(llama: llama_cpp.Llama) -> Model:
    """The model's facts, kept on the model object (they live exactly as long as it does)."""
    model = llama.__dict__.get(_MODEL)
    if model is None:
        template = (llama.metadata or {}).get("tokenizer.chat_template")
        model = Model(llama, model_key(llama), vocabulary(llama), token_text(llama, llama.token_bos()),
                      token_text(llama, llama.token_eos()), template, renders_tools(template))
        llama.__dict__[_MODEL] = model
    return model


_MODEL = "_toolbridge_model"
