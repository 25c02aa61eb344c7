"""Grammars for llama.cpp: unit checks with llama.cpp's own grammar engine, and the corpus of
real-world tool schemas (tests/data/tool_schemas.json): every schema compiles, and calls
sampled from the real model under the strict grammar validate against their schema.

`accepts` asks llama.cpp's grammar sampler, character by character, whether it allows a
text (a rejected token gets logit -inf), so the unit checks test the grammar as llama.cpp
runs it, not the GBNF text.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import re
from pathlib import Path

import pytest
from jsonschema.validators import validator_for

try:
    import llama_cpp
except ImportError:  # fail, as the end-to-end tests do, unless the run opts out
    if os.environ.get("TOOLBRIDGE_SKIP_E2E") == "1":
        pytest.skip("llama_cpp is not installed and TOOLBRIDGE_SKIP_E2E=1", allow_module_level=True)
    raise

from llamacpp_ext import register  # noqa: E402
from llamacpp_ext.__main__ import default_model  # noqa: E402
from llamacpp_ext.compat import compiles, grammar_text  # noqa: E402
from llamacpp_ext.converter import schema_grammar  # noqa: E402
from llamacpp_ext.grammar import render, tool_grammar  # noqa: E402
from toolbridge.engine import Unsupported, pattern_to_gbnf  # noqa: E402
from toolbridge import ToolChoice, get_dialect, normalize_tools  # noqa: E402
from toolbridge.constrain.grammar import entries  # noqa: E402
from toolbridge.request import toolset  # noqa: E402

CORPUS = json.loads((Path(__file__).parent / "data" / "tool_schemas.json").read_text(encoding="utf-8"))
TAGS = get_dialect("tags")


@pytest.fixture(scope="module")
def vocab() -> llama_cpp.Llama:
    return llama_cpp.Llama(default_model(), vocab_only=True, verbose=False)


def accepts(llama: llama_cpp.Llama, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets `text` through and then allows end of text."""
    smpl = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode(), b"root")
    assert smpl, "grammar does not compile"

    def allowed(token: int) -> bool:
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        arr = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        return not math.isinf(data[0].logit)

    try:
        for ch in text:
            for token in llama.tokenize(ch.encode(), add_bos=False, special=False):
                if not allowed(token):
                    return False
                llama_cpp.llama_sampler_accept(smpl, token)
        return allowed(llama.token_eos())
    finally:
        llama_cpp.llama_sampler_free(smpl)


def tool(name: str, parameters: dict, description: str = "") -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def value_grammar(schema: dict) -> str:
    return schema_grammar(schema)


# -- the converter's fixes, checked with llama.cpp's grammar engine ----------------------------

@pytest.mark.parametrize("schema,lo,hi", [
    ({"type": "integer", "minimum": 1}, 1, None),
    ({"type": "integer", "minimum": 0, "maximum": 100}, 0, 100),
    ({"type": "integer", "minimum": -25, "maximum": 130}, -25, 130),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000}, 1, 999),
    ({"type": "integer", "maximum": -3}, None, -3),
])
def test_integer_bounds(vocab, schema, lo, hi):
    g = value_grammar(schema)
    for n in list(range(-40, 140)) + [999, 1000, 1001, 123456]:
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert accepts(vocab, g, str(n)) == inside, (schema, n)
    assert not accepts(vocab, g, "1.5")
    assert not accepts(vocab, g, "007")


@pytest.mark.parametrize("schema", [
    {"type": "number", "minimum": -130, "maximum": 130},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": 0},
    {"type": "number", "minimum": -2.5, "maximum": 3},
])
def test_number_bounds_accept_only_values_inside(vocab, schema):
    g = value_grammar(schema)
    validator = validator_for(schema)(schema)
    accepted = 0
    for text in ["0", "1", "0.5", "1.0", "-0.5", "-1", "2.75", "3", "3.5", "-2.4", "-2.6", "-3", "129.9", "130",
                 "130.5", "-130", "-131", "1000", "1e3"]:
        if accepts(vocab, g, text):
            accepted += 1
            assert validator.is_valid(json.loads(text)), (schema, text)
    assert accepted >= 3


def test_integer_and_number_differ(vocab):
    assert not accepts(vocab, value_grammar({"type": "integer"}), "2.5")
    assert accepts(vocab, value_grammar({"type": "number"}), "2.5")


