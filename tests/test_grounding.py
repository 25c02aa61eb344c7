"""Whether a call's argument values come from the conversation (toolbridge.steer.grounding), and where
the plan checks them."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from toolbridge.events import ToolCall
from toolbridge.steer.grounding import conversation_marks, invented, marks
from toolbridge.options import resolve
from toolbridge.request import prepare

REQUIRED = ["receiver", "amount", "method", "province_id", "note", "currency"]
PAY = {"type": "object", "required": REQUIRED, "properties": {
    "receiver": {"type": "string", "description": "Who gets the money."},
    "amount": {"type": "number"},
    "method": {"type": "string", "enum": ["app balance", "debit card"], "default": "app balance"},
    "province_id": {"type": "integer", "description": "1 for Bangkok, 2 for Chiang Mai."},
    "note": {"type": "object"},
    "currency": {"type": "string"},
    "count": {"type": "integer"}}}
TOOLS = [{"type": "function", "function": {"name": "pay", "description": "Send money.", "parameters": PAY}}]


def user(text):
    return [{"role": "user", "content": text}]


def test_marks_are_words_and_numbers():
    assert {"playstation"[:5], "play", "stati"} <= marks("PlayStation")  # camelCase split and not
    assert marks("two slices at 09:05") >= {"2", "9", "5", "slice"}
    assert marks("北京") == frozenset()
    assert {"300000", "1000000", "5532", "1"} <= marks("$300,000 and 1,000,000 or $5,532.01")
    assert "300000" not in marks("300, 000") and {"12", "3456"} <= marks("12,3456")


@pytest.mark.parametrize("arguments, expected", [
    ({"receiver": "user@example.com", "amount": 1000}, ("receiver", "amount")),  # "Transfer some funds"
    ({"receiver": "Anna", "amount": 25}, ()),
    ({"receiver": "anna", "amount": 25.0}, ()),
    ({"receiver": "Anna Smith", "amount": 25}, ()),  # one word of the value is enough
    ({"receiver": "Anna", "amount": 2}, ("amount",)),
    ({"receiver": "Anna", "amount": 25, "method": "debit card"}, ()),  # an enum value: the tool's own
    ({"receiver": "Anna", "amount": 25, "method": "app balance"}, ()),
    ({"receiver": "Anna", "amount": 25, "province_id": 1}, ()),  # a number its description holds
    ({"receiver": "Anna", "amount": 25, "province_id": 7}, ("province_id",)),
    ({"receiver": "Anna", "amount": 25, "note": {"text": "rent for March"}}, ("note",)),  # at any depth
    ({"receiver": "Анна", "amount": 25}, ()),  # no Latin word, no digit: not judged
    ({"receiver": "", "amount": 25, "flag": True}, ()),  # booleans and empty strings: nothing to judge
    ({"receiver": "Anna", "amount": 25, "currency": "USD"}, ()),  # a code: derived from names, not copied
    ({"receiver": "Anna", "amount": 25, "currency": "US Dollar"}, ()),
    ({"receiver": "Anna", "amount": 25, "currency": "Swiss francs"}, ("currency",)),
    ({"receiver": "Anna", "amount": 25, "count": 5}, ()),  # optional: not judged
])
def test_a_value_with_words_or_numbers_none_of_them_said_is_invented(arguments, expected):
    assert invented(arguments, PAY, conversation_marks(user("Send 25 dollars to Anna, please."))) == expected


SEATS = {"type": "object", "required": ["seats"], "properties": {"seats": {"type": "integer"}}}


@pytest.mark.parametrize("spec", [
    {"description": "The number of seats. Must be an integer between 1 and 4."},  # BFCL live_irrelevance_699-228-0
    {"description": "Seats, from 1 to 4."},
    {"description": "Seats (1-4)."},
    {"description": "Seats, up to 4."},
    {"minimum": 1, "maximum": 4},
])
def test_a_schemas_bounds_do_not_ground_a_number(spec):
    schema = {**SEATS, "properties": {"seats": {"type": "integer", **spec}}}
    said = conversation_marks(user("Can you order me a luxurious cab to 1270 Linford Lane?"))
    assert invented({"seats": 4}, schema, said) == ("seats",)
    assert invented({"seats": 2}, schema, conversation_marks(user("A cab for two, please."))) == ()


FORECAST = {"type": "object", "required": ["location", "start_date"], "properties": {
    "location": {"type": "string", "description": "In the format of 'City, Country' (e.g., 'London, UK')."},
    "start_date": {"type": "string", "description": "The start date in the ISO 8601 format (e.g., '2023-04-01')."}}}


@pytest.mark.parametrize("question, arguments, expected", [
    # BFCL live_irrelevance_478-135-0: the example's day is the question's, its year is the tool's
    ("The forecast for Paris, France from April 1st?", {"location": "Paris, France", "start_date": "2023-04-01"},
     ("start_date",)),
    ("The forecast for Paris, France from April 1st 2023?", {"location": "Paris, France", "start_date": "2023-04-01"},
     ()),
    ("The forecast for London from April 1st 2023?", {"location": "London, UK", "start_date": "2023-04-01"}, ()),
    ("The forecast for Paris from April 2nd?", {"location": "Paris, FR", "start_date": "2023-04-02"}, ()),
])
def test_an_example_copied_from_the_description_is_grounded_only_by_all_its_numbers(question, arguments, expected):
    assert invented(arguments, FORECAST, conversation_marks(user(question))) == expected


def test_a_months_name_grounds_its_number():
    assert {"4", "15", "2023"} <= marks("the 15th of April 2023")
    said = conversation_marks(user("Paris, departing on the 15th of April 2023."))
    assert invented({"location": "Paris, France", "start_date": "2023-04-15"}, FORECAST, said) == ()


def test_every_turn_grounds_values_tool_results_and_past_calls_included():
    messages = [*user("Who do I owe money?"),
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "debts", "arguments": '{"year": 2024}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": '[{"name": "Bob Jones", "owed": 40}]'},
                {"role": "user", "content": [{"type": "text", "text": "Pay the first one."}]}]
    seen = conversation_marks(messages)
    assert invented({"receiver": "Bob", "amount": 40}, PAY, seen) == ()
    assert invented({"receiver": "Bob", "amount": 2024}, PAY, seen) == ()
    assert invented({"receiver": "Alice", "amount": 40}, PAY, seen) == ("receiver",)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name"]),
                                         st.none() | st.integers() | st.text() | st.lists(st.dictionaries(
                                             st.sampled_from(["type", "text", "function"]),
                                             st.text() | st.dictionaries(st.text(), st.text()))))))
def test_reading_a_conversation_never_raises(messages):
    assert isinstance(conversation_marks(messages), frozenset)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(arguments=json_values, parameters=json_values, said=st.text())
def test_the_check_never_raises_on_any_json(arguments, parameters, said):
    assert isinstance(invented(arguments, parameters, conversation_marks(user(said))), tuple)


def call(arguments: dict) -> ToolCall:
    return ToolCall("call_1", "pay", json.dumps(arguments))


def test_the_plan_checks_an_auto_answers_values_where_the_word_checks_say():
    made_up = call({"receiver": "user@example.com", "amount": 1000})
    on = {"tb_word_checks": "grounded"}
    req = prepare(tools=TOOLS, messages=user("Transfer some funds for me."), template_kwargs=on, env={})
    assert req.grounded and req.invented(made_up) == ("receiver", "amount")
    assert req.invented(ToolCall("call_1", "pay", "not json")) == ()
    assert req.invented(ToolCall("call_1", "other", "{}")) == ()
    for forced in ("required", {"type": "function", "function": {"name": "pay"}}):  # a call was asked for
        assert not prepare(tools=TOOLS, tool_choice=forced, messages=user("x"), template_kwargs=on, env={}).grounded
    off = prepare(tools=TOOLS, messages=user("x"), tool_trained=True, template_kwargs={"tb_word_checks": False}, env={})
    assert not off.grounded and off.invented(made_up) == ()
    assert not prepare(tools=TOOLS, messages=user("x"), env={"TOOLBRIDGE_WORD_CHECKS": "unrelated,asked"}).grounded
    assert prepare(tools=TOOLS, messages=user("x"), env={"TOOLBRIDGE_WORD_CHECKS": "true"}).grounded
    for tool_trained in (False, True):
        checks = resolve({}, {}, tool_trained).policy.word_checks
        assert prepare(tools=TOOLS, messages=user("x"), tool_trained=tool_trained, env={}).grounded is (
            "grounded" in checks)


@pytest.mark.parametrize("value, expected", [(True, True), ("on", True), (1, True), ("0", False), ("false", False),
                                             ("grounded", True), (["unrelated"], False), ("asked, grounded", True)])
def test_the_option_reads_true_false_and_names(value, expected):
    assert resolve({"tb_word_checks": value}, {}).policy.word_checks.__contains__("grounded") is expected


def test_a_bad_option_value_is_a_bad_request():
    from toolbridge.errors import BadRequest
    with pytest.raises(BadRequest, match="tb_word_checks must be true, false or some of"):
        prepare(tools=TOOLS, messages=user("x"), template_kwargs={"tb_word_checks": "maybe"}, env={})
    with pytest.raises(BadRequest, match="tb_grounded is no longer an option; tb_word_checks"):
        prepare(tools=TOOLS, messages=user("x"), template_kwargs={"tb_grounded": False}, env={})
