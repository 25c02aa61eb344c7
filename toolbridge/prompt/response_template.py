"""A dialect written as a response template, the ecosystem's declarative description of an answer.

A response template (a `response_template` key of `tokenizer_config.json`) names the regions of an
assistant turn (`thinking`, `content`, `tool_calls`), each with its open and close markers and a
content parser; transformers reads it in `tokenizer.parse_response` and `transformers serve`, vLLM
0.33 with `--tool-call-parser hf` (and derives a grammar from it for `--tool-call-parser beam`).
Here it is derived from the dialect table (the text `Dialect.format_calls` writes for a probe call)
and from the chat template (probes rendered through it give where the assistant turn starts and how
it ends), so it cannot drift from the prompt, the parser and the grammars. toolbridge's own parser
stays the reference: a response template reads the format as written, with no repair, no recovery
of calls written in another dialect, no check of names against the tools, and no end after the calls.
"""
from __future__ import annotations

import json
import re
from typing import Any

from ..dialects import Dialect, get_dialect
from ..thinking import THINKING
from .render import compile_template


class NotExpressible(ValueError):
    """A dialect whose calls a response template cannot describe faithfully."""


# Why a dialect has no response template (every other dialect has one).
WHY_NOT: dict[str, str] = {
    "react": "a ReAct answer is labelled lines (Thought:, Action: NAME, Action Input: {...}, Final Answer:) "
             "that end at an Observation: the model writes itself; a response template cannot drop the "
             "labels from content while keeping their text there, nor end the answer at Observation:, so the "
             "labels, the made-up observation and the text after it would all come back as content",
}

_NAME, _ARGS = "toolbridge_probe", {"toolbridge_arg": 1}
_TEXT = "TOOLBRIDGE_PROBE_TEXT"

# A JSON string, and a balanced JSON object (its strings may hold braces), as `regex` patterns (the
# module transformers and vLLM read response templates with: it has recursion and lookbehind of any length).
# No possessive quantifiers: `regex` matches a lookbehind backwards, where they read escapes wrongly.
_CHARS = r'(?:\\.|[^"\\])*'
_OBJECT = r'(?P<tb_obj>\{(?:[^{}"]|"' + _CHARS + r'"|(?&tb_obj))*\})'


def _loose(literal: str) -> str:
    """A pattern for a literal piece of a call as a dialect writes it, with any whitespace allowed
    where it has some and around JSON punctuation."""
    out = []
    for ch in literal:
        if ch.isspace():
            out.append(r"\s*")
        elif ch in "{}[]:,":
            out.append(r"\s*" + re.escape(ch) + r"\s*")
        else:
            out.append(re.escape(ch))
    return re.sub(r"(?:\\s\*)+", lambda m: r"\s*", "".join(out))


NAME = r'(?P<name>[^"\\]+)'  # a tool's name, as the opener captures it


def _escape(text: str) -> str:
    """re.escape, with whitespace written as its escape (\\n rather than a backslash and a newline)."""
    return re.escape(text).replace("\\\n", r"\n").replace("\\\t", r"\t").replace("\\ ", " ")


def _optional_space(literal: str) -> str:
    """A pattern for a literal marker whose whitespace may be left out (still a finite set of
    strings, which vLLM's grammar derivation needs of a closer)."""
    return "".join(_escape(part) if part.strip() else f"(?:{_escape(part)})?"
                   for part in re.split(r"(\s+)", literal) if part)


def _path(value: Any, want: Any) -> list[str] | None:
    """The keys leading to `want` inside nested objects (None when it is not there)."""
    if value == want:
        return []
    if isinstance(value, dict):
        for key, inner in value.items():
            found = _path(inner, want)
            if found is not None:
                return [key, *found]
    return None


