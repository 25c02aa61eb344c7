"""Custom tools (OpenAI's `type: "custom"`): a tool whose input is one string, free text or held to a grammar.

Both engines serve such a tool as what they already constrain: a function of one string argument, `input`.
A grammar rides in that argument's JSON schema as a `pattern`: a regex as the client gave it, a Lark grammar
turned into one regex (toolbridge.larkregex). One translator draws that pattern on both engines
(toolbridge.constrain.pattern: inside llama.cpp's GBNF, and as a grammar element of vLLM's structural tag,
`input_grammar`); a grammar it cannot draw is a 400. The input is read back from the call's arguments. The
tool's description shows the model the grammar as the client wrote it.

Chat Completions has no such function shape in its request models (vLLM's, llama-cpp-python's): `shim_chat`
rewrites a chat body's custom tools, custom tool_choice and custom calls in its history as functions, and
toolbridge.serving.custom_calls writes the answer's calls of those tools back in the custom shape.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from .constrain.pattern import Unsupported, pattern_to_gbnf
from .errors import BadRequest
from .larkregex import GrammarError, lark_to_regex

try:  # Python 3.11+ (sre_parse still exists there, but warns on import)
    import re._parser as sre_parse
except ImportError:  # Python 3.10
    import sre_parse

INPUT = "input"
TEXT_PARAMETERS = {"type": "object", "properties": {INPUT: {
    "type": "string", "description": "The freeform text payload for this tool."}}, "required": [INPUT]}
SYNTAXES = ("regex", "lark")


def as_function(name: Any, description: Any, fmt: Any, where: str) -> dict:
    """A custom tool as the function of one string argument both engines serve; its grammar, if any, as the
    argument's pattern and in its description. BadRequest naming the construct for a grammar that cannot be held."""
    syntax, definition = read_format(fmt, where)
    text = description if isinstance(description, str) else ""
    if syntax == "text":
        return _function(name, text, TEXT_PARAMETERS)
    pattern = input_pattern(syntax, definition, f"{where}.format")
    shown = (f"Its input must match this regular expression: {definition}" if syntax == "regex"
             else f"Its input must follow this Lark grammar (start rule `start`):\n{definition}")
    parameters = {"type": "object", "properties": {INPUT: {"type": "string", "pattern": pattern}},
                  "required": [INPUT], "additionalProperties": False}
    return _function(name, f"{text}\n{shown}".strip(), parameters)


def _function(name: Any, description: str, parameters: dict) -> dict:
    fn = {"name": name, "description": description, "parameters": parameters}
    return {"type": "function", "function": fn if description else {k: v for k, v in fn.items() if v}}


def read_format(fmt: Any, where: str) -> tuple[str, str | None]:
    """(syntax, definition) of a custom tool's `format`: ("text", None), or a grammar's syntax and definition,
    in the Responses shape ({type: grammar, syntax, definition}) or the Chat one ({type: grammar, grammar: {...}})."""
    if fmt is None:
        return "text", None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return "text", None
    if kind != "grammar":
        raise BadRequest(f"{where}.format must be {{\"type\": \"text\"}} or {{\"type\": \"grammar\", ...}}.",
                         param=f"{where}.format")
    grammar = fmt.get("grammar") if isinstance(fmt.get("grammar"), Mapping) else fmt
    syntax, definition = grammar.get("syntax"), grammar.get("definition")
    if syntax not in SYNTAXES:
        raise BadRequest(f"{where}.format's grammar syntax must be 'regex' or 'lark', not {syntax!r}.",
                         param=f"{where}.format.syntax")
    if not isinstance(definition, str) or not definition.strip():
        raise BadRequest(f"{where}.format's grammar needs a non-empty `definition`.",
                         param=f"{where}.format.definition")
    return syntax, definition


def input_pattern(syntax: str, definition: str, where: str) -> str:
    """The anchored pattern an input written in `syntax` (regex, lark) must match."""
    if syntax == "lark":
        try:
            regex = lark_to_regex(definition)
        except GrammarError as e:
            raise BadRequest(f"{where}: this Lark grammar cannot be constrained: {e}", param=f"{where}.definition",
                             code="invalid_grammar") from None
    else:
        regex = _unanchored(definition)
    pattern = f"^(?:{regex})$"
    refused = _refused_flag(regex)
    try:
        pattern_to_gbnf(pattern)  # what both engines draw the pattern with: what it cannot draw is refused
    except Unsupported as e:
        refused = refused or str(e)
    if refused is not None:
        raise BadRequest(f"{where}: the {syntax} grammar cannot be constrained by any engine here: {refused}.",
                         param=f"{where}.definition", code="invalid_grammar")
    return pattern


def _refused_flag(regex: str) -> str | None:
    """A flag the regex sets (the translator draws `.` and anchors as if it set none), else None."""
    try:
        flags = sre_parse.parse(regex).state.flags
    except re.error:
        return None  # the translator names it
    return "flag" if flags & (re.IGNORECASE | re.VERBOSE | re.MULTILINE | re.DOTALL) else None


