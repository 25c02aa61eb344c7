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

from toolbridge.dialects import Dialect
from toolbridge.prompt.chat_templates import FAMILIES, read_stock, renders_tools, template_path, wrap, writes_calls
from toolbridge.memo import Memo
from toolbridge.options import KEYS, resolve
from toolbridge.prompt.render import compile_template, tools_instruction
from toolbridge.request import PLAIN, ToolRequest

from .compat import model_key, token_text

log = logging.getLogger("toolbridge.llamacpp")
_TEMPLATES: Memo[tuple[jinja2.Template, bool]] = Memo(64)


def stock_template(llama: llama_cpp.Llama | None, source: str | None) -> str:
    """The stock template named by `source` (None or "gguf": the model's own)."""
    if source in (None, "", "gguf"):
        stock = (llama.metadata or {}).get("tokenizer.chat_template") if llama is not None else None
        if stock:
            return stock
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


def template(llama: llama_cpp.Llama, req: ToolRequest) -> tuple[jinja2.Template, bool]:
    """The tool-capable template for this model and the request's options (built once), and
    whether it is the model's own tool template (`native`) rather than a stock template behind
    the prelude."""
    o = req.options
    return _TEMPLATES.get((model_key(llama), o.template, o.dialect.name, o.example, o.system_role),
                          lambda: _build_template(llama, o.template, o.dialect, o.example, o.system_role))


def _build_template(llama: llama_cpp.Llama, source: str | None, dialect: Dialect, example: bool,
                    system_role: bool | None) -> tuple[jinja2.Template, bool]:
    native = native_template(llama, dialect) if source == NATIVE else None
    if source == NATIVE and native is None:
        raise ValueError(f"tb_template 'native' needs a model whose own chat template renders tools and writes "
                         f"calls in the {dialect.name!r} format; this model's does not (leave tb_template unset "
                         "to use its template behind toolbridge's prelude)")
    src = native or wrap(stock_template(llama, source), dialect=dialect.name, example=example, system_role=system_role)
    return compile_template(src), native is not None


def native_template(llama: llama_cpp.Llama, dialect: Dialect) -> str | None:
    """The GGUF's own template if it renders tools itself and writes a past call exactly as
    `dialect` does; else None."""
    src = _own(llama)
    return src if writes_calls(src, dialect) else None


def tool_trained(llama: llama_cpp.Llama) -> bool:
    """Whether the model's own template renders tools (the core's defaults differ for such a
    model: toolbridge.options.PROFILES)."""
    return renders_tools(_own(llama))


def _own(llama: llama_cpp.Llama) -> str | None:
    return (llama.metadata or {}).get("tokenizer.chat_template")


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


def render(llama: llama_cpp.Llama, messages: Sequence[Any], req: ToolRequest, options: dict) -> str:
    """The prompt text: messages (plain data) and the tools, unless the answer is plain text,
    through the wrapped template. Keys of `options` that are not toolbridge's are template
    variables."""
    extra = {k: v for k, v in options.items() if k not in KEYS}
    if req.force:
        extra["tb_force"] = req.force
    if req.mode != PLAIN:
        example = req.options.example
        extra["tb_instruction"] = req.toolset.memo(
            ("instruction", req.dialect.name, example, req.force),
            lambda: tools_instruction(req.toolset.specs, dialect=req.dialect, example=example, force=req.force))
    messages = list(messages)
    tpl, native = template(llama, req)
    if native:
        messages = object_arguments(messages)
    return tpl.render(
        messages=messages, tools=req.toolset.specs if req.mode != PLAIN else [],
        add_generation_prompt=True, bos_token=token_text(llama, llama.token_bos()),
        eos_token=token_text(llama, llama.token_eos()),
        strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt), **extra)


def tokenize(llama: llama_cpp.Llama, prompt: str) -> list[int]:
    """Prompt tokens: the template owns BOS, as in llama-cpp-python's Jinja handlers."""
    return llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
