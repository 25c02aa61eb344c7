"""The vLLM adapter without a server: registration three ways, and request adjustment,
through vLLM's own code (plugin import, request model, xgrammar)."""
import json
import os
import subprocess
import sys

import pytest

from servers import ROOT, require
from toolsets import SEARCH, TOOLS, WEATHER

require("vllm")
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402

from vllm_plugin import ToolbridgeToolParser  # noqa: E402


def registered_after(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter, then ask vLLM's registry for the parser."""
    script = code + "\nfrom vllm.tool_parsers import ToolParserManager\nprint(ToolParserManager.get_tool_parser('toolbridge').__name__)"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="/")


def test_plugin_by_module_name():
    r = registered_after(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                         "from vllm.tool_parsers import ToolParserManager\nToolParserManager.import_tool_parser('vllm_plugin')")
    assert r.stdout.strip().endswith("ToolbridgeToolParser"), r.stderr[-2000:]


def test_plugin_by_file_path():
    path = ROOT / "vllm_plugin" / "toolbridge_parser.py"
    r = registered_after(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                         f"from vllm.tool_parsers import ToolParserManager\nToolParserManager.import_tool_parser({str(path)!r})")
    assert r.stdout.strip().endswith("ToolbridgeToolParser"), r.stderr[-2000:]


def test_plugin_by_entry_point_without_flag():
    """Installed, the `vllm.general_plugins` entry point registers it as vLLM builds its CLI."""
    r = registered_after("from vllm.plugins import load_general_plugins\nload_general_plugins()")
    assert r.stdout.strip().endswith("ToolbridgeToolParser"), r.stderr[-2000:]


def test_unregistered_name_is_unknown_before_loading():
    """Without the plugin loaded, vLLM does not know the name (so the tests above show loading works)."""
    r = registered_after("")
    assert r.returncode == 1 and "KeyError: \"Tool parser 'toolbridge' not found.\"" in r.stderr, r.stderr[-2000:]


def request(**kw):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    body.update(kw)
    return ChatCompletionRequest.model_validate(body)


def adjusted(**kw):
    req = request(**kw)
    ToolbridgeToolParser(None).adjust_request(req)
    return req


def tag_of(req):
    assert req.structured_outputs is not None and req.structured_outputs.structural_tag
    return json.loads(req.structured_outputs.structural_tag)["format"]


def test_auto_is_lazy_on_the_dialect_marker_and_on_a_bare_call_naming_a_tool():
    fmt = tag_of(adjusted())
    names = [t["function"]["name"] for t in TOOLS]
    assert fmt["type"] == "triggered_tags" and not fmt["at_least_one"]
    assert fmt["triggers"] == ["<tool_call>", *('{"name": "%s"' % n for n in names)]
    begins = [t["begin"] for t in fmt["tags"]]
    assert begins[0] == '<tool_call>\n{"name": "get_weather", "arguments": '
    assert begins[len(names):] == ['{"name": "%s", "arguments": ' % n for n in names]
    assert all(t["content"]["max_whitespace_cnt"] <= 2 for t in fmt["tags"])  # bounded whitespace


def test_required_and_named_are_strict():
    fmt = tag_of(adjusted(tool_choice="required"))
    assert fmt["type"] == "tags_with_separator" and fmt["at_least_one"] and len(fmt["tags"]) == len(TOOLS)
    fmt = tag_of(adjusted(tool_choice={"type": "function", "function": {"name": "search"}}))
    assert [t["begin"] for t in fmt["tags"]] == ['<tool_call>\n{"name": "search", "arguments": ']
    assert fmt["stop_after_first"]
    assert tag_of(adjusted(tool_choice="required", parallel_tool_calls=False))["stop_after_first"]


def test_dialect_from_template_kwargs_and_its_stop():
    req = adjusted(chat_template_kwargs={"tb_dialect": "react"})
    assert tag_of(req)["triggers"][0] == "Action:"
    assert "\nObservation:" in req.stop


