"""Tool-capable chat templates: the prelude in front of a stock template.

`wrap` is the one mechanism: it makes any stock template tool-capable, and the packaged
templates are `wrap` applied to the stock template of each family (`FAMILIES`, the one
source of the files in templates/). A stock template is probed by rendering it: one that
raises on, or drops, a system turn gets the system text in its first user turn.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Mapping
from importlib.resources import files
from pathlib import Path

import jinja2

from ..dialects import DEFAULT_DIALECT, Dialect
from .render import PRELUDE_END, baked, compile_template, environment, prelude
from ..memo import Memo
from ..options import env_name


@dataclass(frozen=True)
class Family:
    name: str
    models: str
    stock: str  # the family's stock chat template (no tool support)
    dialect: str = DEFAULT_DIALECT
    example: bool = True
    stop: tuple[str, ...] = ()


_ALTERNATE = ("{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
              "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
              "{% endif %}")

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("chatml", "SmolLM2, Yi, OpenHermes, Qwen1.5, any ChatML model",
           "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
           " + '<|im_end|>' + '\\n' }}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"),
    Family("gemma", "Gemma 2, Gemma 3 (no system role)",
           "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
           "{{ raise_exception('System role not supported') }}{% endif %}"
           "{% for message in messages %}" + _ALTERNATE +
           "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}"
           "{% set role = message['role'] %}{% endif %}"
           "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
           "{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"),
    Family("llama2", "Llama 2 chat",
           "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
           "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
           "{% set system_message = false %}{% endif %}{% for message in loop_messages %}" + _ALTERNATE +
           "{% if loop.index0 == 0 and system_message != false %}"
           "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
           "{% else %}{% set content = message['content'] %}{% endif %}"
           "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
           "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
           "{% endfor %}"),
    Family("mistral", "Mistral Instruct v0.1 / v0.2 (no system role)",
           "{{ bos_token }}{% for message in messages %}" + _ALTERNATE +
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
           "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
           "{% endfor %}"),
    Family("phi3", "Phi-3, Phi-3.5 mini",
           "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
           "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
           "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
           "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"),
    Family("zephyr", "Zephyr, TinyLlama chat",
           "{% for message in messages %}{% if message['role'] == 'user' %}"
           "{{ '<|user|>\\n' + message['content'] + eos_token + '\\n' }}{% elif message['role'] == 'system' %}"
           "{{ '<|system|>\\n' + message['content'] + eos_token + '\\n' }}"
           "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}"
           "{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}"),
    Family("vicuna", "Vicuna v1.1+",
           "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + ' ' }}"
           "{% set loop_messages = messages[1:] %}{% else %}"
           "{{ 'A chat between a curious user and an artificial intelligence assistant. The assistant gives "
           "helpful, detailed, and polite answers to the user\\'s questions. ' }}"
           "{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}"
           "{% if message['role'] == 'user' %}{{ 'USER: ' + message['content'] + ' ' }}"
           "{% elif message['role'] == 'assistant' %}{{ 'ASSISTANT: ' + message['content'] + eos_token + ' ' }}"
           "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"),
    Family("olmo2", "OLMo 2 Instruct",
           "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
           "{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
           "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}"
           "{% if not loop.last %}{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}"
           "{% else %}{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
           "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}"),
)}

_PROBE = "TOOLBRIDGE_SYSTEM_PROBE"


def supports_system_role(stock: str) -> bool:
    """Whether a stock template renders a system turn (it may raise on one, or drop it)."""
    env = environment()
    try:
        out = env.from_string(stock).render(
            messages=[{"role": "system", "content": _PROBE}, {"role": "user", "content": "hi"}],
            add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    except jinja2.TemplateError:
        return False
    return _PROBE in out


PROBE_TOOL = {"type": "function", "function": {"name": "toolbridge_probe_tool", "description": "probe",
                                               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}
_PROBE_CALL = {"name": "toolbridge_probe_tool", "arguments": {"a": 1}}
_PROBE_HISTORY = [{"role": "user", "content": "hi"},
                  {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                                                                      "function": _PROBE_CALL}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]


def _probe(template: str | None, messages: list) -> str | None:
    """The template rendered with the probe tool (None when it has none or fails)."""
    if not template:
        return None
    try:
        return compile_template(template).render(messages=messages, tools=[PROBE_TOOL], add_generation_prompt=True)
    except jinja2.TemplateError:
        return None


def renders_tools(template: str | None) -> bool:
    """Whether a model's own chat template writes a request's tools into the prompt: the model
    was trained for tool calls (toolbridge.options.PROFILES differ for it). Found by rendering a
    probe, as llama-server's template analysis does, once per template text."""
    return _RENDERS_TOOLS.get(template, lambda: PROBE_TOOL["function"]["name"] in (_probe(template, _PROBE_HISTORY[:1]) or ""))


