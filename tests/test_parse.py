"""Complete-text parsing: every dialect, key variant, repair case and negative."""
import json

import pytest

from toolbridge import Content, StreamParser, normalize_tools, parse
from toolbridge.deltas import message
from toolbridge.dialects import DIALECTS
from toolbridge.tools import ToolChoice

from toolsets import TOOLS, ids


def calls(text, tools=TOOLS, **kw):
    r = parse(text, tools, id_factory=ids(), **kw)
    return r.content, [(c.name, json.loads(c.arguments)) for c in r.calls]


PARIS = [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}',  # close tag missing
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '[{"name": "get_weather", "arguments": {"city": "Paris"}}]',
    'TOOL_CALL: {"name": "get_weather", "arguments": {"city": "Paris"}}',
    'TOOL_CALL: {\n  "name": "get_weather",\n  "args": { "city": "Paris" }\n}',
    '```json\n{"tool_calls": [{"id": "call_abc", "type": "function", "function": '
    '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]}\n```',
    '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
    'Action: get_weather\nAction Input: {"city": "Paris"}',
    'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}\nObservation: 20C',
    '<tool_call>\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n</tool_call>',
])
def test_dialects(text):
    content, got = calls(text)
    assert got == PARIS
    assert content in (None, "I need the weather.")


@pytest.mark.parametrize("name_key", ["name", "tool_name", "tool", "function_name", "action"])
@pytest.mark.parametrize("args_key", ["arguments", "parameters", "args", "input", "action_input"])
def test_key_variants(name_key, args_key):
    text = json.dumps({name_key: "get_weather", args_key: {"city": "Paris"}})
    assert calls(text) == (None, PARIS)


def test_openai_shape_without_wrapper():
    text = json.dumps({"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}})
    assert calls(text) == (None, PARIS)


@pytest.mark.parametrize("text, name, args", [
    ("{'name': 'get_weather', 'arguments': {'city': 'Paris'}}", "get_weather", {"city": "Paris"}),  # single quotes
    ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 2,},}', "get_weather", {"city": "Paris", "days": 2}),
    ('{"name": "read", "arguments": {"path": "a", "raw": True, "note": None}}', "read", {"path": "a", "raw": True, "note": None}),
    ('{name: "get_weather", arguments: {city: "Paris"}}', "get_weather", {"city": "Paris"}),  # unquoted keys
    ('{"name": "get_weather", "arguments": {"city": "Paris"', "get_weather", {"city": "Paris"}),  # unclosed at the end
    ('{"name": "get_weather", "arguments": {"city": "Par', "get_weather", {"city": "Par"}),
    ('{"name": "get_weather" "arguments": {"city": "Paris"}}', "get_weather", {"city": "Paris"}),  # missing comma
    ('{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}', "get_weather", {"city": "Paris", "days": 3}),
    ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}', "get_weather", {"city": "Paris", "days": 3}),
    ('{"name": "get_weather", "arguments": {"city": "Paris", "unit": "Celsius"}}', "get_weather", {"city": "Paris", "unit": "celsius"}),
    ('{"name": "get_weather", "arguments": {"city": 75001}}', "get_weather", {"city": "75001"}),
    ('{"name": "read", "arguments": {"path": "a", "raw": "false", "ratio": "0.5", "limit": " 7 "}}', "read",
     {"path": "a", "raw": False, "ratio": 0.5, "limit": 7}),
    ('{"name": "read", "arguments": {"path": "a", "tags": "[\\"x\\", \\"y\\"]"}}', "read", {"path": "a", "tags": ["x", "y"]}),
    ('{"name": "get_weather", "arguments": "{\'city\': \'Paris\'}"}', "get_weather", {"city": "Paris"}),  # string arguments
    ('{"name": "search", "arguments": "cats"}', "search", {"query": "cats"}),  # bare value, single-parameter tool
    ('{"arguments": {"city": "Paris"}, "name": "get_weather"}', "get_weather", {"city": "Paris"}),  # name after arguments
    ('{"name": "get_weather", "arguments": {"city": "Paris \\u00e9\\ud83d\\ude00"}}', "get_weather", {"city": "Paris \u00e9\U0001F600"}),
    ('{"name": "get_weather", "arguments": {"city": "bad \\ud83d surrogate"}}', "get_weather", {"city": "bad \ufffd surrogate"}),
])
def test_repairs_and_coercion(text, name, args):
    content, got = calls(text)
    assert content is None
    assert got == [(name, args)]


def test_string_coercion_is_not_applied_against_the_schema():
    _, got = calls('{"name": "get_weather", "arguments": {"city": "3"}}')
    assert got == [("get_weather", {"city": "3"})]