def test_users_structured_outputs_and_none_are_left_alone():
    req = adjusted(structured_outputs={"regex": "[0-9]+"})
    assert req.structured_outputs.regex == "[0-9]+" and req.structured_outputs.structural_tag is None
    req = adjusted(response_format={"type": "json_object"})  # under auto: calls, or an answer in the format
    assert req.response_format is None and tag_of(req)["type"] == "or"
    req = adjusted(tool_choice="none")
    assert req.structured_outputs is None


def test_bad_schema_is_a_value_error_so_vllm_answers_400():
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": 5}}}}}
    with pytest.raises(ValueError, match="not a valid JSON schema"):
        adjusted(tools=[bad])


def test_schema_the_backend_cannot_take_falls_back_per_tool():
    odd = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=x)y"}}}}}
    fmt = tag_of(adjusted(tools=[WEATHER, odd], tool_choice="required"))
    by_name = {t["begin"].split('"name": "')[1].split('"')[0]: t["content"]["json_schema"] for t in fmt["tags"]}
    assert by_name["odd"] == {"type": "object"} and by_name["get_weather"]["required"] == ["city"]


def test_structural_tags_compile_for_every_dialect():
    import xgrammar

    from toolbridge import DIALECTS
    for name in DIALECTS:
        for choice in ("auto", "required", {"type": "function", "function": {"name": "search"}}):
            req = adjusted(tools=[WEATHER, SEARCH], tool_choice=choice, chat_template_kwargs={"tb_dialect": name})
            xgrammar.Grammar.from_structural_tag(req.structured_outputs.structural_tag)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "search"}}])
def test_own_constraint_is_not_taken_for_the_users(choice):
    """The parser reads the adjusted request again for the answer: the structural tag it set
    itself is not a user constraint (which would conflict with a forced choice)."""
    req = adjusted(tool_choice=choice)
    out = '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
    info = ToolbridgeToolParser(None).extract_tool_calls(out, req)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] == [("search", {"query": "x"})]


@pytest.mark.parametrize("kw, param", [
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": "required", "stop": ["<tool_call>"]}, "stop"),
    ({"tool_choice": {"type": "function", "function": {"name": "search"}}, "stop": ["}"]}, "stop"),
])
def test_forced_call_the_request_itself_forbids_is_400(kw, param):
    with pytest.raises(ValueError, match=param):
        adjusted(**kw)


def test_stop_strings_that_no_call_contains_are_kept():
    assert "Observation:" in adjusted(tool_choice="required", stop=["Observation:"]).stop


def test_the_logits_processor_loads_by_name_and_by_entry_point_as_a_batch_processor():
    """`--logits-processors vllm_plugin.processor:RulesProcessor` and the installed `vllm.logits_processors`
    entry point both give vLLM the batch processor (not a per-request adapter)."""
    from vllm.v1.sample.logits_processor import (AdapterLogitsProcessor, LogitsProcessor,
                                                 _load_logitsprocs_by_fqcns, _load_logitsprocs_plugins)

    from vllm_plugin.processor import RulesProcessor
    assert _load_logitsprocs_by_fqcns(["vllm_plugin.processor:RulesProcessor"]) == [RulesProcessor]
    assert RulesProcessor in _load_logitsprocs_plugins()
    assert issubclass(RulesProcessor, LogitsProcessor) and not issubclass(RulesProcessor, AdapterLogitsProcessor)


def test_one_plan_per_request(monkeypatch):
    """adjust_request plans the request; the answer, whole or streamed, reads the plan kept with
    the request object vLLM hands on, instead of planning again."""
    import toolbridge.request as core
    planned = []
    real = core.plan
    monkeypatch.setattr(core, "plan", lambda *a, **kw: planned.append(1) or real(*a, **kw))
    req = adjusted(tool_choice="auto")
    out = '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
    ToolbridgeToolParser(None).extract_tool_calls(out, req)
    stream = ToolbridgeToolParser(None)
    for i in range(0, len(out), 7):
        stream.extract_tool_calls_streaming(out[:i], out[:i + 7], out[i:i + 7], [], [], [], req)
    stream.finish_streaming()
    assert len(planned) == 1


