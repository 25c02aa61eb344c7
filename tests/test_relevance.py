"""Whether a question's words meet any tool's, and the bias against a call where they meet none."""
import pytest
from hypothesis import given, settings, strategies as st

from toolbridge.options import resolve
from toolbridge.steer.policy import AGAIN, ENOUGH, UNRELATED
from toolbridge.steer.relevance import asked_for, own_words, tool_words, unrelated, user_words, words
from toolbridge.request import check, prepare
from toolbridge.tools import normalize_tools

from test_options import default

WEATHER = {"type": "function", "function": {
    "name": "get_current_weather", "description": "The weather now in a place.",
    "parameters": {"type": "object", "required": ["location"], "properties": {
        "location": {"type": "string", "description": "City and state, e.g. 'Austin, TX'."},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "extra": {"type": "object", "properties": {"humidityThreshold": {"type": "number"}}}}}}}
SEARCH = {"type": "function", "function": {"name": "HNA_NEWS.search", "description": "Finds articles by keyword."}}


def user(text):
    return [{"role": "user", "content": text}]


def test_words_are_latin_content_words_cut_to_five_letters():
    assert words("getCurrentWeather for the MOVIES") == {"curre", "weath", "movie"}  # get, for, the: function words
    assert words("a to 42 _ 北京的天气") == frozenset()
    assert words("multiplication") == words("multiply")


def test_a_verb_that_asks_without_saying_what_relates_nothing():
    """BFCL live_irrelevance_36-2-24: the question and the weather tool share only "retrieve"."""
    weather = normalize_tools([{"type": "function", "function": {
        "name": "get_current_weather", "description": "Retrieves the current weather conditions for a specified city.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}])[0]
    said = words("I'm looking to retrieve the IDs of files that communicate with domain 'example.net'.")
    assert unrelated(said, [tool_words(weather)])
    assert not unrelated(words("Retrieve the weather in Paris"), [tool_words(weather)])


def test_a_tools_words_come_from_its_name_description_arguments_and_enums_at_any_depth():
    got = tool_words(normalize_tools([WEATHER])[0])
    assert {"weath", "curre", "place", "locat", "austi", "celsi", "fahre", "extra", "humid", "thres"} <= got
    assert {"news", "searc", "artic", "keywo"} <= tool_words(normalize_tools([SEARCH])[0])


@pytest.mark.parametrize("messages, expected", [
    (user("What is the capital of France?"), True),
    (user("How warm is it in Paris, in celsius?"), False),  # an enum value
    (user("Is it raining? What's the weather like"), False),
    (user("北京今天天气怎么样？"), False),  # no Latin words: never called unrelated
    (user("42"), False),
    ([{"role": "user", "content": [{"type": "text", "text": "Tell me a joke about cats"}]}], True),
    ([{"role": "system", "content": "You report the weather."}, *user("Tell me a joke")], True),  # only user turns
    ([*user("weather in Rome?"), {"role": "assistant", "content": "Sunny."}, *user("and a joke?")], False),
    ([], False),
])
def test_unrelated_reads_every_user_turn(messages, expected):
    assert unrelated(user_words(messages)[0], [tool_words(t) for t in normalize_tools([WEATHER, SEARCH])]) is expected


def test_a_verb_a_tool_is_named_for_counts():
    """`find`, `get`: "Find sushi places in Seattle." shares nothing else with find_restaurants."""
    restaurants = {"type": "function", "function": {"name": "find_restaurants", "description": "Restaurants in a city."}}
    said, _ = user_words(user("Find sushi places in Seattle."))
    assert not unrelated(said, [tool_words(t) for t in normalize_tools([restaurants])])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["role", "content", "type", "text"]),
                    st.one_of(st.text(), st.none(), st.integers(), st.lists(st.dictionaries(st.text(), st.text())))),
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system"]),
                           "content": st.one_of(st.text(), st.none(), st.lists(st.dictionaries(st.text(), st.text())))}),
    st.text(), st.none())))
def test_the_users_words_never_raise_on_any_history(messages):
    said, latest = user_words(messages)
    assert latest <= said and unrelated(said, [frozenset({"weath"})]) in (True, False)
    assert asked_for(latest, ["a", "b"], [frozenset({"flip"}), frozenset()]) <= {"a", "b"}


