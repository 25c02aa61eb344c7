"""Property tests: the parser never raises, and a stream equals the whole-text parse for
every split into deltas; no marker of a parsed call, and no history markup, reaches content."""
import json

from hypothesis import HealthCheck, assume, given, settings, strategies as st

from toolbridge import parse
from toolbridge.dialects import DIALECTS
from toolbridge.events import CallArgs, CallEnd, CallStart, Content
from toolbridge.parsing.markers import markers
from toolbridge.parsing.stream import StreamParser
from toolbridge.tools import normalize_tools

from toolsets import TOOLS, ids

import os

BY_NAME = {t.name: t for t in normalize_tools(TOOLS)}

# TOOLBRIDGE_DEEP=1 runs 25x more examples (a soak run, not for CI).
SETTINGS = settings(max_examples=10_000 if os.environ.get("TOOLBRIDGE_DEEP") else 400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

FRAGMENTS = ["<tool_call>", "</tool_call>", "<tool_", "{", "}", "[", "]", '"', "'", ":", ",", "\n", " ", "\\",
             "TOOL_CALL:", "TOOL_", "Action:", "Action Input:", "Act", "Thought:", "Final Answer:",
             "Observation:", "```", "```json", "``", "name", "arguments", "args", '"name": ', '"arguments": ',
             "get_weather", "search", "read", '"get_weather"', '"city"', '"Paris"', "True", "None", "null",
             "tool_calls", "function", "\\u00e9", "\\ud83d", "3", "-1.5e3", "<tool_response>", "Result of ",
             "é", "日本", "\t"]
# history markup (markers.py): results written by the model, turn markers, and pieces of them
ENDS = markers(None).end_texts  # the markup that ends an answer wherever it is
HISTORY = list(ENDS) + ["Observation (get_weather): ", "\nObservation: ", "Result of get_weather: ", "</tool_call>",
                        "<|", "<|im_", "[IN", "[/INST", "</s", "</", "<start_of", "TOOL_RES", "```tool_", "<tool_response"]
FRAGMENTS += HISTORY
noise = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=40).map("".join)
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]<>`'\":\\", blacklist_categories=("Cs",)),
                max_size=30).filter(lambda s: not any(m in s for m in MARKER_WORDS))
MARKER_WORDS = ("TOOL_CALL", "TOOL_RESULT", "Action", "Thought", "Final Answer", "Observation", "Result of")

scalar = st.one_of(st.text(max_size=12), st.integers(-10**6, 10**6), st.booleans())
args_for = {
    "get_weather": st.fixed_dictionaries({"city": st.text(min_size=1, max_size=12)},
                                         optional={"days": st.integers(1, 30), "unit": st.sampled_from(["celsius", "fahrenheit"])}),
    "search": st.fixed_dictionaries({"query": st.text(max_size=20)}),
    "read": st.fixed_dictionaries({"path": st.text(max_size=10)},
                                  optional={"limit": st.integers(0, 99), "raw": st.booleans(),
                                            "tags": st.lists(st.text(max_size=5), max_size=3)}),
}
one_call = st.sampled_from(sorted(args_for)).flatmap(lambda n: st.tuples(st.just(n), args_for[n]))


def expected_content(pre, post):
    """Whitespace next to a call is not content, except one run between content on both sides."""
    ws = " \t\r\n"
    before, after = pre.rstrip(ws), post.strip(ws)
    lead = "\n" + post[: len(post) - len(post.lstrip(ws))] if before else ""
    return (before + (lead + after if after else "")) or None


def split(text, cuts):
    cuts = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]


def run_stream(text, cuts, **kw):
    p = StreamParser(TOOLS, id_factory=ids(), **kw)
    events = []
    for d in split(text, cuts):
        events += p.feed(d)
    events += p.finish()
    return events


def check_contract(events):
    """OpenAI stream shape: name once per call, then fragments that concatenate to the arguments."""
    started, args, ended = [], {}, set()
    for e in events:
        if type(e) is CallStart:
            assert e.index == len(started) and e.id.startswith("call_")
            started.append(e.index)
            args[e.index] = ""
        elif type(e) is CallArgs:
            assert e.index in args and e.index not in ended and e.text
            args[e.index] += e.text
        elif type(e) is CallEnd:
            assert args[e.index] == e.call.arguments
            assert isinstance(json.loads(e.call.arguments), dict)
            ended.add(e.index)
        else:
            assert type(e) is Content and e.text
    assert ended == set(started)


def fold(events):
    content = "".join(e.text for e in events if type(e) is Content) or None
    return content, [(e.call.name, e.call.arguments, e.call.complete) for e in events if type(e) is CallEnd]


def whole(text, **kw):
    r = parse(text, TOOLS, id_factory=ids(), **kw)
    return r.content, [(c.name, c.arguments, c.complete) for c in r.calls]


@SETTINGS
@given(text=noise, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_noise_never_raises_and_splits_agree(text, cuts):
    events = run_stream(text, cuts)
    check_contract(events)
    assert fold(events) == whole(text)


def up_to_a_repeat(calls: list) -> list:
    """The calls an answer keeps: up to the first that repeats an earlier one, that one included. A
    repeat is the same name and the same arguments written in the same order (the parser compares the
    arguments' text: `{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` are two calls)."""
    written = [(name, list(args.items())) for name, args in calls]
    for i, call in enumerate(written):
        if call in written[:i]:
            return calls[:i + 1]
    return calls


@SETTINGS
@given(pre=prose, post=prose, dialect=st.sampled_from(sorted(DIALECTS)), calls=st.lists(one_call, min_size=1, max_size=3),
       cuts=st.lists(st.integers(0, 600), max_size=20))
def test_well_formed_calls_round_trip(pre, post, dialect, calls, cuts):
    d = DIALECTS[dialect]
    body = d.format_calls(calls)
    assume(not (d.react and post.strip()))  # ReAct reads the rest of the line as its input
    text = pre + ("\n" if pre else "") + body + ("\n" + post if post else "")
    for end_after_calls in (True, False):
        events = run_stream(text, cuts, end_after_calls=end_after_calls)
        check_contract(events)
        content, got = fold(events)
        assert (content, got) == whole(text, end_after_calls=end_after_calls)
        assert [(n, json.loads(a)) for n, a, _ in got] == up_to_a_repeat(calls)
        assert content == expected_content(pre, post if not end_after_calls else "")
        assert all(complete and not BY_NAME[n].errors(json.loads(a)) for n, a, complete in got)  # schema-valid
        for marker in ("<tool_call>", "</tool_call>", "TOOL_CALL:", "```", "Action:", "Action Input:", '"arguments"'):
            assert marker not in (content or ""), marker


@SETTINGS
@given(pre=prose, dialect=st.sampled_from(sorted(DIALECTS)), calls=st.lists(one_call, min_size=1, max_size=3),
       after=st.one_of(noise, st.text(max_size=80)), cuts=st.lists(st.integers(0, 600), max_size=20))
def test_nothing_after_a_complete_call_is_content(pre, dialect, calls, after, cuts):
    """Whatever a model writes after a complete call (prose, a made-up result, half a call, markup),
    in every dialect and for any split into deltas, none of it reaches content: the answer's content
    is the text before its first call."""
    text = pre + ("\n" if pre else "") + DIALECTS[dialect].format_calls(calls) + "\n" + after
    events = run_stream(text, cuts)
    check_contract(events)
    assert fold(events) == whole(text)
    assert fold(events)[0] == expected_content(pre, "")
    assert [(n, json.loads(a)) for n, a, _ in fold(events)[1][:len(calls)]] == up_to_a_repeat(calls)


@SETTINGS
@given(dialect=st.sampled_from(sorted(DIALECTS)), call=one_call, cut_at=st.floats(0, 1),
       cuts=st.lists(st.integers(0, 300), max_size=10))
def test_cut_off_calls(dialect, call, cut_at, cuts):
    """A call cut off anywhere (max_tokens) parses the same streamed or not, and never raises."""
    text = DIALECTS[dialect].format_calls([call])
    text = text[: int(len(text) * cut_at)]
    events = run_stream(text, cuts)
    check_contract(events)
    assert fold(events) == whole(text)


@SETTINGS
@given(dialect=st.sampled_from(sorted(DIALECTS)), call=one_call, pos=st.integers(0, 10**6), junk=st.sampled_from(FRAGMENTS),
       cuts=st.lists(st.integers(0, 300), max_size=10))
def test_near_misses(dialect, call, pos, junk, cuts):
    """A well-formed call with one fragment inserted somewhere: whatever it parses to, splits agree."""
    text = DIALECTS[dialect].format_calls([call])
    pos %= len(text) + 1
    text = text[:pos] + junk + text[pos:]
    events = run_stream(text, cuts)
    check_contract(events)
    assert fold(events) == whole(text)


@SETTINGS
@given(text=noise, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_single_call_limit_agrees(text, cuts):
    events = run_stream(text, cuts, max_calls=1)
    check_contract(events)
    assert fold(events) == whole(text, max_calls=1)
    assert sum(type(e) is CallStart for e in events) <= 1


def test_every_split_of_a_sample():
    """Exhaustive two-cut splits of one mixed answer."""
    text = ('Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\\u00e9s", "days": "2"}}\n'
            '</tool_call>\nThought: x\nAction: search\nAction Input: {"query": "q"}\nObservation: no')
    ref = whole(text)
    for a in range(len(text) + 1):
        for b in range(a, len(text) + 1, 7):
            events = run_stream(text, [a, b])
            check_contract(events)
            assert fold(events) == ref, (a, b)


def no_history(events):
    content = "".join(e.text for e in events if type(e) is Content)
    for marker in ENDS:
        assert marker not in content, marker


history_noise = st.lists(st.one_of(st.sampled_from(HISTORY), st.sampled_from(FRAGMENTS), st.text(max_size=4)),
                         max_size=40).map("".join)


@SETTINGS
@given(text=history_noise, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_history_markup_never_reaches_content(text, cuts):
    events = run_stream(text, cuts)
    check_contract(events)
    no_history(events)
    assert fold(events) == whole(text)


@SETTINGS
@given(pre=prose, dialect=st.sampled_from(sorted(DIALECTS)), calls=st.lists(one_call, min_size=1, max_size=2),
       marker=st.sampled_from(HISTORY[:len(ENDS) + 3]), rest=noise, first=st.booleans(),
       cuts=st.lists(st.integers(0, 600), max_size=20))
def test_history_markup_ends_the_answer(pre, dialect, calls, marker, rest, first, cuts):
    """History markup ends the answer: before the calls, none of them counts; after them, nothing more does."""
    body = DIALECTS[dialect].format_calls(calls)
    if first:  # a turn or a result before any call: only symbolic markup counts there
        assume(marker in ENDS)
        text = pre + marker + rest + "\n" + body
    else:
        text = pre + ("\n" if pre else "") + body + "\n" + marker + rest
    events = run_stream(text, cuts)
    check_contract(events)
    no_history(events)
    content, got = fold(events)
    assert (content, got) == whole(text)
    if first:
        assert got == [] and content == (pre.rstrip(" \t\r\n") or None)
    else:
        assert [(n, json.loads(a)) for n, a, _ in got] == calls
        assert content == expected_content(pre, "")


@SETTINGS
@given(marker=st.sampled_from(ENDS), cut=st.integers(0, 30), dialect=st.sampled_from(sorted(DIALECTS)), call=one_call,
       cuts=st.lists(st.integers(0, 300), max_size=10))
def test_cut_off_history_markup(marker, cut, dialect, call, cuts):
    """A prefix of history markup at the end of the text is content (it never became the marker), unless it
    is a call start's too (`<t` of `<tool_response>` and `<tool_call>`): a start cut off is no content."""
    prefix = marker[:cut % len(marker)]
    text = DIALECTS[dialect].format_calls([call]) + "\nok " + prefix
    events = run_stream(text, cuts, end_after_calls=False)
    check_contract(events)
    assert fold(events) == whole(text, end_after_calls=False)
    starts = [d.open for d in DIALECTS.values() if d.open]  # a whole code fence is no call's start alone
    a_start = len(prefix) >= 2 and not prefix.startswith("```") and any(s.startswith(prefix) and s != prefix
                                                                        for s in starts)
    assert fold(events)[0] == ("ok " + ("" if a_start else prefix)).rstrip()
    events = run_stream(text, cuts)  # after a call nothing is content
    assert fold(events) == whole(text) and fold(events)[0] is None


def test_every_split_of_a_history_sample():
    """Exhaustive two-cut splits of an answer with markup pieces, markup in arguments, and markup formed across a call."""
    text = ('Sure [IN x <|im_st </s\n<tool_call>{"name": "search", "arguments": {"query": "<|im_end|>"}}</tool_call>'
            '</tool_call> a <|{"name": "get_weather", "arguments": {"city": "P"}}im_end|> b </tool_response> c')
    # "</s" may begin history markup: held until the call decides it (after the call, nothing can complete it)
    for end_after_calls, content in ((True, "Sure [IN x <|im_st </s"), (False, "Sure [IN x <|im_st </s a ")):
        ref = whole(text, end_after_calls=end_after_calls)
        assert ref[0] == content and len(ref[1]) == 2
        for a in range(len(text) + 1):
            for b in range(a, len(text) + 1, 5):
                events = run_stream(text, [a, b], end_after_calls=end_after_calls)
                check_contract(events)
                no_history(events)
                assert fold(events) == ref, (a, b)