@pytest.mark.parametrize("route", ["chat", "responses"])
def test_the_request_check_plans_once_and_the_parser_takes_its_plan(monkeypatch, route):
    """The request check makes the body's whole plan (its options, response format and thinking budget
    included) and hands it on in `vllm_xargs`; the parser, given vLLM's request object made from that body,
    takes it: one plan per request from the check to the answer. A client's own key is taken out."""
    import toolbridge.request as core
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest

    from vllm_plugin.middleware import PLAN, RequestCheck
    made = []
    real = core.plan
    monkeypatch.setattr(core, "plan", lambda *a, **kw: made.append(kw) or real(*a, **kw))
    options = {"tb_dialect": "json", "tb_call_bias": 2}
    if route == "chat":
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "tool_choice": "required",
                "chat_template_kwargs": options, "stop": ["<tool_call>"], "vllm_xargs": {PLAN: "forged"}}
        check, model = RequestCheck(None).check, ChatCompletionRequest
    else:
        body = {"model": "m", "input": "hi", "tools": [{"type": "function", **t["function"]} for t in TOOLS],
                "tool_choice": "required", "chat_template_kwargs": options, "vllm_xargs": {PLAN: "forged"}}
        check, model = RequestCheck(None).check_responses, ResponsesRequest
    assert check(body) is True and body["vllm_xargs"][PLAN] != "forged"
    request = model.model_validate(body)
    ToolbridgeToolParser(None).adjust_request(request)
    out = '{"name": "search", "arguments": {"query": "x"}}'
    info = ToolbridgeToolParser(None).extract_tool_calls(out, request)
    assert [c.function.name for c in info.tool_calls] == ["search"]
    assert len(made) == 1 and made[0]["template_kwargs"] == options  # the request's own dialect: json
    assert '"begin": "{\\"name\\": \\"search\\"' in json.dumps(tag_of(request))  # the json dialect's frame


def test_the_plans_key_is_written_into_the_body_as_it_came():
    """A body the check changes only by the plan's key gets the key written in at its start; the rest of
    its text is kept byte for byte (not parsed and written again: that cost as much as reading it)."""
    from toolbridge.serving.asgi import with_fields
    from vllm_plugin.middleware import PLAN, RequestCheck

    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "h\u00e9"}], "tools": TOOLS}).encode()
    data = json.loads(raw)
    verdict = RequestCheck(None).check(data)
    assert set(verdict.added) == {"vllm_xargs"} and PLAN in verdict.added["vllm_xargs"]
    body = with_fields(raw, verdict.added)
    assert body.endswith(raw[1:]) and json.loads(body) == data
    assert with_fields(b" { }", {"a": 1}) == b' {"a": 1 }' and with_fields(b"{}", {}) == b"{}"
    own = {**json.loads(raw), "vllm_xargs": {"x": 1}}  # a body with xargs of its own is written again whole
    assert RequestCheck(None).check(own) is True and own["vllm_xargs"]["x"] == 1


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "search"}}])
def test_own_constraint_is_recognised_on_a_copy_of_the_request(choice):
    """Where the plan kept with the request is not there (vLLM's /derender gets the adjusted request
    from another process), the structural tag toolbridge set is recognised by its content."""
    req = adjusted(tool_choice=choice).model_copy(deep=True)
    out = '<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'
    info = ToolbridgeToolParser(None).extract_tool_calls(out, req)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] == [("search", {"query": "x"})]


def test_a_malformed_environment_variable_stops_the_start(monkeypatch):
    """register() runs as vLLM loads its plugins, before it serves anything."""
    from vllm_plugin import register

    monkeypatch.setenv("TOOLBRIDGE_CALL_BIAS", "lots")
    with pytest.raises(ValueError, match="TOOLBRIDGE_CALL_BIAS: tb_call_bias must be a number"):
        register()


