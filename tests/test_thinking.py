"""A leading thinking block split from the answer (toolbridge.parsing.thinking): thinking is never
content, a call inside it is not a call, and a stream equals the whole text for every split."""
import json

from hypothesis import given, settings, strategies as st

from toolbridge.dialects import DIALECTS
from toolbridge.deltas import delta, message
from toolbridge.events import CallEnd, Content, Reasoning
from toolbridge.parsing.answer import collect
from toolbridge.parsing.stream import StreamParser
from toolbridge.parsing.thinking import PlainText, ThinkingSplit
from toolbridge.thinking import DEFAULT_THINKING, get_thinking

from test_apis import chunks, split as cut
from test_stream_props import SETTINGS, check_contract, noise, one_call, split
from toolsets import TOOLS, ids

OPEN, CLOSE = DEFAULT_THINKING.open, DEFAULT_THINKING.close
PIECES = [OPEN, CLOSE, "<think", "</thi", "<", "</", "\n", " ", "I should call get_weather.", "<tool_call>",
          '{"name": "get_weather", "arguments": {"city": "Paris"}}', "</tool_call>", "Sunny.", "think>"]
text_with_thinking = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=30).map("".join)


def run(text, cuts, opened=False, plain=False):
    answer = PlainText() if plain else StreamParser(TOOLS, id_factory=ids())
    p = ThinkingSplit(answer, opened=opened)
    events = []
    for d in split(text, cuts):
        events += p.feed(d)
    return events + p.finish()


def folded(events):
    r = collect(events)
    return r.reasoning, r.content, [(c.name, c.arguments) for c in r.calls]


@SETTINGS
@given(text=st.one_of(noise, text_with_thinking), cuts=st.lists(st.integers(0, 400), max_size=12),
       opened=st.booleans(), plain=st.booleans())
def test_never_raises_and_every_split_agrees(text, cuts, opened, plain):
    events = run(text, cuts, opened, plain)
    assert folded(events) == folded(run(text, [], opened, plain))
    check_contract([e for e in events if type(e) is not Reasoning])
    assert all(e.text for e in events if type(e) is Reasoning)


@SETTINGS
@given(thought=st.text(max_size=40).filter(lambda t: CLOSE not in t), dialect=st.sampled_from(sorted(DIALECTS)),
       call=one_call, opened=st.booleans(), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_thinking_then_a_call(thought, dialect, call, opened, cuts):
    """The thinking is the reasoning, whole; the call after it is the answer's; no marker or thinking
    reaches content."""
    written = DIALECTS[dialect].format_calls([call])
    text = ("" if opened else OPEN) + thought + CLOSE + "\n\n" + written
    reasoning, content, calls = folded(run(text, cuts, opened))
    assert (reasoning, content, calls) == (thought or None, None, [(call[0], json.dumps(call[1], ensure_ascii=False))])


@given(dialect=st.sampled_from(sorted(DIALECTS)), call=one_call, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_a_call_inside_thinking_is_not_a_call(dialect, call, cuts):
    """Written inside the thinking, finished or not, a call is thinking: it stays in the reasoning."""
    written = DIALECTS[dialect].format_calls([call])
    for text in (OPEN + "Maybe " + written + CLOSE + "It is sunny.", OPEN + "Maybe " + written):
        reasoning, content, calls = folded(run(text, cuts))
        assert calls == [] and written in reasoning
        assert content == ("It is sunny." if text.endswith("sunny.") else None)


@SETTINGS
@given(text=noise, cuts=st.lists(st.integers(0, 400), max_size=12))
def test_an_answer_that_does_not_open_with_the_marker_is_parsed_as_before(text, cuts):
    if text.lstrip().startswith(OPEN):
        return
    alone = StreamParser(TOOLS, id_factory=ids())
    assert folded(run(text, cuts)) == folded(alone.feed(text) + alone.finish())


def test_whitespace_around_the_block_is_neither_thinking_nor_answer():
    assert folded(run("  \n" + OPEN + "x" + CLOSE + " \n Hi", [])) == ("x", "Hi", [])


def test_a_thinking_marker_inside_the_answer_is_markup_not_content():
    """A block that does not open the answer is not thinking, and its markers are not shown (measured:
    SmolLM2 writes `get_<think>()` or a second `</think>` in its answer after the thinking)."""
    assert folded(run("Hello " + OPEN + "not thinking" + CLOSE, [])) == (None, "Hello not thinking", [])
    assert folded(run(OPEN + "x" + CLOSE + "from django.</" + CLOSE + "\ndef get_" + OPEN + "()", [])) == (
        "x", "from django.</\ndef get_()", [])


def test_an_unclosed_block_is_thinking_to_its_end():
    assert folded(run(OPEN + "still thinking </thi", [])) == ("still thinking </thi", None, [])
    assert folded(run("still thinking", [], opened=True)) == ("still thinking", None, [])


def test_reasoning_goes_in_the_engines_field_beside_the_content():
    assert delta([Reasoning("a"), Reasoning("b"), Content("c")]) == {"reasoning_content": "ab", "content": "c"}
    assert delta([Reasoning("a")], reasoning_field="reasoning") == {"reasoning": "a"}
    assert message("Hi", [], "thought") == {"role": "assistant", "content": "Hi", "reasoning_content": "thought"}
    assert "reasoning_content" not in message("Hi", [])


def test_the_default_format_is_looked_up_by_name():
    assert get_thinking(None) is DEFAULT_THINKING is get_thinking("think")


def test_calls_after_thinking_end_the_answer_as_before():
    events = run(OPEN + "x" + CLOSE + '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
                 + "The weather is sunny.", [])
    assert [type(e) for e in events if type(e) is CallEnd] == [CallEnd]
    assert folded(events)[1] is None


# -- the agent APIs return the thinking apart, before the calls ----------------------------------------

THOUGHT = "The user wants the weather; I should call get_weather."
THINKING_COMPLETION = {"model": "m", "usage": {"prompt_tokens": 5, "completion_tokens": 9}, "choices": [{
    "finish_reason": "tool_calls", "message": {"role": "assistant", "content": None, "reasoning_content": THOUGHT,
                                               "tool_calls": [{"id": "call_a", "type": "function", "function": {
                                                   "name": "get_weather", "arguments": '{"city": "Paris"}'}}]}}]}


def thinking_chunks(cuts):
    return [{"choices": [{"delta": {"reasoning_content": p}}]} for p in cut(THOUGHT, cuts)] + \
        chunks(THINKING_COMPLETION, cuts)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=6))
