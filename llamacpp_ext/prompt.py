"""The prompt: the model's chat template (the GGUF's own, or a packaged or given one) behind
the core's prelude, rendered to text and tokens.

Options come from the model's `chat_template_kwargs` (CLI `--chat_template_kwargs` or the
config file): `tb_template` (unset or "gguf": the GGUF's own template behind the prelude; a
packaged family name, or a path to a template file, model directory or GGUF; "native": the GGUF's
own template as it is, for a model whose template renders tools and writes calls as the dialect
does), `tb_example`, `tb_system_role`, and the core's `tb_dialect` and `tb_call_bias`
(toolbridge.options). Every other key is passed to the template as a variable,
as llama-cpp-python's Jinja handlers do.
"""
from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Sequence

import jinja2
import llama_cpp

from toolbridge.engine import (Dialect, FAMILIES, KEYS, Memo, PLAIN, ToolRequest, compile_template, read_stock,
                               resolve, template_path, tools_instruction, wrap, writes_calls)

from .model import Model

log = logging.getLogger("toolbridge.llamacpp")
_TEMPLATES: Memo[tuple[jinja2.Template, bool]] = Memo(64)


def stock_template(own: str | None, source: str | None) -> str:
    """The stock template named by `source` (None or "gguf": the model's `own`)."""
    if source in (None, "", "gguf"):
        if own:
            return own
        log.warning("toolbridge: the model has no chat template; using the packaged chatml one")
        source = "chatml"
    if source in FAMILIES:
        return template_path(source).read_text(encoding="utf-8")
    return read_stock(source)


NATIVE = "native"


def check_options(options: dict) -> None:
    """Fail early (at server start) on unknown options or an unreadable template."""
    source = resolve(options).template
    if source != NATIVE:
        stock_template(None, source or "chatml")


def template(model: Model, req: ToolRequest) -> tuple[jinja2.Template, bool]:
    """The tool-capable template for this model and the request's options (built once), and
    whether it is the model's own tool template (`native`) rather than a stock template behind
    the prelude."""
    o = req.options
    return _TEMPLATES.get((model.key, o.template, o.dialect.name, o.example, o.system_role),
                          lambda: _build_template(model.template, o.template, o.dialect, o.example, o.system_role))


def _build_template(own: str | None, source: str | None, dialect: Dialect, example: bool,
                    system_role: bool | None) -> tuple[jinja2.Template, bool]:
    native = native_template(own, dialect) if source == NATIVE else None
    if source == NATIVE and native is None:
        raise ValueError(f"tb_template 'native' needs a model whose own chat template renders tools and writes "
                         f"calls in the {dialect.name!r} format; this model's does not (leave tb_template unset "
                         "to use its template behind toolbridge's prelude)")
    src = native or wrap(stock_template(own, source), dialect=dialect.name, example=example, system_role=system_role)
    return compile_template(src), native is not None


def native_template(own: str | None, dialect: Dialect) -> str | None:
    """The model's `own` template if it renders tools itself and writes a past call exactly as
    `dialect` does; else None."""
    return own if writes_calls(own, dialect) else None


def object_arguments(messages: list) -> list:
    """Past calls' arguments as objects, as tool-capable templates expect them (vLLM and
    llama-server hand them over the same way)."""
    out = []
    for m in messages:
        if isinstance(m, dict) and m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                fn = dict(tc.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"])
                    except ValueError:
                        pass
                calls.append({**tc, "function": fn})
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out


def render(model: Model, messages: Sequence[Any], req: ToolRequest, options: dict) -> str:
    """The prompt text: messages (plain data) and the tools, unless the answer is plain text,
    through the wrapped template. Keys of `options` that are not toolbridge's are template
    variables."""
    extra = {k: v for k, v in options.items() if k not in KEYS}
    if req.force:
        extra["tb_force"] = req.force
    if req.mode != PLAIN:
        example = req.options.example
        shown = req.declared  # every tool, also where allowed_tools restricts the calls: the same prompt
        extra["tb_instruction"] = shown.memo(
            ("instruction", req.dialect.name, example, req.force),
            lambda: tools_instruction(shown.specs, dialect=req.dialect, example=example, force=req.force))
    messages = list(messages)
    tpl, native = template(model, req)
    if native:
        messages = object_arguments(messages)
    return tpl.render(
        messages=messages, tools=req.declared.specs if req.mode != PLAIN else [],
        add_generation_prompt=True, bos_token=model.bos, eos_token=model.eos,
        strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt), **extra)


def build(model: Model, messages: Sequence[Any], req: ToolRequest, options: dict) -> tuple[str, list[int]]:
    """The prompt's text (`render`) and its tokens."""
    text = render(model, messages, req, options)
    return text, tokenize(model.llama, text)


def tokenize(llama: llama_cpp.Llama, prompt: str) -> list[int]:
    """Prompt tokens: the template owns BOS, as in llama-cpp-python's Jinja handlers."""
    return llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
