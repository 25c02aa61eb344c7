"""Constraints for llama.cpp: the core's call frames (toolbridge.constrain.grammar) as GBNF.

The JSON rules come from converter.ToolSchemaConverter (llama-cpp-python's converter, fixed
for real tool schemas). Every grammar is compiled by llama.cpp's own parser before it is used
(compat.compiles: a grammar llama.cpp rejects would crash the process at sampling time), and
falls back through the core's one policy (toolbridge.constrain.grammar.constrain) when it fails; the
result is kept with the tool set, so a repeated tool set costs a lookup.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Sequence

import llama_cpp

from toolbridge.engine import (EITHER, LAZY, STRICT, BadRequest, Dialect, Entry, Memo, Tool, ToolChoice, ToolRequest,
                               ToolSet, constrain, frames, json_string, separator)

from .compat import JSON_GBNF, LlamaGrammar, compiles, grammar_text, model_key
from .converter import schema_grammar, schema_rules
from .model import Model

log = logging.getLogger("toolbridge.llamacpp")

# What llama-cpp-python's converter raises on schemas it cannot take (asserts included).
CONVERSION_ERRORS = (ValueError, AssertionError, KeyError, TypeError, RecursionError)


def render(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice, *, parallel: bool = True,
           after: str | None = None, formats: bool = False, final: dict | None = None) -> str:
    """A GBNF grammar for calls in `dialect`.

    Strict (after=None): the whole answer is one call, or several when parallel; or, given a `final`
    JSON schema, a final answer that follows it instead (toolbridge.request.EITHER).
    Lazy (after=a trigger): the text that follows the trigger, for generation continued from a
    prompt that ends with it; one call.
    """
    pairs: list[tuple[str, dict]] = []
    alts = []
    for i, f in enumerate(frames(tools, dialect, choice, formats)):
        if after is not None and not f.begin.startswith(after):
            raise ValueError(f"dialect {dialect.name!r}: trigger {after!r} does not start the call")
        begin = f.begin[len(after):] if after is not None else f.begin
        pairs.append((f"tb-args{i}", f.schema))
        alts.append(f"( {json_string(begin)} tb-args{i} {json_string(f.end)} )")
    if not alts:
        raise ValueError("no tool can be called")
    if final is not None:
        pairs.append(("tb-final", final))
    rules = [schema_rules(pairs).rstrip("\n"), "tb-call ::= " + " | ".join(alts)]
    sep = separator(dialect)
    if after is not None or not parallel:
        calls = "tb-call"
    else:
        calls = f"tb-call ( {json_string(sep)} tb-call )*" if sep else "tb-call+"
    rules.append(f"root ::= ( {calls} ) | tb-final" if final is not None else f"root ::= {calls}")
    return "\n".join(rules) + "\n"


def _checked(llama: llama_cpp.Llama, toolset: ToolSet, key: tuple, tools: Sequence[Tool], dialect: Dialect,
             choice: ToolChoice, parallel: bool, after: str | None, formats: bool,
             final: dict | None = None) -> LlamaGrammar | None:
    def build(part: Sequence[Tool], only: ToolChoice) -> str | None:
        try:
            text = render(part, dialect, only, parallel=parallel, after=after, formats=formats, final=final)
        except CONVERSION_ERRORS as e:
            log.info("toolbridge: no grammar for %s (%s: %s)", [t.name for t in part], type(e).__name__, e)
            return None
        return text if compiles(llama, text) else None

    text = toolset.memo(("gbnf", model_key(llama), *key), lambda: constrain(tools, choice, build))
    return LlamaGrammar.from_string(text, verbose=False) if text is not None else None


def tool_grammar(llama: llama_cpp.Llama, toolset: ToolSet, dialect: Dialect, choice: ToolChoice, *,
                 parallel: bool, formats: bool = False, final: dict | None = None) -> LlamaGrammar | None:
    """The checked strict grammar (the whole answer is calls, or a `final` answer in that schema), or
    None: calls are generated unconstrained and parsed."""
    key = (dialect.name, choice, parallel, formats, json.dumps(final, sort_keys=True) if final is not None else None)
    return _checked(llama, toolset, key, toolset.tools, dialect, choice, parallel, None, formats, final)


def entry_grammar(llama: llama_cpp.Llama, toolset: ToolSet, entry: Entry, choice: ToolChoice) -> LlamaGrammar | None:
    """The checked lazy grammar for what follows `entry`'s trigger (one call), or None."""
    return _checked(llama, toolset, ("entry", entry.trigger, entry.dialect.name, choice, entry.formats), entry.tools,
                    entry.dialect, choice, False, entry.trigger, entry.formats)


def answer_grammar(model: Model, req: ToolRequest, user: LlamaGrammar | None) -> LlamaGrammar | None:
    """The grammar the whole answer is generated under: the calls' for `required` and named, none for
    `auto` (a call's constraint is armed by its trigger: `entry_grammar`), else the user's."""
    if req.mode in (STRICT, EITHER):
        grammar = tool_grammar(model.llama, req.toolset, req.dialect, req.choice, final=req.final,
                               parallel=req.parallel and req.choice.mode != "named", formats=req.decisions.formats)
        if grammar is None and req.mode == EITHER:  # the final answer would not follow its format
            raise BadRequest("response_format's schema cannot be made a grammar beside these tools.",
                             param="response_format")
        return grammar
    return user if req.mode != LAZY else None


def _json_object(response_format: Any) -> bool:
    return isinstance(response_format, dict) and response_format.get("type") == "json_object"


def user_grammar(model: Model, grammar: LlamaGrammar | None, response_format: Any) -> LlamaGrammar | None:
    """The request's own constraint, checked (the stock server would crash on a bad grammar): its
    grammar, or the grammar of a json_object response_format (with or without a schema)."""
    if grammar is not None:
        if not compiles(model.llama, *grammar_text(grammar)):
            raise BadRequest("grammar is not a valid GBNF grammar.", param="grammar", code="invalid_grammar")
        return grammar
    if not _json_object(response_format):
        return None
    schema = response_format.get("schema")
    if not isinstance(schema, dict):
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    return _RESPONSE.get((model.key, json.dumps(schema, sort_keys=True)), lambda: _schema_grammar(model.llama, schema))


_RESPONSE: Memo[LlamaGrammar] = Memo(128)


def _schema_grammar(llama: llama_cpp.Llama, schema: dict) -> LlamaGrammar:
    """A response_format schema's grammar, checked (generic JSON where it cannot be converted)."""
    text = JSON_GBNF
    try:
        converted = schema_grammar(schema)
        if compiles(llama, converted):
            text = converted
        else:
            log.warning("toolbridge: llama.cpp rejected the response_format grammar; using generic JSON")
    except CONVERSION_ERRORS as e:
        log.warning("toolbridge: response_format schema not converted (%s); using generic JSON", e)
    return LlamaGrammar.from_string(text, verbose=False)