def test_responses_reasoning_item_comes_before_the_calls(cuts):
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    from toolbridge.apis import responses, responses_stream

    whole = responses.response(THINKING_COMPLETION, {"model": "m"})
    parsed = Response.model_validate(whole)  # the official client's own type
    assert [i.type for i in parsed.output] == ["reasoning", "function_call"]
    assert parsed.output[0].content[0].text == THOUGHT
    stream = responses_stream.ResponseStream({"model": "m"})
    events = [e for c in thinking_chunks(cuts) for e in stream.feed(c)] + stream.finish_events()
    for e in events:
        TypeAdapter(ResponseStreamEvent).validate_python(e)
    said = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert said == THOUGHT and [i["type"] for i in events[-1]["response"]["output"]] == ["reasoning", "function_call"]
    assert events[-1]["response"]["output"][0]["content"] == whole["output"][0]["content"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 60), max_size=6))
def test_messages_thinking_block_comes_before_the_tool_use(cuts):
    from anthropic.types import Message, RawMessageStreamEvent
    from pydantic import TypeAdapter

    from toolbridge.apis import anthropic

    whole = anthropic.message(THINKING_COMPLETION, {"model": "m"})
    parsed = Message.model_validate(whole)
    assert [b.type for b in parsed.content] == ["thinking", "tool_use"] and parsed.content[0].thinking == THOUGHT
    stream = anthropic.MessageStream({"model": "m"})
    events = [e for c in thinking_chunks(cuts) for e in stream.feed(c)] + stream.finish_events()
    for e in events:
        TypeAdapter(RawMessageStreamEvent).validate_python(e)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    said = "".join(e["delta"]["thinking"] for e in events if e["type"] == "content_block_delta"
                   and e["delta"]["type"] == "thinking_delta")
    assert starts == ["thinking", "tool_use"] and said == THOUGHT


def test_the_readers_carry_a_thinking_budget_into_the_chat_request():
    import pytest

    from toolbridge import BadRequest
    from toolbridge.apis import anthropic, responses
    from toolbridge.thinking import EFFORT_BUDGETS, effort_budget

    base = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    chat = anthropic.chat_request({**base, "thinking": {"type": "enabled", "budget_tokens": 64}})
    assert chat["chat_template_kwargs"] == {"tb_thinking_budget": 64}
    assert "chat_template_kwargs" not in anthropic.chat_request({**base, "thinking": {"type": "disabled"}})
    for bad in ({"type": "enabled"}, {"type": "enabled", "budget_tokens": 0}, {"type": "sometimes"}, "on"):
        with pytest.raises(BadRequest):
            anthropic.chat_request({**base, "thinking": bad})
    assert responses.chat_request({"input": "hi", "reasoning": {"effort": "low"}})["reasoning_effort"] == "low"
    with pytest.raises(BadRequest):
        responses.chat_request({"input": "hi", "reasoning": {"effort": "enormous"}})
    assert [effort_budget(e) for e in EFFORT_BUDGETS] == sorted(EFFORT_BUDGETS.values()) and effort_budget(None) is None