def test_unsafe_values_are_kept_as_written():
    r = parse('{"name": "get_weather", "arguments": {"city": "Paris", "days": "three"}}', TOOLS)
    assert json.loads(r.calls[0].arguments) == {"city": "Paris", "days": "three"}
    assert "days" in normalize_tools(TOOLS)[0].errors(json.loads(r.calls[0].arguments))[0]  # the schema says no


def test_missing_required_is_kept_not_dropped():
    r = parse('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', TOOLS)
    assert r.calls[0].arguments == "{}" and normalize_tools(TOOLS)[0].errors({})


def test_content_around_calls_has_no_markers():
    text = ("I'll check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Rome\"}}\n</tool_call>\n"
            "Back soon.")
    content, got = calls(text)
    assert content == "I'll check both."  # text after the calls is not content
    assert got == PARIS + [("search", {"query": "Rome"})]
    assert calls(text, end_after_calls=False) == ("I'll check both.\nBack soon.", got)


def test_parallel_list_and_fenced_list():
    text = ('[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
            '{"name": "search", "arguments": {"query": "x"}}]')
    assert calls(text)[1] == PARIS + [("search", {"query": "x"})]
    d = DIALECTS["fenced"]
    text = d.format_calls([("get_weather", {"city": "Paris"}), ("search", {"query": "x"})])
    assert calls(text) == (None, PARIS + [("search", {"query": "x"})])


def test_max_calls_drops_later_calls_silently():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>' \
           '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'
    assert calls(text, max_calls=1) == (None, PARIS)


def test_a_call_that_repeats_an_earlier_one_is_the_last():
    """A model that starts repeating its calls would go on until max_tokens; what follows the
    repeat is read and dropped, in any form (here pretty-printed in a fence), text aside."""
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
    later = '```json\n{\n  "name": "search",\n  "arguments": {"query": "x"}\n}\n```\nDone.'
    assert calls(call + call + later) == (None, PARIS + PARIS)
    assert calls(call + call + later, end_after_calls=False) == ("Done.", PARIS + PARIS)
    other = call.replace("Paris", "Rome")
    assert calls(call + other + later)[1] == PARIS + [("get_weather", {"city": "Rome"}), ("search", {"query": "x"})]


def test_named_choice_restricts_names():
    text = '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'
    content, got = calls(text, choice=ToolChoice("named", "get_weather"))
    assert got == [] and content == text


def test_react_labels_and_observation():
    text = "Thought: I know this one.\nFinal Answer: Paris is in France."
    assert calls(text) == ("I know this one.\nParis is in France.", [])
    text = 'Thought: check\nAction: search\nAction Input: cats and dogs\nObservation: made up\nThought: done'
    assert calls(text) == ("check", [("search", {"query": "cats and dogs"})])


def test_hallucinated_result_ends_the_answer():
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
            '<tool_response>{"temp": 20}</tool_response>\nIt is 20 degrees.')
    assert calls(text) == (None, PARIS)


def test_name_spellings():
    for name in ("functions.get_weather", "GET_WEATHER", "`get_weather`"):
        text = 'Action: %s\nAction Input: {"city": "Paris"}' % name
        assert calls(text)[1] == PARIS, name


@pytest.mark.parametrize("text", [
    "The weather in Paris is sunny today.",
    '{"city": "Paris", "temperature": 21}',  # a JSON answer that is not a call
    '[1, 2, 3]',
    '{"name": "Alice", "age": 30}',  # names no declared tool
    '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',  # undeclared tool
    'Use `function f() { return {a: 1}; }` in JS, or {"x": 1} in JSON.',
    '```python\ndef f():\n    return {"a": [1, 2]}\n```',
    '```json\n{"city": "Paris"}\n```',
    'Set TOOL_CALL to 1 and Action: go.',
    'Action: fly\nAction Input: {"to": "Mars"}',
    'a [link](http://x.y) and {braces} and [{"k": "v"}]',
    '',
])
def test_negatives(text):
    r = parse(text, TOOLS)
    assert r.calls == []
    assert (r.content or "") == text


def test_no_tools_no_calls():
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert parse(text, []).calls == []


def test_arguments_are_always_an_object():
    for body in ('{"name": "get_weather", "arguments": [1, 2]}', '{"name": "get_weather", "arguments": null}',
                 '{"name": "get_weather", "arguments": 5}', '{"name": "get_weather"}'):
        r = parse(f"<tool_call>{body}</tool_call>", TOOLS)
        assert isinstance(json.loads(r.calls[0].arguments), dict), body


def test_incomplete_call_is_marked():
    r = parse('<tool_call>{"name": "get_weather", "arguments": {"city": "Pa', TOOLS)
    assert r.calls[0].complete is False
    r = parse('<tool_call>{"name": "get_weather", "arguments": {"city": "Pa"}}', TOOLS)
    assert r.calls[0].complete is True