def _unanchored(regex: str) -> str:
    """A client's regex without the `^`/`$` around it: the input matches it whole anyway."""
    if regex.startswith("^"):
        regex = regex[1:]
    if regex.endswith("$") and not regex.endswith("\\$"):
        regex = regex[:-1]
    return regex


def input_grammar(schema: Any) -> str | None:
    """Where `schema` is the parameters `as_function` made for a grammar, a GBNF grammar (xgrammar's EBNF reads it
    too) for the call's arguments, `{"input": "..."}`, whose input matches the grammar's pattern, every character
    written as JSON allows: the translator llama.cpp's grammars use (toolbridge.constrain.pattern). xgrammar's own
    JSON-schema pattern writes no escape: an input could hold no quote, backslash, tab or newline (no patch)."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping) or set(props) != {INPUT} or schema.get("additionalProperties") is not False:
        return None
    prop = props[INPUT]
    if not (isinstance(prop, Mapping) and prop.get("type") == "string" and isinstance(prop.get("pattern"), str)):
        return None
    body = pattern_to_gbnf(prop["pattern"], any_char="char")
    return ('root ::= "{" [ ]? "\\"input\\"" [ ]? ":" [ ]? "\\"" ' + body + ' "\\"" [ ]? "}"\n'
            'char ::= [^"\\\\\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})\n')


def follows(syntax: str, definition: str, text: str) -> bool:
    """Whether `text` follows a custom tool's grammar as the grammar's own tools read it (Python's `re`, whole; the
    lark library's Earley parser): a check independent of the regex the engines hold the input to."""
    import lark

    if syntax == "regex":
        return re.fullmatch(definition, text) is not None
    try:
        lark.Lark(definition, start="start").parse(text)
        return True
    except lark.exceptions.LarkError:
        return False


def decode_input(arguments: str) -> str:
    """A call's input from its shim arguments (`{"input": "..."}`); other text is passed through."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value[INPUT] if isinstance(value, dict) and isinstance(value.get(INPUT), str) else arguments


def input_prefix(arguments: str) -> str:
    """The part of the input a call's arguments streamed so far already hold whole (a prefix of its input)."""
    at = re.match(r'\s*\{\s*"input"\s*:\s*"', arguments)
    if at is None:
        return ""
    body = arguments[at.end():]
    end = _string_end(body)
    try:
        text = json.loads(f'"{body[:end] if end is not None else _whole_escapes(body)}"')
    except ValueError:
        return ""
    return text[:-1] if end is None and text and "\ud800" <= text[-1] <= "\udbff" else text


def _string_end(body: str) -> int | None:
    """Where the JSON string whose inside `body` starts ends (its closing quote), if it does."""
    escaped = False
    for i, c in enumerate(body):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == '"':
            return i
    return None


def _whole_escapes(body: str) -> str:
    """The inside of a JSON string cut anywhere, without an escape the cut left incomplete."""
    start = None  # where the last escape began
    i = 0
    while i < len(body):
        if body[i] == "\\":
            start = i
            i += 6 if body[i + 1:i + 2] == "u" else 2
        else:
            i += 1
    return body[:start] if start is not None and i > len(body) else body


def shim_chat(data: dict) -> frozenset[str]:
    """A chat body's custom tools, custom tool_choice and custom calls in its history rewritten in place as
    functions of one string argument; the names of its custom tools (empty where it has none)."""
    tools = data.get("tools")
    if not isinstance(tools, list) or not any(isinstance(t, Mapping) and t.get("type") == "custom" for t in tools):
        return frozenset()
    names = []
    for i, tool in enumerate(tools):
        if isinstance(tool, Mapping) and tool.get("type") == "custom":
            spec = tool.get("custom")
            if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
                raise BadRequest(f"tools[{i}].custom needs a name.", param=f"tools[{i}].custom")
            tools[i] = as_function(spec["name"], spec.get("description"), spec.get("format"), f"tools[{i}].custom")
            names.append(spec["name"])
    data["tool_choice"] = _function_choice(data.get("tool_choice"))
    for message in data.get("messages") if isinstance(data.get("messages"), list) else ():
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for j, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, Mapping) and call.get("type") == "custom" and isinstance(call.get("custom"), Mapping):
                spec = call["custom"]
                calls[j] = {"id": call.get("id"), "type": "function", "function": {
                    "name": spec.get("name"), "arguments": json.dumps({INPUT: spec.get(INPUT, "")}, ensure_ascii=False)}}
    return frozenset(names)


def _function_choice(choice: Any) -> Any:
    """A chat tool_choice naming custom tools, as one naming functions."""
    if isinstance(choice, Mapping) and choice.get("type") == "custom" and isinstance(choice.get("custom"), Mapping):
        return {"type": "function", "function": {"name": choice["custom"].get("name")}}
    allowed = choice.get("allowed_tools") if isinstance(choice, Mapping) else None
    if isinstance(allowed, Mapping) and isinstance(allowed.get("tools"), list):
        listed = [{"type": "function", "function": {"name": t["custom"].get("name")}}
                  if isinstance(t, Mapping) and t.get("type") == "custom" and isinstance(t.get("custom"), Mapping)
                  else t for t in allowed["tools"]]
        return {**choice, "allowed_tools": {**allowed, "tools": listed}}
    return choice