def test_the_validation_seam_is_installed_once_and_remembers_only_sole_tags():
    """Importing the plugin installs one seam in vLLM: its structural-tag validation remembers the
    tags it passed (registering again does not wrap it twice); any other constraint is validated
    every time."""
    from types import SimpleNamespace

    from vllm.v1.structured_output import backend_xgrammar

    from vllm_plugin import register
    from vllm_plugin.constraint import OTHER_CONSTRAINTS, remembering
    validate = backend_xgrammar.validate_xgrammar_grammar
    assert getattr(validate, "toolbridge_memo", False)
    register()
    assert backend_xgrammar.validate_xgrammar_grammar is validate

    def params(**kw):
        return SimpleNamespace(structured_outputs=SimpleNamespace(**{**dict.fromkeys(OTHER_CONSTRAINTS),
                                                                     "structural_tag": None, **kw}))

    seen = []
    check = remembering(seen.append)
    sole, other = params(structural_tag='{"type": "structural_tag"}'), params(json={"type": "object"})
    mixed = params(structural_tag='{"type": "structural_tag"}', regex="a+")
    for p in (sole, sole, other, other, mixed, mixed):
        check(p)
    assert seen == [sole, other, other, mixed, mixed]


def test_tool_choice_none_gets_the_plain_answers_stops():
    req = adjusted(tool_choice="none")
    assert "<tool_call>" in req.stop and "<tool_response>" in req.stop and req.structured_outputs is None


def test_tool_choice_none_shows_no_markup_whole_or_streamed():
    """vLLM hands a tool_choice none answer to the parser for its content alone: markup the model
    copies from its history is not shown, whole or streamed."""
    req = adjusted(tool_choice="none")
    out = 'It is sunny.\n<tool_response>\n{"name": "get_weather", "content": "x"}\n</tool_response>\n<tool_call>\n{"'
    assert ToolbridgeToolParser(None).extract_tool_calls(out, req).content == "It is sunny."
    stream = ToolbridgeToolParser(None)
    text = ""
    for i in range(0, len(out), 5):
        d = stream.extract_tool_calls_streaming(out[:i], out[:i + 5], out[i:i + 5], [], [], [], req)
        text += (d.content or "") if d is not None else ""
    d = stream.finish_streaming()
    text += (d.content or "") if d is not None else ""
    assert text == "It is sunny."


def middleware_of_a_built_app(*flags: str) -> list[str]:
    """The user middleware (outermost first) of an app built by vLLM's launcher with `--middleware`
    flags, in a fresh interpreter where the plugin registered itself through its entry point."""
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "from argparse import Namespace\nfrom fastapi import FastAPI\n"
              "from vllm.plugins import load_general_plugins\nload_general_plugins()\n"
              "from vllm.entrypoints.launchers import app as launcher\n"
              "args = Namespace(allowed_origins=['*'], allow_credentials=False, allowed_methods=['*'],\n"
              "                 allowed_headers=['*'], api_key=None, enable_request_id_headers=False,\n"
              f"                 middleware={list(flags)!r})\n"
              "app = FastAPI()\nlauncher.init_entrypoints_middleware(args, app, ('generate',))\n"
              "print([m.cls.__module__ + '.' + m.cls.__name__ for m in app.user_middleware])")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    return eval(r.stdout.strip().splitlines()[-1])


def test_the_plugin_puts_its_request_check_in_front_of_every_app_once():
    """Every app vLLM's launcher builds gets the request check, outermost, without a flag; named
    with --middleware (as older command lines do), it is there once."""
    ours = "vllm_plugin.middleware.RequestCheck"
    plain = middleware_of_a_built_app()
    assert plain[0] == ours and plain.count(ours) == 1, plain
    flagged = middleware_of_a_built_app(ours)
    assert flagged.count(ours) == 1, flagged


