"""Every way a model may be asked to write a tool call, each declared once.

A dialect's fields drive everything that depends on the format: the prompt instruction and
the history written into prompts (render, via the template prelude), the parser's markers
(stream), stop sequences, and the grammars (grammar). The parser accepts every dialect at
once; a prompt asks for one.
"""
from __future__ import annotations

import re

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


FENCE = "```"  # a markdown code fence; a call's JSON may sit inside one after any marker


@dataclass(frozen=True)
class Dialect:
    name: str
    # Parsing: the marker that starts a call ("" when the JSON itself starts it) and ends it.
    open: str
    close: str = ""
    line_start: bool = False
    bare: bool = False  # a JSON object or list with no marker before it may be a call
    fenced: bool = False  # `open` is a code fence, which may carry a language tag
    # ReAct: "Action: NAME", then one of these labels and the arguments, instead of a call object
    input_labels: tuple[str, ...] = ()
    # Writing one call: text before the name, between name and arguments, after the arguments.
    call: tuple[str, str, str] = ('{"name": "', '", "arguments": ', "}")
    joiner: str = "\n"  # between the calls of one answer
    calls_open: str = ""  # around all calls of one answer
    calls_close: str = ""
    wrap_single: bool = True  # calls_open/close also around a single call
    args_as_string: bool = False  # history writes arguments as a JSON string (OpenAI shape)
    # Writing a tool result back (a user turn): before the tool's name, between name and
    # content, after the content; result_json writes the content as a JSON string.
    result: tuple[str, str, str] = ("", "", "")
    result_json: bool = False
    # The start of a tool result: a model writing it itself has stopped calling.
    result_marker: str = ""
    stop: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()  # line-start labels removed from content (ReAct)
    instruction: str = ""
    trigger: str = field(default="")  # what a lazy grammar waits for (defaults to `open`)

    @property
    def react(self) -> bool:
        return bool(self.input_labels)

    @property
    def grammar_trigger(self) -> str:
        return self.trigger or self.open or self.call[0]

    def format_call(self, name: str, arguments: Any) -> str:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        if self.args_as_string:
            args = json.dumps(args, ensure_ascii=False)
        return self.call[0] + name + self.call[1] + args + self.call[2]

    def format_calls(self, calls: Iterable[tuple[str, Any]]) -> str:
        """The text an assistant turn holding these (name, arguments) calls has in this dialect."""
        calls = list(calls)
        body = self.joiner.join(self.format_call(n, a) for n, a in calls)
        if self.wrap_single or len(calls) > 1:
            body = self.calls_open + body + self.calls_close
        return body

    def as_template_data(self) -> dict:
        """The fields the Jinja prelude reads, as plain data."""
        return {"call": list(self.call), "joiner": self.joiner, "calls_open": self.calls_open,
                "calls_close": self.calls_close, "wrap_single": self.wrap_single, "args_as_string": self.args_as_string,
                "result": list(self.result), "result_json": self.result_json,
                "instruction": self.instruction,
                "guard": list(dict.fromkeys(re.findall(r"<[^<>\s]+>", " ".join(
                    (self.open, self.close, self.result_marker, *self.result)))))}


DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    Dialect(
        name="tags",
        open="<tool_call>", close="</tool_call>",
        call=('<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>"),
        result=('<tool_response>\n{"name": "', '", "content": ', "}\n</tool_response>"), result_json=True,
        result_marker="<tool_response>",
        instruction="To call a tool, write its name and arguments as JSON inside <tool_call></tool_call> tags, "
                    "for example:",
    ),
    Dialect(
        name="json",
        open="", bare=True,
        calls_open="[", joiner=", ", calls_close="]", wrap_single=False,
        result=("Result of ", ": ", ""), result_marker="Result of ",
        instruction="To call a tool, reply with only a JSON object holding its name and arguments, for example:",
        trigger='{"name": "',
    ),
    Dialect(
        name="toolcall",
        open="TOOL_CALL:",
        call=('TOOL_CALL: {"name": "', '", "arguments": ', "}"),
        result=("TOOL_RESULT (", "): ", ""), result_marker="TOOL_RESULT",
        instruction="To call a tool, write TOOL_CALL: followed by a JSON object with its name and arguments, "
                    "for example:",
    ),
    Dialect(
        name="fenced",
        open=FENCE, fenced=True,
        call=('{"type": "function", "function": {"name": "', '", "arguments": ', "}}"),
        calls_open='```json\n{"tool_calls": [', joiner=", ", calls_close="]}\n```",
        args_as_string=True,
        result=('```tool_result\n{"name": "', '", "content": ', "}\n```"), result_json=True,
        result_marker="```tool_result",
        instruction="To call tools, reply with a ```json code block holding a tool_calls list, for example:",
        trigger="```json",
    ),
    Dialect(
        name="react",
        open="Action:", line_start=True,
        input_labels=("Action Input:", "Action input:", "Action_Input:", "ActionInput:"),
        call=("Action: ", "\nAction Input: ", ""),
        result=("Observation (", "): ", ""), result_marker="Observation",
        stop=("\nObservation:",),
        labels=("Thought:", "Final Answer:"),
        instruction="To use a tool, write Thought: (why), Action: (the tool name) and Action Input: "
                    "(its arguments as JSON), then stop and wait for the Observation. "
                    "When you can answer, write Final Answer: and the answer. For example:",
    ),
)}

DEFAULT_DIALECT = "tags"
BARE_JSON = DIALECTS["json"]  # a call as a bare JSON object: what models write unasked

# Keys of a call object, in every spelling the seeds' clients asked models for.
NAME_KEYS = frozenset({"name", "tool_name", "tool", "function_name", "action"})
ARGS_KEYS = frozenset({"arguments", "parameters", "args", "input", "params", "action_input", "tool_input"})
CALL_KEYS = NAME_KEYS | ARGS_KEYS | {"function", "tool_calls", "id", "type"}


def get_dialect(name: str | Dialect | None) -> Dialect:
    """Look a dialect up by name (None means the default)."""
    if isinstance(name, Dialect):
        return name
    try:
        return DIALECTS[name or DEFAULT_DIALECT]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; known: {', '.join(DIALECTS)}") from None


def template_table(dialects: Mapping[str, Dialect] = DIALECTS) -> dict:
    return {name: d.as_template_data() for name, d in dialects.items()}