@pytest.mark.parametrize("pattern,good,bad", [
    (r"^\d{4}-\d{2}-\d{2}$", ["2024-01-15"], ["2024-1-15", "x2024-01-15"]),
    (r"^@[a-zA-Z0-9_]+$", ["@the_user"], ["user", "@", "@a b"]),
    (r"^\+[1-9]\d{1,14}$", ["+525551234567"], ["525551234567", "+0123"]),
    (r"^https?://", ["https://example.com/a?b=1", "http://x"], ["ftp://x", " http://x"]),
    (r"^[A-Z]{3}$", ["EUR"], ["EU", "eur", "EURO"]),
    (r"^#[0-9a-fA-F]{6}$", ["#00ff7A"], ["#00ff7", "00ff7A"]),
    (r"^\S+@\S+\.\w+$", ["a@b.io"], ["a @b.io", "a@b"]),
    (r"^(low|medium|high)$", ["low", "high"], ["lowish", "Low"]),
    (r"[0-9]+", ["abc123def", "7"], ["abc"]),
    (r"^[^,]+$", ["one"], ["a,b"]),
])
def test_patterns(vocab, pattern, good, bad):
    g = value_grammar({"type": "string", "pattern": pattern})
    for s in good:
        assert accepts(vocab, g, json.dumps(s)), (pattern, s)
        assert re.search(pattern, s)
    for s in bad:
        assert not accepts(vocab, g, json.dumps(s)), (pattern, s)


def test_pattern_output_is_json_safe(vocab):
    # '.' and negated classes must not let a raw quote, backslash or newline into the string
    for pattern in (r"^.+$", r"^[^a]+$", r"^\D+$"):
        g = value_grammar({"type": "string", "pattern": pattern})
        assert accepts(vocab, g, json.dumps("xyz"))
        assert not accepts(vocab, g, '"a"b"')
        assert not accepts(vocab, g, '"a\nb"')


def test_unsupported_pattern_is_reported_and_falls_back_to_string(vocab):
    with pytest.raises(Unsupported):
        pattern_to_gbnf(r"^(?=a)\w+$")
    g = value_grammar({"type": "string", "pattern": r"^(?=a)\w+$"})
    assert accepts(vocab, g, json.dumps("anything"))


def test_literals_escape_backslash_and_quote(vocab):
    values = ["a\\b", 'say "hi"', "tab\there"]
    g = value_grammar({"enum": values})
    for v in values:
        assert accepts(vocab, g, json.dumps(v))
    assert not accepts(vocab, g, '"a\\b"')  # JSON a<backspace>b: not in the enum


def test_strings_are_strict_json(vocab):
    g = value_grammar({"type": "string"})
    assert accepts(vocab, g, json.dumps("line\nbreak"))  # escaped
    assert not accepts(vocab, g, '"line\nbreak"')  # raw newline: not JSON


def test_untyped_property_takes_any_value(vocab):
    g = value_grammar({"type": "object", "properties": {"v": {"description": "anything"}}, "required": ["v"]})
    for v in ['"s"', "1", "-2.5", "true", "null", "[1, 2]", '{"a": {"b": []}}']:
        assert accepts(vocab, g, '{"v": ' + v + "}"), v


def test_all_of_ref_enum_is_the_enum(vocab):
    schema = {"type": "object", "properties": {"unit": {"allOf": [{"$ref": "#/definitions/Unit"}], "default": "c"}},
              "required": ["unit"], "definitions": {"Unit": {"enum": ["celsius", "fahrenheit"], "type": "string"}}}
    g = value_grammar(schema)
    assert accepts(vocab, g, '{"unit": "celsius"}')
    assert not accepts(vocab, g, '{"unit": {}}')


def test_nullable_and_type_lists(vocab):
    g = value_grammar({"type": "object", "properties": {"a": {"type": "string", "nullable": True},
                                                         "b": {"type": ["integer", "null"]}}, "required": ["a", "b"]})
    assert accepts(vocab, g, '{"a": null, "b": 3}')
    assert accepts(vocab, g, '{"a": "x", "b": null}')
    assert not accepts(vocab, g, '{"a": 1, "b": null}')


def test_required_and_optional_keys(vocab):
    g = value_grammar({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                       "required": ["a"]})
    assert accepts(vocab, g, '{"a": "x"}')
    assert accepts(vocab, g, '{"a": "x", "b": 2}')
    assert not accepts(vocab, g, '{"b": 2}')


def test_required_key_missing_from_properties_is_still_written(vocab):
    g = value_grammar({"type": "object", "properties": {}, "required": ["x"]})
    assert accepts(vocab, g, '{"x": 1}')
    assert not accepts(vocab, g, "{}")