def _split(text: str) -> tuple[str, Any, str]:
    """(marker before, the JSON value, marker after) of a text holding one JSON value."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        raise NotExpressible(f"no JSON in {text!r}")
    value, end = json.JSONDecoder().raw_decode(text, min(starts))
    return text[:min(starts)].strip(), value, text[end:].strip()


def tool_calls_field(dialect: str | Dialect) -> dict:
    """The `tool_calls` region of a dialect, shaped as OpenAI's {"type": "function", "function":
    {"name", "arguments"}}. A call that is one object per call is read as its head up to the
    arguments, with the name captured (the form vLLM's grammar derivation reads), then the arguments
    as JSON, then its end; calls that sit in one JSON document (fenced) are read as that document."""
    d = get_dialect(dialect)
    if d.name in WHY_NOT or d.react:
        raise NotExpressible(f"dialect {d.name!r} has no response template: {WHY_NOT.get(d.name, 'ReAct form')}")
    args = json.dumps(_ARGS, ensure_ascii=False) if d.args_as_string else _ARGS
    call = _split(d.format_call(_NAME, _ARGS))[1]
    if _path(call, _NAME) is None or _path(call, args) is None:
        raise NotExpressible(f"dialect {d.name!r}: a call's name and arguments are not one JSON object")
    if d.wrap_single and d.calls_open:
        return _document_field(d, call)
    head, mid, tail = d.call
    written = head + _NAME + mid + json.dumps(_ARGS) + tail
    if written != d.format_call(_NAME, _ARGS) or not tail.lstrip().startswith("}"):
        raise NotExpressible(f"dialect {d.name!r}: its arguments do not end the call's object")
    lead = r"\s*"  # the whitespace between calls and after text, so it opens no empty content region
    if d.calls_open:  # several calls sit in a list (json: [call, call])
        lead += r"(?:" + re.escape(d.calls_open) + "|" + re.escape(d.joiner.strip()) + r")?"
    field = {"open_pattern": lead + _loose(head) + NAME + _loose(mid), "repeats": True, "content": "json",
             "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}}
    marker = tail.lstrip()[1:]
    if marker.strip():  # the object's brace, then a marker (tags: </tool_call>)
        field["close_pattern"] = r"\}" + _optional_space(marker.rstrip())
    else:  # the object's brace right after balanced arguments that follow the head
        field["close_pattern"] = (r"(?<=" + _loose(head) + _CHARS + _loose(mid) + _OBJECT + r")\s*\}"
                                  + (r"(?:\s*" + re.escape(d.calls_close) + ")?" if d.calls_close else ""))
    return field


def _document_field(d: Dialect, call: dict) -> dict:
    """Every call of an answer in one JSON document (fenced: {"tool_calls": [...]}), whose list
    already holds OpenAI-shaped calls: the region is the document, its value the list."""
    before, doc, after = _split(d.format_calls([(_NAME, _ARGS)]))
    keys = [k for k, v in doc.items() if v == [call]] if isinstance(doc, dict) else []
    if len(keys) != 1 or (_path(call, _NAME), call.get("type")) != (["function", "name"], "function"):
        raise NotExpressible(f"dialect {d.name!r}: its calls are not an OpenAI-shaped list in one object")
    ahead = r"(?=\{\s*" + re.escape(json.dumps(keys[0])) + r"\s*:)"  # only a block holding calls opens
    return {"open_pattern": r"\s*" + re.escape(before) + r"\s*" + ahead, "content": "json",
            "transform": "{content.%s}" % keys[0], "close": after}


def turn_markers(chat_template: str, *, bos_token: str = "", eos_token: str = "") -> tuple[str, list[str]]:
    """(where the assistant's answer starts, the markers that end it), read off the template by
    rendering probes: the generation prompt (or, for a template without one, what follows a user
    turn), and what the template writes after an assistant turn's text, plus the end-of-sequence token."""
    tpl = compile_template(chat_template)
    user = [{"role": "user", "content": _TEXT}]
    tokens = {"bos_token": bos_token, "eos_token": eos_token}
    ask = tpl.render(messages=user, add_generation_prompt=True, **tokens)
    told = tpl.render(messages=user, add_generation_prompt=False, **tokens)
    start = ask[len(told):] if ask.startswith(told) and len(ask) > len(told) else ask.rpartition(_TEXT)[2]
    if not start.strip():
        raise ValueError("the chat template writes nothing where the assistant's answer starts")
    for thinking in THINKING.values():  # a thinking block the prompt opens is the answer's, not the header's
        start = start.strip().removesuffix(thinking.open)
    start = start.strip().splitlines()[-1].strip()  # its last line: the assistant's header
    said = tpl.render(messages=[*user, {"role": "assistant", "content": _TEXT + "A"}],
                      add_generation_prompt=False, **tokens).rpartition(_TEXT + "A")[2]
    ends = [*said.split(), *([eos_token] if eos_token else [])]
    return start, list(dict.fromkeys(ends))


def response_template(dialect: str | Dialect, chat_template: str, *, bos_token: str = "",
                      eos_token: str = "") -> dict:
    """The response template for answers to prompts that `chat_template` (a toolbridge-wrapped
    template asking for `dialect`) renders: a `thinking` region where the template thinks, the calls,
    and the content, which ends at the turn's end markers."""
    start, ends = turn_markers(chat_template, bos_token=bos_token, eos_token=eos_token)
    fields: dict[str, dict] = {}
    thinks = [t for t in THINKING.values() if t.open in chat_template]
    if thinks:
        fields["thinking"] = {"open": thinks[0].open, "close": thinks[0].close, "content": "text"}
    fields["tool_calls"] = tool_calls_field(dialect)
    fields["content"] = {"content": "text"}
    if ends:  # whitespace before the end marker would otherwise open an empty content region
        fields["content"]["close_pattern"] = r"\s*(?:" + "|".join(re.escape(e) for e in ends) + ")"
    return {"defaults": {"role": "assistant"}, "start_anchor": start, "fields": fields}


def expressible(dialect: str | Dialect) -> bool:
    """Whether a dialect has a response template."""
    try:
        tool_calls_field(dialect)
    except NotExpressible:
        return False
    return True