def test_a_question_no_tool_speaks_of_gets_the_unrelated_bias_on_its_call_starts():
    tools, joke = [WEATHER, SEARCH], user("Tell me a joke about cats")
    assert check(tools=tools, messages=joke).unrelated and not check(tools=tools, messages=user("weather?")).unrelated
    on = {"tb_word_checks": "unrelated"}
    start = default("tb_call_bias", True)
    assert prepare(tools=tools, messages=joke, template_kwargs=on, tool_trained=True, env={}).decisions.start_bias == start + UNRELATED
    assert prepare(tools=tools, messages=user("weather in Rome?"), template_kwargs=on, tool_trained=True,
                   env={}).decisions.start_bias == start
    for off in ({"tb_word_checks": False}, {"tb_word_checks": "asked,grounded"}):
        assert prepare(tools=tools, messages=joke, template_kwargs=off, tool_trained=True, env={}).decisions.start_bias == start
    assert "unrelated" in resolve({}, env={"TOOLBRIDGE_WORD_CHECKS": "unrelated"}).policy.word_checks
    after_result = [*joke, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "get_current_weather", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert prepare(tools=tools, messages=after_result, template_kwargs=on, tool_trained=True,
                   env={}).decisions.start_bias == default("tb_result_bias", True)


FLIP = {"type": "function", "function": {"name": "flipImageAction", "description": "Flips the image.",
                                         "parameters": {"type": "object", "properties": {
                                             "flip_direction": {"type": "string", "enum": ["horizontal", "vertical"]}}}}}
ROTATE = {"type": "function", "function": {"name": "rotateImageAction", "description": "Rotates the image.",
                                           "parameters": {"type": "object", "properties": {
                                               "degrees": {"type": "integer", "description": "Clockwise."}}}}}


def test_a_tools_own_words_are_the_ones_no_other_tool_has():
    flip, rotate = (tool_words(t) for t in normalize_tools([FLIP, ROTATE]))
    own_flip, own_rotate = own_words([flip, rotate])
    assert "image" in flip & rotate and "image" not in own_flip | own_rotate
    assert own_flip == flip - rotate and {"flip", "horiz"} <= own_flip and {"rotat", "degre"} <= own_rotate
    assert own_words([flip]) == (flip,) and own_words([]) == ()


@pytest.mark.parametrize("text, expected", [
    ("turn it by 20 degrees and flip it horizontally", {"flipImageAction", "rotateImageAction"}),
    ("flip it horizontally", {"flipImageAction"}),
    ("rotate the image", {"rotateImageAction"}),
    ("make the image nicer", set()),  # a word both tools have asks for neither
])
def test_a_tool_is_asked_for_where_the_user_used_its_own_words(text, expected):
    tools = normalize_tools([FLIP, ROTATE])
    own = own_words([tool_words(t) for t in tools])
    assert asked_for(user_words(user(text))[1], [t.name for t in tools], own) == expected


def test_only_the_turns_the_answer_is_to_name_tools():
    tools = normalize_tools([FLIP, ROTATE])
    own = own_words([tool_words(t) for t in tools])
    history = [*user("rotate it by 90 degrees"), {"role": "assistant", "content": "Done."},
               {"role": "system", "content": "Be brief."}, *user("now flip it")]
    said, latest = user_words(history)
    assert latest == words("now flip it") and said == words("rotate it by 90 degrees now flip it")
    assert asked_for(latest, [t.name for t in tools], own) == {"flipImageAction"}
    assert asked_for(user_words(history[:1])[1], [t.name for t in tools], own) == {"rotateImageAction"}


def test_a_single_tool_is_never_asked_for_by_name():
    (tool,) = normalize_tools([FLIP])
    said, latest = user_words(user("flip it, then flip it again"))
    assert asked_for(latest, [tool.name], own_words([tool_words(tool)])) == frozenset()


def test_the_plan_reads_the_tools_asked_for_only_where_the_steering_counts_calls():
    tools, both = [FLIP, ROTATE], user("turn it by 20 degrees and flip it horizontally")
    on = {"tb_word_checks": "asked"}
    assert AGAIN > 0 > ENOUGH
    req = prepare(tools=tools, messages=both, template_kwargs=on, tool_trained=True, env={})
    assert req.decisions.asked == {"flipImageAction", "rotateImageAction"} and req.decisions.next_bias == default("tb_next_bias", True)
    assert (req.decisions.again, req.decisions.enough) == (AGAIN, ENOUGH)
    assert prepare(tools=tools, messages=user("make the image nicer"), template_kwargs=on, tool_trained=True,
                   env={}).decisions.asked == set()
    assert prepare(tools=tools, messages=both, template_kwargs=on, tool_trained=True, env={},
                   parallel_tool_calls=False).decisions.asked == set()
    assert prepare(tools=tools, messages=both, template_kwargs=on, tool_trained=True, env={},
                   tool_choice="required").decisions.asked == set()
    assert prepare(tools=tools, messages=both, template_kwargs={"tb_word_checks": False}, tool_trained=True,
                   env={}).decisions.asked == set()
    assert prepare(tools=tools, messages=both, env={"TOOLBRIDGE_WORD_CHECKS": "asked"}).decisions.asked
    after_result = [*both, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "flipImageAction", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert prepare(tools=tools, messages=after_result, template_kwargs=on, tool_trained=True, env={}).decisions.asked == set()