def test_whitespace_is_bounded(vocab):
    g = value_grammar({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    assert accepts(vocab, g, '{ "a": 1 }')
    assert not accepts(vocab, g, '{  "a": 1}')
    assert not accepts(vocab, g, '{\n"a": 1}')


def test_any_of_with_siblings_and_arrays_of_objects(vocab):
    schema = {"type": "object", "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 2, "items": {
        "type": "object", "properties": {"k": {"enum": ["x", "y"]}}, "required": ["k"]}},
        "id": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
               "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}, "required": ["items", "id"]}
    g = value_grammar(schema)
    assert accepts(vocab, g, '{"items": [{"k": "x"}], "id": {"a": "q"}}')
    assert accepts(vocab, g, '{"items": [{"k": "x"}, {"k": "y"}], "id": {"b": 1}}')
    assert not accepts(vocab, g, '{"items": [], "id": {"a": "q"}}')
    assert not accepts(vocab, g, '{"items": [{"k": "x"}], "id": {}}')


def test_equal_definition_names_in_two_tools_do_not_collide(vocab):
    a = tool("a", {"type": "object", "properties": {"x": {"$ref": "#/$defs/Item"}}, "required": ["x"],
                   "$defs": {"Item": {"type": "integer"}}})
    b = tool("b", {"type": "object", "properties": {"x": {"$ref": "#/$defs/Item"}}, "required": ["x"],
                   "$defs": {"Item": {"type": "boolean"}}})
    tools = normalize_tools([a, b])
    g = render(tools, TAGS, ToolChoice("required"), parallel=False)
    head = '<tool_call>\n{"name": "%s", "arguments": {"x": %s}}\n</tool_call>'
    assert accepts(vocab, g, head % ("a", "5"))
    assert accepts(vocab, g, head % ("b", "true"))
    assert not accepts(vocab, g, head % ("a", "true"))
    assert not accepts(vocab, g, head % ("b", "5"))


def test_recursive_root_ref(vocab):
    entry = next(e for e in CORPUS if e["name"] == "generate_ui")
    g = value_grammar(entry["parameters"])
    ui = {"type": "div", "label": "a", "attributes": [], "children": [
        {"type": "button", "label": "b", "children": [], "attributes": [{"name": "x", "value": "y"}]}]}
    text = json.dumps({k: ui[k] for k in ("type", "label", "children", "attributes")})
    assert accepts(vocab, g, text)


def test_lazy_continuation_starts_after_the_trigger(vocab):
    tools = normalize_tools([tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]})])
    g = render(tools, TAGS, ToolChoice("auto"), after=TAGS.grammar_trigger)
    assert accepts(vocab, g, '\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    assert not accepts(vocab, g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')


def test_a_bare_call_naming_a_tool_is_constrained_from_the_end_of_the_name(vocab):
    tools = normalize_tools([tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                                  "required": ["city"]}), tool("search", {"type": "object"})])
    tags, *bare = entries(tools, TAGS)
    assert tags.trigger == "<tool_call>" and tags.tools == tuple(tools)
    assert [(e.trigger, e.tools) for e in bare] == [('{"name": "get_weather"', (tools[0],)), ('{"name": "search"', (tools[1],))]
    g = render(bare[0].tools, bare[0].dialect, ToolChoice("auto"), after=bare[0].trigger)
    assert accepts(vocab, g, ', "arguments": {"city": "Oslo"}}')
    assert not accepts(vocab, g, ', "arguments": {"town": "Oslo"}}')
    assert [e.trigger for e in entries(tools, get_dialect("json"))] == ['{"name": "']  # its own trigger covers it


