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
from ..thinking import DEFAULT_THINKING, Thinking, opened_by
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
    # The model's own template, verbatim (deepseek-ai/DeepSeek-R1-Distill-*, tokenizer_config.json; the
    # source is in docs/dialects-and-templates.md): its generation prompt opens <think>, it drops
    # everything up to </think> from earlier assistant turns, and its own tool-call branches are never
    # reached behind the prelude.
    Family("deepseek_r1_distill", "DeepSeek-R1-Distill-Qwen 1.5B-32B, -Llama 8B/70B (thinks first)",
           r"{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
           r"{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
           r"{%- for message in messages %}{%- if message['role'] == 'system' %}"
           r"{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}"
           r"{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}"
           r"{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}"
           r"{%- if message['role'] == 'assistant' and message['content'] is none %}"
           r"{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}"
           r"{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
           r"tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + "
           r"'```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n' + "
           r"'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + "
           r"'```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}"
           r"{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}"
           r"{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}"
           r"{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
           r"{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}"
           r"{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
           r"{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}"
           r"{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
           r"{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}"
           r"{%- set ns.is_output_first = false %}{%- else %}{{'\n<｜tool▁output▁begin｜>' + "
           r"message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}"
           r"{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
           r"{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}"),
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


_THOUGHT, _REASONING = "TOOLBRIDGE_THOUGHT_PROBE", "TOOLBRIDGE_REASONING_PROBE"


@dataclass(frozen=True)
class ThinkingBehaviour:
    """What a template does with thinking, found by rendering it."""
    opens: bool  # its generation prompt opens a thinking block (the model starts inside it)
    keeps_content: bool  # thinking written in an earlier assistant turn's content reaches the prompt
    keeps_reasoning: bool  # an earlier assistant turn's `reasoning_content` reaches the prompt


def thinking_behaviour(template: str, thinking: Thinking = DEFAULT_THINKING) -> ThinkingBehaviour:
    """How `template` treats thinking: whether its generation prompt opens a block, and whether an
    earlier turn's thinking (in its content, or in `reasoning_content`) is written into the prompt.
    A template that raises on the probe counts as doing neither."""
    def render(assistant: dict) -> str:
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", **assistant},
                    {"role": "user", "content": "more"}]
        try:
            return compile_template(template).render(messages=messages, add_generation_prompt=True,
                                                     bos_token="<s>", eos_token="</s>")
        except jinja2.TemplateError:
            return ""
    in_content = render({"content": f"{thinking.open}{_THOUGHT}{thinking.close}ok"})
    in_field = render({"content": "ok", "reasoning_content": _REASONING})
    return ThinkingBehaviour(opens=bool(in_content) and opened_by(in_content, thinking),
                             keeps_content=_THOUGHT in in_content, keeps_reasoning=_REASONING in in_field)


def unwrap(template: str) -> str:
    """The stock part of a wrapped template (a template is never wrapped twice)."""
    head, sep, tail = template.partition(PRELUDE_END)
    return tail if sep else template


def wrap(stock: str, *, dialect: str = DEFAULT_DIALECT, example: bool = True,
         system_role: bool | None = None) -> str:
    """A tool-capable template: the toolbridge prelude, then `stock` unchanged. The stock template
    still writes every turn, so its thinking behaviour is kept (`thinking_behaviour` is the same
    before and after): a generation prompt that opens a thinking block, and old thinking dropped
    or kept as it drops or keeps it, in call turns too."""
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