_RENDERS_TOOLS: Memo[bool] = Memo(32)


def writes_calls(template: str | None, dialect: Dialect) -> bool:
    """Whether a template renders tools and writes a past call exactly as `dialect` does (so
    toolbridge's steering, grammar and parser fit what the prompt teaches)."""
    written = dialect.format_calls([(_PROBE_CALL["name"], _PROBE_CALL["arguments"])])
    return renders_tools(template) and written in (_probe(template, _PROBE_HISTORY) or "")


def unwrap(template: str) -> str:
    """The stock part of a wrapped template (a template is never wrapped twice)."""
    head, sep, tail = template.partition(PRELUDE_END)
    return tail if sep else template


def wrap(stock: str, *, dialect: str = DEFAULT_DIALECT, example: bool = True,
         system_role: bool | None = None) -> str:
    """A tool-capable template: the toolbridge prelude, then `stock` unchanged."""
    stock = unwrap(stock)
    environment().parse(stock)  # a broken stock template fails here, not at the first request
    if system_role is None:
        system_role = supports_system_role(stock)
    return prelude(dialect, system_role=system_role, example=example) + stock


DIALECT_ENV = env_name("tb_dialect")


def served_dialect(template: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """The dialect a server of `template` must parse by default: the one a wrapped template was made
    with (its prelude asks the model for it), None for a template toolbridge did not wrap. A
    TOOLBRIDGE_DIALECT setting that names another is refused (ValueError): the prompt would ask for
    one format and the constraint and the stops follow another."""
    made = (baked(template) or {}).get("dialect")
    setting = env.get(DIALECT_ENV)
    if made and setting and setting != made:
        raise ValueError(f"the chat template was wrapped for the {made!r} dialect (its prelude asks the model "
                         f"for it), but {DIALECT_ENV}={setting}: unset {DIALECT_ENV}, or wrap the template again "
                         f"with --dialect {setting}")
    return made


def generate(family: Family) -> str:
    return wrap(family.stock, dialect=family.dialect, example=family.example)


def template_dir() -> Path:
    """The packaged templates: toolbridge/templates/, a link to the top-level templates/
    folder in a checkout and a folder of package data in an installed wheel."""
    return Path(str(files("toolbridge"))) / "templates"


def template_path(name: str) -> Path:
    if name not in FAMILIES:
        raise KeyError(f"no packaged template {name!r}; known: {', '.join(FAMILIES)}")
    return template_dir() / f"{name}.jinja"


def write_all(directory: Path) -> list[Path]:
    """Write every packaged template (the generator behind templates/)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for fam in FAMILIES.values():
        path = directory / f"{fam.name}.jinja"
        path.write_text(generate(fam), encoding="utf-8")
        out.append(path)
    return out


def read_stock(src: str | os.PathLike) -> str:
    """A stock chat template from a template file, a Hugging Face model directory
    (chat_template.jinja or tokenizer_config.json), or a GGUF file (tokenizer.chat_template)."""
    path = Path(src)
    if path.is_dir():
        for name in ("chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
            if (path / name).is_file():
                return read_stock(path / name)
        raise FileNotFoundError(f"{path} holds no chat_template.jinja or tokenizer_config.json")
    if path.suffix == ".gguf":
        return _gguf_template(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        data = json.loads(text)
        tpl = data.get("chat_template")
        if isinstance(tpl, list):  # named templates: take the default one
            named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
            tpl = named.get("default") or next(iter(named.values()), None)
        if not isinstance(tpl, str):
            raise ValueError(f"{path} has no chat_template")
        return tpl
    return text


def _gguf_template(path: Path) -> str:
    from gguf import GGUFReader  # llama.cpp's own GGUF reader (pip install gguf)

    field = GGUFReader(str(path)).fields.get("tokenizer.chat_template")
    if field is None:
        raise ValueError(f"{path} has no tokenizer.chat_template metadata")
    return bytes(field.parts[field.data[0]]).decode("utf-8")