def test_unconvertible_schema_falls_back_to_generic_arguments(vocab, caplog):
    # a valid schema (2020-12 allows an empty enum) that llama-cpp-python's converter cannot take
    odd = tool("odd", {"type": "object", "properties": {"x": {"enum": []}}})
    local = tool("local", {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    g = tool_grammar(vocab, toolset([odd, local]), TAGS, ToolChoice("required"), parallel=False)
    assert g is not None
    assert "'odd' cannot be constrained" in caplog.text  # the fallback is logged, naming the tool
    text, _ = grammar_text(g)
    call = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    assert accepts(vocab, text, call % ("odd", '{"any": [1]}'))  # that tool: any object
    assert accepts(vocab, text, call % ("local", '{"n": 3}'))  # the others keep their schema
    assert not accepts(vocab, text, call % ("local", '{"n": "3"}'))


# -- the corpus ---------------------------------------------------------------------------------

def _walk(schema, found: set, depth: int = 0) -> None:
    if isinstance(schema, list):
        for s in schema:
            _walk(s, found, depth)
        return
    if not isinstance(schema, dict):
        return
    t = schema.get("type")
    found.update(k for k in ("enum", "anyOf", "oneOf", "allOf", "$ref", "pattern", "format", "minimum", "maximum")
                 if k in schema)
    if schema.get("nullable") or (isinstance(t, list) and "null" in t) or \
            any(isinstance(s, dict) and s.get("type") == "null" for s in schema.get("anyOf", []) or []):
        found.add("nullable")
    if t == "integer":
        found.add("integer")
    if t == "number":
        found.add("number")
    if t == "object" and depth and schema.get("properties"):
        found.add("nested object")
    if t == "array" and isinstance(schema.get("items"), dict) and schema["items"].get("type") == "object":
        found.add("array of objects")
    if depth and not any(k in schema for k in ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")):
        found.add("untyped" if set(schema) - {"description", "title", "default"} or not schema.get("description")
                  else "description only")
    props = schema.get("properties") or {}
    if set(props) - set(schema.get("required") or ()):
        found.add("optional")
    for v in props.values():
        _walk(v, found, depth + 1)
    for k in ("items", "additionalProperties"):
        if isinstance(schema.get(k), dict):
            _walk(schema[k], found, depth + 1)
    for k in ("anyOf", "oneOf", "allOf"):
        _walk(schema.get(k), found, depth + 1)
    for k in ("$defs", "definitions"):
        if isinstance(schema.get(k), dict):
            found.add("$defs")
            _walk(list(schema[k].values()), found, depth + 1)


def test_corpus_is_real_and_varied():
    assert len(CORPUS) >= 50
    assert len({e["name"] for e in CORPUS}) == len(CORPUS)
    assert all(e.get("source") for e in CORPUS)
    found: set = set()
    for e in CORPUS:
        _walk(e["parameters"], found)
    wanted = {"nested object", "array of objects", "enum", "anyOf", "oneOf", "nullable", "integer", "number",
              "optional", "format", "pattern", "$defs", "$ref", "allOf", "description only", "minimum"}
    assert wanted <= found, wanted - found


@pytest.mark.parametrize("entry", CORPUS, ids=[e["name"] for e in CORPUS])
def test_corpus_schema_compiles(vocab, entry):
    tools = normalize_tools([tool(entry["name"], entry["parameters"], entry["description"])])
    assert compiles(vocab, render(tools, TAGS, ToolChoice("named", entry["name"]), parallel=False))
    for e in entries(tools, TAGS):  # what auto arms: the dialect's marker, a bare call naming the tool
        assert compiles(vocab, render(e.tools, e.dialect, ToolChoice("auto"), parallel=False, after=e.trigger))


def test_whole_corpus_in_one_grammar_compiles(vocab):
    tools = normalize_tools([tool(e["name"], e["parameters"]) for e in CORPUS])
    g = render(tools, TAGS, ToolChoice("required"))
    assert compiles(vocab, g)


def _without_descriptions(schema):
    """The schema minus description texts: a shorter prompt (the grammar ignores them)."""
    if isinstance(schema, list):
        return [_without_descriptions(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "description" and isinstance(v, str):
            continue
        out[k] = {pk: _without_descriptions(pv) for pk, pv in v.items()} if k in ("properties", "$defs", "definitions") \
            and isinstance(v, dict) else _without_descriptions(v)
    return out


# A third of the corpus, from each large source in it (the entries are grouped by source: GitHub's and the
# reference MCP servers, BFCL, OpenAI's and Anthropic's docs): all 69 took 9 minutes of the suite beside the
# servers it starts. Every entry's grammar is compiled above.
SAMPLED = list(enumerate(CORPUS))[::3]


@pytest.mark.slow
def test_corpus_calls_sampled_under_the_grammar_validate():
    """Every third corpus tool (SAMPLED), forced by name, through the toolbridge handler and the real
    model (sampled at temperature 0.7, seeded): each finished call validates against its schema."""
    register()
    llm = llama_cpp.Llama(default_model(), n_ctx=4096, n_threads=1, n_threads_batch=1, logits_all=False,
                          verbose=False, chat_format="toolbridge")
    invalid, cut, done = [], [], 0
    for i, entry in SAMPLED:
        spec = tool(entry["name"], _without_descriptions(entry["parameters"]))
        r = llm.create_chat_completion(
            messages=[{"role": "user", "content": f"Call {entry['name']}."}], tools=[spec],
            tool_choice={"type": "function", "function": {"name": entry["name"]}},
            max_tokens=192, temperature=0.7, seed=i, repeat_penalty=1.1)
        choice = r["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        if choice["finish_reason"] == "length":  # cut off: returned as far as it was written
            cut.append(entry["name"])
            continue
        assert calls, (entry["name"], choice)
        assert [c["function"]["name"] for c in calls] == [entry["name"]]
        args = json.loads(calls[0]["function"]["arguments"])
        errors = [e.message for e in validator_for(entry["parameters"])(entry["parameters"]).iter_errors(args)]
        if errors:
            invalid.append((entry["name"], errors, args))
        done += 1
    print(f"\ncorpus: {done} calls validated, {len(cut)} cut off by max_tokens: {cut}")
    assert not invalid, invalid
    assert len(cut) <= len(SAMPLED) // 10, cut


# A grammar that allows only tokens a rule forbids: Qwen2.5-Coder-0.5B, its call openings banned after a
# repeated call, started another call with `={"` (a token no ban covers); the lazy grammar took the call
# and then allowed only `{` tokens at its arguments, every one of them at -inf, and llama.cpp's grammar
# aborted the server process on the token sampled anyway. Run in a child process: a regression aborts it.
BANNED_UNDER_GRAMMAR = r'''
import sys
import llama_cpp
from llama_cpp import LlamaGrammar
from llamacpp_ext.__main__ import default_model
from llamacpp_ext.generate import Sampling, Session
llama = llama_cpp.Llama(default_model(), n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False)
ban = float(sys.argv[1])
braces = {t: ban for t in range(llama.n_vocab()) if "{" in llama.detokenize([t]).decode("utf-8", "replace")}
session = Session(llama, "Say hello.", llama.tokenize(b"Say hello."), Sampling(temp=0, logit_bias=braces), seed=0,
                  max_tokens=16, stop=[])
print("".join(session.phase(grammar=LlamaGrammar.from_string('root ::= "{\\"a\\": 1}"', verbose=False))))
'''


@pytest.mark.parametrize("ban", ["BAN", "-inf"])
def test_where_the_rules_forbid_every_token_the_grammar_allows_the_grammar_wins(ban):
    """toolbridge's bans are finite (toolbridge.steer.steering.BAN), so the grammar's choice stands; a ban of
    -inf (a request's logit_bias) leaves the grammar nothing, and the sampler takes the grammar's top
    token instead of one the grammar rejects."""
    import subprocess
    import sys

    from toolbridge.steer.steering import BAN
    value = str(BAN) if ban == "BAN" else ban
    r = subprocess.run([sys.executable, "-c", BANNED_UNDER_GRAMMAR, value], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and r.stdout.strip() == '{"a": 1}', (r.returncode, r.stdout[-500:], r.stderr[-2000:])


# -- custom tools: the input held to the tool's grammar, as llama.cpp runs it ----------------------------------

@pytest.mark.parametrize("fmt, good, bad", [
    ({"type": "grammar", "syntax": "regex", "definition": "[0-9]{5}"}, ["90210"], ["9021", "Beverly Hills"]),
    ({"type": "grammar", "syntax": "regex", "definition": r'say "\w+"'}, ['say "hi"'], ["say hi"]),
    ({"type": "grammar", "syntax": "lark", "definition": 'start: "sunny" | "rainy" | "cloudy"'},
     ["rainy"], ["Paris", "rain"]),
    ({"type": "grammar", "syntax": "lark", "definition":
        'start: pair ("," pair)*\npair: KEY "=" VALUE\nKEY: /[a-z_]+/\nVALUE: /[A-Za-z0-9]+/'},
     ["a=1", "city=Paris,unit=C"], ["a=", "a=1,", "A=1"]),
])
def test_custom_tool_input_follows_its_grammar(vocab, fmt, good, bad):
    from toolbridge import custom

    g = value_grammar(custom.as_function("t", "", fmt, "tools[0]")["function"]["parameters"])
    for text in good:
        assert accepts(vocab, g, json.dumps({"input": text})), text
    for text in bad:
        assert not accepts(vocab, g, json.dumps({"input": text})), text


def test_custom_tool_input_may_hold_what_json_escapes(vocab):
    """Codex's apply_patch grammar: a patch's quotes, backslashes and newlines, written as JSON escapes."""
    from toolbridge import custom

    definition = (Path(__file__).parent / "data" / "apply_patch.lark").read_text()
    g = value_grammar(custom.as_function("apply_patch", "", {"type": "grammar", "syntax": "lark",
                                                             "definition": definition}, "tools[0]")["function"]["parameters"])
    patch = '*** Begin Patch\n*** Update File: a.py\n@@\n-x = "1"\n+x = "a\\tb"\n*** End Patch\n'
    assert accepts(vocab, g, json.dumps({"input": patch}))
    assert not accepts(vocab, g, json.dumps({"input": "not a patch"}))