def test_openai_message_shape():
    r = parse('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>', TOOLS)
    msg = message(r.content, r.calls)
    assert msg["content"] is None
    tc = msg["tool_calls"][0]
    assert tc["id"].startswith("call_") and len(tc["id"]) > 5 and tc["type"] == "function"
    assert json.loads(tc["function"]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("text", [
    '<tool_response>\n{"name": "get_weather", "content": "sunny, 22C"}\n</tool_response>',  # a made-up result
    '{"name": "get_weather"}',  # bare JSON naming a tool, with no arguments key
    '{"name": "get_weather", "description": "Get the weather", "arguments": {"city": "x"}}',  # an echoed definition
])
def test_bare_json_must_look_like_a_call(text):
    assert parse(text, TOOLS).calls == []


def test_marked_call_without_arguments_key_is_a_call():
    assert calls('<tool_call>{"name": "get_weather"}</tool_call>') == (None, [("get_weather", {})])


def test_tool_results_must_answer_an_earlier_call():
    from toolbridge import BadRequest, check_tool_results
    ok = [{"role": "user", "content": "q"},
          {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "search", "arguments": "{}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    check_tool_results(ok)
    with pytest.raises(BadRequest) as e:
        check_tool_results(ok + [{"role": "tool", "tool_call_id": "c2", "content": "r"}])
    assert e.value.body()["error"]["param"] == "messages[3].tool_call_id"


@pytest.mark.parametrize("text", [
    "{'a': 1}", '{"a": 1,}', '{"a": True, "b": None}', '{a: "x"}', '{"a": {"b": "c"', '{"a": "Par',
    '{"a": 1 "b": 2}', "[1, 2,", "{\"a\": [1, {\"b\": 'x'}]}", '{"a": "x\\ny", "b": -1.5e3}',
])
def test_lenient_reader_repairs_as_json_repair_does(text):
    """The streaming reader (written for O(1) work per delta, which json-repair's whole-text
    repair cannot give) agrees with json-repair on the repairs models need."""
    import json_repair

    from toolbridge.jsondata import loads

    assert loads(text)[0] == json_repair.loads(text)


# -- history markup: the model writes a tool result or a new turn itself ------------------------------

from toolbridge.parsing.markers import TURN_MARKERS, history, markers  # noqa: E402

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
HISTORY = sorted({(d.name, text) for d in DIALECTS.values() for text in history(d)})
PROSE = {"Result of ", "Observation"}  # plain words: history markup only once a call has started


def test_history_markup_comes_from_the_dialects():
    assert {text for _, text in HISTORY} == {"<tool_response>", "</tool_response>", "Result of ", "TOOL_RESULT",
                                            "```tool_result", "Observation"}
    assert set(markers(None).end_texts) == set(TURN_MARKERS) | {text for _, text in HISTORY} - PROSE


@pytest.mark.parametrize("dialect, marker", HISTORY)
def test_result_markup_ends_the_answer_after_a_call(dialect, marker):
    text = CALL + "\n" + marker + ' (get_weather): {"temp": 20}\n' + CALL.replace("Paris", "Rome") + "\nIt is 20."
    assert calls(text) == (None, PARIS)


@pytest.mark.parametrize("dialect, marker", HISTORY)
def test_result_markup_before_a_call(dialect, marker):
    text = "It is sunny.\n" + marker + ' (get_weather): "sunny"\n' + CALL
    if marker in PROSE:  # an answer may say these words
        assert calls(text) == (text.split("\n<tool_call>")[0], PARIS)
    else:
        assert calls(text) == ("It is sunny.", [])
        assert calls("It is sunny. " + marker + " x") == ("It is sunny.", [])


@pytest.mark.parametrize("marker", TURN_MARKERS)
def test_turn_markers_end_the_answer(marker):
    assert calls("Sunny." + marker + "user\nhi " + CALL) == ("Sunny.", [])
    assert calls("Sunny.\n" + marker) == ("Sunny.", [])
    assert calls(CALL + marker + "\n" + CALL) == (None, PARIS)
    assert calls(CALL + "\nDone. " + marker + " more") == (None, PARIS)
    assert calls(CALL + "\nDone. " + marker + " more", end_after_calls=False) == ("Done.", PARIS)
    assert calls(marker + CALL) == (None, [])


def test_turn_markers_are_what_the_prompt_guards():
    """The prompt renderer breaks each turn marker in user and tool content (render.GUARDED)."""
    from toolbridge.prompt.render import GUARDED

    for marker in TURN_MARKERS:
        assert any(g in marker for g in GUARDED), marker


def test_history_markup_seen_by_the_reported_servers():
    assert calls("It is sunny.\n</tool_response>") == ("It is sunny.", [])
    assert calls("Sunny.<|im_start|>user\nhi") == ("Sunny.", [])
    assert calls("Sunny. <tool_response> x") == ("Sunny.", [])
    assert calls(CALL + "\n<tool_response>\n</tool_response>") == (None, PARIS)


@pytest.mark.parametrize("text", [
    "a <| b", "<|", "x<|im_sta", "[IN", "see [IN", "an [INSTALL] step", "[/INS", "a </s", "</", "<start_of",
    "TOOL_RESUL", "```tool_resul", "<tool_respons", "<<SYS>> is Llama 2 markup",
    "The Result of the vote: yes", "Result of the vote: yes",  # "Result of " only after a call
    "x\nObservation: the sky is blue", "Observations:\n- a",  # "Observation" only after a call
])
def test_history_markup_false_positives(text):
    """Only whole markers count; a prefix cut off at the end of the text is content, as a cut-off call marker is."""
    assert calls(text) == (text, [])


def test_prose_result_markers_after_a_call():
    assert calls(CALL + " Result of get_weather: 20") == (None, PARIS)  # anywhere once a call has started
    assert calls(CALL + "\nObservation: 20") == (None, PARIS)
    assert calls(CALL + "\nThe Observation is 20.", end_after_calls=False) == ("The Observation is 20.", PARIS)


def test_stray_close_marker_is_dropped():
    assert calls("Done.</tool_call>") == ("Done.", [])
    assert calls(CALL + "\n</tool_call>\nDone.", end_after_calls=False) == ("Done.", PARIS)
    # the close of an open marker that was content stays with it
    assert calls("Write <tool_call> then </tool_call>.") == ("Write <tool_call> then </tool_call>.", [])


def test_history_markup_in_released_and_joined_content():
    """Markup in text held as a possible call and then released, or formed across a call or a dropped marker."""
    assert calls('{"answer": "<|im_end|>"}') == ('{"answer": "', [])
    assert calls("Action: fly<|im_end|>\nAction Input: {}") == ("Action: fly", [])
    assert calls("[[INST]] hi") == ("[", [])
    assert calls("a <|" + CALL + "im_end|> b", end_after_calls=False) == ("a ", PARIS)  # what is out stays out
    assert calls("a <|" + CALL + "im_end|> b") == ("a <|", PARIS)  # after a call nothing can complete the markup
    assert calls("<|</tool_call>im_end|>") == (None, [])


def test_end_markers_contain_no_other():
    """ContentGuard cuts at the leftmost marker, which must not depend on how far the text has come."""
    ends = markers(None).end_texts
    assert not [(a, b) for a in ends for b in ends if a != b and a in b]


def test_turn_cut_of_a_plain_answer():
    """A plain answer (no tools in play) ends at a chat turn marker, whole or in any split."""
    from toolbridge.parsing.markers import TurnCut

    text = "Sunny, 21C.<|im_end|>\n<|im_start|>user\nmore"
    assert TurnCut.whole(text) == "Sunny, 21C."
    for i in range(len(text) + 1):
        cut = TurnCut()
        assert cut.feed(text[:i]) + cut.feed(text[i:]) + cut.finish() == "Sunny, 21C."
    assert TurnCut.whole("a <|b and [IN") == "a <|b and [IN"


@pytest.mark.parametrize("tail", ["<tool_call>", "<tool_call>\n", '<tool_call>\n{"', '<tool_call>\n{"name": "get_w'])
def test_a_call_tag_cut_before_the_tools_name_is_not_content(tail):
    """max_tokens cut the answer after a call tag, before a call in it counted: the tag and what
    follows are markup, not an answer, streamed or not."""
    assert calls("Sure.\n" + tail) == ("Sure.", [])
    assert calls(CALL + "\n" + tail) == (None, PARIS)
    for i in range(len(tail)):
        p = StreamParser(TOOLS)
        events = p.feed("Sure.\n" + tail[:i]) + p.feed(tail[i:]) + p.finish()
        assert "".join(e.text for e in events if type(e) is Content) == "Sure."


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_an_answer_that_ends_inside_a_call_start_shows_none_of_it(dialect):
    from toolbridge.constrain.grammar import call_starts

    for start in call_starts(DIALECTS[dialect]):
        for k in range(2, len(start)):
            if start[:k].startswith("```"):  # a code fence of its own, which opens or closes code too
                continue
            text = "Let me check.\n" + start[:k]
            whole = parse(text, TOOLS).content
            assert whole == "Let me check.", (start[:k], whole)
            p = StreamParser(TOOLS)
            streamed = [e for c in text for e in p.feed(c)] + p.finish()
            assert "".join(e.text for e in streamed if isinstance(e, Content)) == whole
    # one character of a start also ends plain text, and text that left every start is the model's own
    for text in ("x < y and {", "Hello <pre>", 'JSON: {"a": 1'):
        assert parse(text, TOOLS).content == text