def app_built_with_template(template: str, env: dict) -> subprocess.CompletedProcess:
    """vLLM's launcher building an app for `--chat-template template` with `env`, in a fresh
    interpreter where the plugin registered itself; prints TOOLBRIDGE_DIALECT afterwards, then the
    dialect of the options a request with no options of its own gets."""
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "import os\nfrom argparse import Namespace\nfrom fastapi import FastAPI\n"
              "from vllm.plugins import load_general_plugins\nload_general_plugins()\n"
              "from vllm.entrypoints.launchers import app as launcher\n"
              "args = Namespace(allowed_origins=['*'], allow_credentials=False, allowed_methods=['*'],\n"
              "                 allowed_headers=['*'], api_key=None, enable_request_id_headers=False,\n"
              f"                 middleware=[], chat_template={template!r}, model='m')\n"
              "launcher.init_entrypoints_middleware(args, FastAPI(), ('generate',))\n"
              "print(os.environ.get('TOOLBRIDGE_DIALECT'))\n"
              "from toolbridge.options import resolve\nprint(resolve().dialect.name)")
    base = {k: v for k, v in os.environ.items() if k != "TOOLBRIDGE_DIALECT"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="/", env={**base, **env})


def test_a_wrapped_template_sets_the_dialect_it_asks_for_and_refuses_another(tmp_path):
    """A template wrapped for `json` makes `json` the server's dialect; TOOLBRIDGE_DIALECT naming
    another stops the app's build with a message that says both."""
    from toolbridge.prompt.chat_templates import wrap

    path = tmp_path / "json.jinja"
    path.write_text(wrap("{% for m in messages %}{{ m.content }}{% endfor %}", dialect="json"), encoding="utf-8")
    served = app_built_with_template(str(path), {})
    assert served.returncode == 0 and served.stdout.strip().splitlines()[-2:] == ["json", "json"], served.stderr[-2000:]
    same = app_built_with_template(str(path), {"TOOLBRIDGE_DIALECT": "json"})
    assert same.returncode == 0, same.stderr[-2000:]
    refused = app_built_with_template(str(path), {"TOOLBRIDGE_DIALECT": "tags"})
    assert refused.returncode != 0 and "wrapped for the 'json' dialect" in refused.stderr, refused.stderr[-2000:]
    stock = app_built_with_template("{% for m in messages %}{{ m.content }}{% endfor %}", {})
    assert stock.returncode == 0 and stock.stdout.strip().splitlines()[-2:] == ["None", "tags"], stock.stderr[-2000:]


@pytest.mark.parametrize("fmt, good, bad", [
    ({"type": "grammar", "syntax": "regex", "definition": "[0-9]{5}"}, ["90210"], ["9021", "Beverly Hills"]),
    ({"type": "grammar", "syntax": "lark", "definition": 'start: "sunny" | "rainy" | "cloudy"'},
     ["rainy"], ["Paris", "rain"]),
    ({"type": "grammar", "syntax": "lark", "definition": (ROOT / "tests" / "data" / "apply_patch.lark").read_text()},
     ['*** Begin Patch\n*** Update File: a.py\n@@\n-x = "1"\n+x = "a\\tb"\n*** End Patch\n'], ["not a patch"]),
])
def test_custom_tool_input_follows_its_grammar(fmt, good, bad):
    """A custom tool's grammar, as its input's pattern, reaches the structural tag, which xgrammar holds to it."""
    import xgrammar
    from xgrammar.testing import _is_grammar_accept_string

    from toolbridge import custom
    tool = custom.as_function("t", "", fmt, "tools[0]")
    grammar = xgrammar.Grammar.from_structural_tag(adjusted(tools=[tool], tool_choice="required")
                                                   .structured_outputs.structural_tag)
    call = '<tool_call>\n{{"name": "t", "arguments": {}}}\n</tool_call>'
    for text in good:
        assert _is_grammar_accept_string(grammar, call.format(json.dumps({"input": text}))), text
    for text in bad:
        assert not _is_grammar_accept_string(grammar, call.format(json.dumps({"input": text}))), text
