"""An answer ends after its calls (toolbridge.steer.ending): after a complete call the next tokens are held
to what leads to another call or to the end, in every dialect the guard reads, whatever the model
would rather write."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolbridge.steer.args import ARG, from_args, to_args
from toolbridge.steer.callguard import CallGuard
from toolbridge.dialects import DIALECTS
from toolbridge.steer.ending import ARMED, END, GAP, MAX_GAP, PART, Ending, Follow
from toolbridge.steer.logits import Gated, token_changes
from toolbridge.request import prepare

from toolsets import TOOLS

# A small vocabulary: prose, whitespace, markup pieces, JSON pieces; id 0 is the end of the turn.
TEXTS = ["<END>", "The", " weather", " is", " 22", "°C", ".", "\n", "\n\n", " ", "<", "tool", "_call", ">", "</",
         "<tool_call>", "</tool_call>", '{"', "name", '":', ' "', '"', "get", "_weather", "search", ",", "]", "}",
         "```", "TOOL", "_CALL", ":", "Result", " of", "Observation", '{"name": "', "arguments", "{", "Paris", '",',
         ">\n\n"]
END_ID = 0


def ending_of(follow: Follow) -> Ending:
    order = sorted(range(len(TEXTS)), key=TEXTS.__getitem__)
    return Ending.build(follow, TEXTS, ([TEXTS[t] for t in order], order))


def request(dialect="tags", parallel=True, **kw):
    return prepare(tools=TOOLS, messages=[{"role": "user", "content": "weather in Paris?"}],
                   parallel_tool_calls=parallel, template_kwargs={"tb_dialect": dialect, **kw}, env={})


def call_text(dialect: str, name="get_weather", args='{"city": "Paris"}') -> str:
    return DIALECTS[dialect].format_calls([(name, args)])


def test_the_follow_of_a_request():
    f = request().follow
    assert f.closes == ("</tool_call>", "```")
    assert f.triggers[0] == "<tool_call>" and '{"name": "get_weather"' in f.triggers
    assert request(parallel=False).follow.triggers == ()  # after one call, only the end
    assert request(tb_end_after_calls=False).follow is None
    # parallel calls off: no second call is generated, also where text after calls is let through
    assert request(parallel=False, tb_end_after_calls=False).follow.triggers == ()
    assert prepare(tools=TOOLS, messages=[], tool_choice="required", env={}).follow is None  # its grammar ends it
    assert request().call_guard().follow == request().follow


@pytest.mark.parametrize("tail, kind", [
    ("", GAP), ("\n", GAP), ("\n</tool_call>", GAP), ("}\n</tool_call>\n\n", GAP), (", ", GAP), ("</tool", PART),
    ("\n<tool", PART), ("\n<tool_call>", ARMED), ('\n{"name": "get', PART), ('{"name": "get_weather"', ARMED),
    ('{"name": "nope', END), ("\nThe weather", END), ("\n" * (MAX_GAP + 1), END), ("<tool_call>\n{", ARMED),
])
def test_what_the_text_after_a_call_may_become(tail, kind):
    assert request().follow.state(tail)[0] == kind


def test_without_parallel_calls_only_closing_markup_and_the_end_follow():
    f = request(parallel=False).follow
    assert f.state("\n</tool_call>")[0] == GAP
    assert f.state("\n<tool")[0] == END


def test_the_hold_after_a_call():
    ending = ending_of(request().follow)
    allowed = set(ending.allowed("\n</tool_call>"))
    assert {TEXTS.index(t) for t in ("\n", "\n\n", " ", "<tool_call>", "<", '{"')} <= allowed
    assert not {TEXTS.index(t) for t in ("The", " weather", "Result", "Observation", "Paris")} & allowed
    after_lt = set(ending.allowed("\n<"))
    assert TEXTS.index("tool") in after_lt and not {TEXTS.index(t) for t in ("\n", "The", "<")} & after_lt
    assert ending.allowed("\n<tool_call>") is None  # the call's constraint speaks
    # tokens that finish a trigger or a closing markup and run past its end: `",` after a bare
    # call's name (the grammar takes the call from the name's quote on), `>` and newlines
    assert TEXTS.index('",') in ending.allowed('\n{"name": "search') and TEXTS.index('",') not in allowed
    assert TEXTS.index(">\n\n") in ending.allowed("\n</tool_call")
    assert ending.allowed("\nThe") == ()  # only the end


@pytest.mark.parametrize("dialect", ["tags", "json", "toolcall"])
def test_the_guard_keeps_the_text_after_the_last_call(dialect):
    guard = request(dialect).call_guard()
    before, call = "Let me look. ", call_text(dialect)
    for piece in (before, *call):
        guard.feed(piece)
    assert guard.tail is not None and guard.follow.state(guard.tail)[0] == GAP
    second = call_text(dialect, "search", '{"query": "x"}')
    guard.feed("\n" + second[:len(guard.follow.triggers[0]) + 4])
    assert guard.tail is None  # armed: the second call is under its constraint
    guard.feed(second[len(guard.follow.triggers[0]) + 4:])
    assert guard.tail is not None and guard.calls == 2
    guard.feed("\nThe weather")
    assert guard.follow.state(guard.tail)[0] == END


def test_token_changes_hold_the_answer_after_a_call():
    req = request()
    guard, ending = req.call_guard(), ending_of(req.follow)
    changes, only = token_changes(None, [], guard, lambda: "", (), (), ending, (END_ID,))
    assert only is None  # no call yet
    guard.feed(call_text("tags"))
    _, only = token_changes(None, [], guard, lambda: "", (), (), ending, (END_ID,))
    assert END_ID in only and TEXTS.index("The") not in only and TEXTS.index("<tool_call>") in only
    assert isinstance(only, Gated) and only.otherwise == (END_ID,)  # a top choice outside it: only the end
    guard.feed("\nThe")
    assert token_changes(None, [], guard, lambda: "", (), (), ending, (END_ID,))[1] == (END_ID,)
    _, off = token_changes(None, [], request(tb_end_after_calls=False).call_guard(), lambda: "", (), (), None, (END_ID,))
    assert off is None


def test_the_guard_travels_with_its_follow():
    guard = request().call_guard()
    again = CallGuard.unpack(guard.pack())
    assert again.follow == guard.follow and from_args(to_args(None, guard))[1].follow == guard.follow
    assert from_args({ARG: {"guard": {"starts": [], "follow": [1]}}}) == (None, None)  # malformed: ignored


@settings(max_examples=300, deadline=None)
@given(dialect=st.sampled_from(["tags", "json", "toolcall"]), parallel=st.booleans(),
       ranks=st.lists(st.permutations(list(range(len(TEXTS)))), min_size=1, max_size=200))
def test_whatever_the_model_prefers_the_answer_ends_or_calls_again(dialect, parallel, ranks):
    """A model picking its most preferred token among those held to (any preferences, step by step):
    after its call it writes only separating text and call triggers, and within a bounded number of
    tokens it has ended or armed another call."""
    req = request(dialect, parallel)
    guard, ending = req.call_guard(), ending_of(req.follow)
    guard.feed(call_text(dialect))
    written = ""
    bound = MAX_GAP + max(map(len, req.follow.triggers), default=0) + 2
    for step, rank in enumerate(ranks):
        _, only = token_changes(None, [], guard, lambda: "", (), (), ending, (END_ID,))
        if only is None:  # another call armed
            assert parallel and req.follow.state(written)[0] == ARMED
            return
        assert END_ID in only
        if rank[0] not in only:  # the model's top choice leads nowhere but text: the end
            only = only.otherwise if isinstance(only, Gated) else only
        token = next(t for t in rank if t in only)
        if token == END_ID:
            return
        written += TEXTS[token]
        guard.feed(TEXTS[token])
        kind = req.follow.state(written)[0]
        assert kind != END or not written.replace("</tool_call>", "").replace("```", "").strip(" \n,]}"), written
        assert step < bound, written
