"""The agent APIs end to end, the same tests for every server (imported by the engine modules,
which provide the `server`, `api_model` and `api_foreign_bad` fixtures, and may override `api_routes`).

OpenAI Responses through the official `openai` client (`responses.create` / `responses.stream`,
`retrieve` / `delete`), Anthropic Messages through the official `anthropic` client (`messages.create` /
`messages.stream` / `count_tokens`), an agent loop with the OpenAI Agents SDK, and bad or generated
bodies on both endpoints (wrongly typed fields among them): never a 5xx, a 400 in the API's own error shape.
"""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import jsonschema
import pytest

from toolsets import SEARCH, WEATHER

# what an engine module's `from agent_apis import *` takes: the tests and their fixtures only, so the
# module's own names (TOOLS, valid, ...) stay its own
__all__ = ["api_root", "oai", "ant", "test_responses_tool_choice", "test_responses_result_turn", "test_responses_parallel",
           "test_messages_tool_choice", "test_messages_result_turn", "test_messages_parallel", "test_agents_sdk_loop",
           "test_bad_bodies", "test_fuzz", "api_routes", "test_messages_count_tokens",
           "test_messages_count_tokens_bad_bodies", "test_responses_retrieve_and_delete", "test_typed_fields",
           "test_fuzz_field_types", "test_messages_end_after_their_calls", "test_responses_end_after_their_calls",
           "test_chat_ends_after_its_calls", "test_chat_allowed_tools", "test_responses_allowed_tools",
           "test_strict_tools", "test_chat_response_format_beside_tools", "test_responses_format_beside_tools",
           "test_chat_custom_tools", "test_responses_custom_tools", "test_custom_tool_bad_grammars",
           "test_chat_custom_tool_turns"]

TOOLS = [WEATHER, SEARCH]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]
MESSAGES_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in TOOLS]
ASK = "What is the weather in Paris?"
# the model's own markup: none of it may reach a user in any text
MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_start|>", "<|im_end|>",
          "TOOL_CALL:", "Action Input:", "<start_of_turn>", "<end_of_turn>")
TIMEOUT = 60


def no_markup(text: str | None) -> None:
    assert not any(m in (text or "") for m in MARKUP), repr(text)


def valid(name: str, arguments: dict | str) -> None:
    assert name in SCHEMAS, name
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, SCHEMAS[name])


@pytest.fixture(scope="module")
def api_root(server):
    """The root URL of the engine module's own `server` fixture."""
    return f"http://127.0.0.1:{server.port}"


@pytest.fixture(scope="module")
def oai(api_root):
    import openai

    return openai.OpenAI(base_url=api_root + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def ant(api_root):
    import anthropic

    return anthropic.Anthropic(base_url=api_root, api_key="unused", max_retries=0, timeout=300)


# -- OpenAI Responses --------------------------------------------------------------------------------

RESPONSES_CHOICES = {"auto": "auto", "required": "required", "named": {"type": "function", "name": "search"},
                     "none": "none"}


def responses_kind(resp) -> tuple[str, ...]:
    """The answer's output item types, checked: calls of declared tools with schema-valid
    arguments, text without markup."""
    for item in resp.output:
        if item.type == "function_call":
            assert item.call_id and item.id, item
            valid(item.name, item.arguments)
        elif item.type == "message":
            for part in item.content:
                no_markup(part.text)
    return tuple(sorted({i.type for i in resp.output}))


def responses_stream(oai, **kw):
    """(event types, final response) through the client's own stream helper."""
    with oai.responses.stream(**kw) as stream:
        events = [e for e in stream]
        # cut off by max_output_tokens, OpenAI ends on response.incomplete, which the helper's
        # get_final_response does not take
        final = events[-1].response if events[-1].type == "response.incomplete" else stream.get_final_response()
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] in ("response.completed", "response.incomplete"), types
    args: dict[str, str] = {}
    for e in events:
        if e.type in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
            args[e.item_id] = args.get(e.item_id, "") + e.delta
        elif e.type == "response.output_item.done" and e.item.type == "function_call":
            assert args.get(e.item.id, "") == e.item.arguments, (args, e.item)
        elif e.type == "response.output_item.done" and e.item.type == "custom_tool_call":
            assert args.get(e.item.id, "") == e.item.input, (args, e.item)
    return types, final


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("choice", list(RESPONSES_CHOICES))
def test_responses_tool_choice(oai, api_model, choice, stream):
    kw = dict(model=api_model, input=ASK if choice != "named" else "Search the web for the Eiffel Tower height.",
              tools=RESPONSES_TOOLS, tool_choice=RESPONSES_CHOICES[choice], temperature=0, max_output_tokens=64)
    resp = responses_stream(oai, **kw)[1] if stream else oai.responses.create(**kw)
    kind = responses_kind(resp)
    calls = [i for i in resp.output if i.type == "function_call"]
    if choice in ("required", "named"):
        assert calls, resp.output
        assert kind == ("function_call",), kind
        if choice == "named":
            assert all(c.name == "search" for c in calls)
    elif choice == "none":
        assert kind == ("message",) and resp.output_text.strip(), resp.output
    else:
        assert kind in (("message",), ("function_call",), ("function_call", "message")), kind
    if stream:  # the same answer as create, in kind
        assert kind == responses_kind(oai.responses.create(**kw))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_result_turn(oai, api_model, stream):
    first = oai.responses.create(model=api_model, input=ASK, tools=RESPONSES_TOOLS, tool_choice="required",
                                 temperature=0, max_output_tokens=64)
    call = next(i for i in first.output if i.type == "function_call")
    kw = dict(model=api_model, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=64, input=[
        {"role": "user", "content": ASK},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 degrees Celsius."}])
    resp = responses_stream(oai, **kw)[1] if stream else oai.responses.create(**kw)
    assert responses_kind(resp) == ("message",), resp.output
    assert resp.output_text.strip()


def test_responses_parallel(oai, api_model):
    """Two calls in one turn, answered by two results: the answer is text; and with
    parallel_tool_calls false a forced answer holds one call."""
    resp = oai.responses.create(model=api_model, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=64, input=[
        {"role": "user", "content": "What is the weather in Paris and in Rome?"},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_b", "name": "get_weather", "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "call_a", "output": "Paris: sunny"},
        {"type": "function_call_output", "call_id": "call_b", "output": "Rome: rain"}])
    assert responses_kind(resp) == ("message",) and resp.output_text.strip(), resp.output
    one = oai.responses.create(model=api_model, input="What is the weather in Paris and in Rome?",
                               tools=RESPONSES_TOOLS, tool_choice="required", parallel_tool_calls=False,
                               temperature=0, max_output_tokens=96)
    assert responses_kind(one) == ("function_call",) and len(one.output) == 1, one.output


# -- Anthropic Messages ------------------------------------------------------------------------------

MESSAGES_CHOICES = {"auto": {"type": "auto"}, "any": {"type": "any"}, "tool": {"type": "tool", "name": "search"},
                    "none": {"type": "none"}}


def message_kind(msg) -> tuple[str, ...]:
    for block in msg.content:
        if block.type == "tool_use":
            assert block.id, block
            valid(block.name, block.input)
        elif block.type == "text":
            no_markup(block.text)
    kinds = tuple(sorted({b.type for b in msg.content}))
    assert (msg.stop_reason == "tool_use") == ("tool_use" in kinds) or msg.stop_reason == "max_tokens", \
        (msg.stop_reason, kinds)
    return kinds


def messages_stream(ant, **kw):
    with ant.messages.stream(**kw) as stream:
        types = [e.type for e in stream]
        final = stream.get_final_message()
    assert types[0] == "message_start" and types[-1] == "message_stop", types
    return types, final


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("choice", list(MESSAGES_CHOICES))
def test_messages_tool_choice(ant, api_model, choice, stream):
    ask = ASK if choice != "tool" else "Search the web for the Eiffel Tower height."
    kw = dict(model=api_model, max_tokens=64, messages=[{"role": "user", "content": ask}], tools=MESSAGES_TOOLS,
              tool_choice=MESSAGES_CHOICES[choice], extra_body={"temperature": 0})
    msg = messages_stream(ant, **kw)[1] if stream else ant.messages.create(**kw)
    kind = message_kind(msg)
    if choice in ("any", "tool"):
        assert kind == ("tool_use",) and msg.stop_reason == "tool_use", msg
        if choice == "tool":
            assert all(b.name == "search" for b in msg.content)
    elif choice == "none":
        assert kind == ("text",), msg
    if stream:
        assert kind == message_kind(ant.messages.create(**kw))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_result_turn(ant, api_model, stream):
    first = ant.messages.create(model=api_model, max_tokens=64, messages=[{"role": "user", "content": ASK}],
                                tools=MESSAGES_TOOLS, tool_choice={"type": "any"}, extra_body={"temperature": 0})
    use = next(b for b in first.content if b.type == "tool_use")
    kw = dict(model=api_model, max_tokens=64, tools=MESSAGES_TOOLS, extra_body={"temperature": 0}, messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "Sunny, 21 degrees Celsius."}]}])
    msg = messages_stream(ant, **kw)[1] if stream else ant.messages.create(**kw)
    assert message_kind(msg) == ("text",) and msg.content[0].text.strip(), msg
    assert msg.stop_reason in ("end_turn", "max_tokens")


def test_messages_parallel(ant, api_model):
    msg = ant.messages.create(model=api_model, max_tokens=64, tools=MESSAGES_TOOLS, extra_body={"temperature": 0},
                              messages=[
        {"role": "user", "content": "What is the weather in Paris and in Rome?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "Paris: sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_b", "content": "Rome: rain"}]}])
    assert message_kind(msg) == ("text",), msg
    one = ant.messages.create(model=api_model, max_tokens=96, tools=MESSAGES_TOOLS, extra_body={"temperature": 0},
                              messages=[{"role": "user", "content": "What is the weather in Paris and in Rome?"}],
                              tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert message_kind(one) == ("tool_use",) and len(one.content) == 1, one


# -- an agent loop: the OpenAI Agents SDK over /v1/responses -----------------------------------------

def test_agents_sdk_loop(api_root, api_model):
    """Runner.run with two function tools: the first turn must call (the SDK resets tool_choice
    to auto after a call), the tool runs, and the run ends with a final text answer."""
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        ran.append(city)
        return f"Sunny, 21 degrees Celsius in {city}."

    @function_tool
    def search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return "No results."

    client = AsyncOpenAI(base_url=api_root + "/v1", api_key="unused", max_retries=0, timeout=300)
    agent = Agent(name="assistant", instructions="Answer the user's question.", tools=[get_weather, search],
                  model=OpenAIResponsesModel(model=api_model, openai_client=client),
                  model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=64))
    result = asyncio.run(Runner.run(agent, ASK, max_turns=4))
    assert ran, "the agent called no tool"
    assert isinstance(result.final_output, str) and result.final_output.strip(), result.final_output
    no_markup(result.final_output)
    print(f"\nagent loop: tools ran with {ran}; final answer {result.final_output!r}")


# -- bad and generated bodies on both endpoints ------------------------------------------------------

def responses_error(data) -> bool:
    err = data.get("error") if isinstance(data, dict) else None
    return isinstance(err, dict) and isinstance(err.get("message"), str) and bool(err["message"])


def messages_error(data) -> bool:
    err = data.get("error") if isinstance(data, dict) else None
    return (data.get("type") == "error" and isinstance(err, dict) and isinstance(err.get("type"), str)
            and isinstance(err.get("message"), str)) if isinstance(data, dict) else False


BAD = {
    "responses": [
        b"{not json", b"[1, 2]", b'"hi"',
        {"input": []}, {"input": 5}, {"input": [{"type": "web_search_call"}]},
        {"input": ASK, "tools": [{"type": 5}]}, {"input": ASK, "tools": "x"},
        {"input": ASK, "tools": RESPONSES_TOOLS, "tool_choice": {"type": "function", "name": "nope"}},
        {"input": ASK, "tools": RESPONSES_TOOLS, "tool_choice": "sometimes"},
        {"input": ASK, "tool_choice": "required"},
        {"input": [{"role": "wizard", "content": "hi"}]},
        {"input": [{"type": "function_call_output", "call_id": "call_zz", "output": "x"}], "tools": RESPONSES_TOOLS},
        {"input": [{"type": "function_call", "call_id": 5, "name": "search", "arguments": "{}"}]},
        {"input": ASK, "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": 3}}]},
    ],
    "messages": [
        b"{not json", b"[1, 2]",
        {"messages": [{"role": "user", "content": ASK}]},  # no max_tokens
        {"max_tokens": 16, "messages": []}, {"max_tokens": 16, "messages": "hi"},
        {"max_tokens": 16, "messages": [{"role": "wizard", "content": "hi"}]},
        {"max_tokens": 16, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_zz",
                                                                      "content": "x"}]}], "tools": MESSAGES_TOOLS},
        {"max_tokens": 16, "messages": [{"role": "user", "content": ASK}], "tools": MESSAGES_TOOLS,
         "tool_choice": {"type": "tool", "name": "nope"}},
        {"max_tokens": 16, "messages": [{"role": "user", "content": ASK}], "tools": MESSAGES_TOOLS,
         "tool_choice": {"type": "sometimes"}},
        {"max_tokens": 16, "messages": [{"role": "user", "content": ASK}], "tools": [{"name": "f", "input_schema": 3}]},
        {"max_tokens": 16, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
    ],
}
PATHS = {"responses": "/v1/responses", "messages": "/v1/messages"}
IS_ERROR = {"responses": responses_error, "messages": messages_error}


def post(api_root: str, api: str, body, stream: bool = False) -> tuple[int, object]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with httpx.Client(timeout=TIMEOUT) as c:
        if stream:
            with c.stream("POST", api_root + PATHS[api], content=raw, headers={"content-type": "application/json"}) as r:
                if r.status_code == 200:
                    return 200, list(r.iter_lines())
                r.read()
                return r.status_code, _json(r.content)
        r = c.post(api_root + PATHS[api], content=raw, headers={"content-type": "application/json"})
        return r.status_code, _json(r.content)


def _json(content: bytes):
    try:
        return json.loads(content)
    except ValueError:
        return content[:300]


def check_bad(api_root: str, api_model: str, api: str, body, stream: bool) -> None:
    if isinstance(body, dict):
        body = {"model": api_model, **body, **({"stream": True} if stream else {})}
    status, data = post(api_root, api, body, stream)
    assert status == 400, (status, body, data)
    assert IS_ERROR[api](data), data


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("api", list(BAD))
def test_bad_bodies(api_root, api_model, api, stream, api_foreign_bad):
    for i, body in enumerate(BAD[api]):
        if (api, i) in api_foreign_bad:  # the engine's own route may take it: only no 5xx
            status, data = post(api_root, api, {"model": api_model, **body} if isinstance(body, dict) else body, stream)
            assert status < 500, (status, body, data)
            continue
        check_bad(api_root, api_model, api, body, stream)
    status, _ = post(api_root, "responses", {"model": api_model, "input": "Hi", "max_output_tokens": 2})
    assert status == 200


def agent_bodies(api: str, model: str):
    """A hypothesis strategy of Responses or Messages bodies: mostly well-formed, each field
    sometimes of the wrong type; output always short (never an unset max_output_tokens, which
    lets a model write until its context is full)."""
    from hypothesis import strategies as st

    scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=10))
    junk = st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                        max_leaves=5)
    text = st.one_of(st.text(max_size=30), st.sampled_from([ASK, "<tool_call>", "<tool_response>\n</tool_response>"]))
    if api == "responses":
        item = st.one_of(
            st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "assistant", "system", "x"]),
                      st.one_of(text, junk)),
            st.just({"type": "function_call", "call_id": "call_1", "name": "search", "arguments": "{}"}),
            st.builds(lambda o: {"type": "function_call_output", "call_id": "call_1", "output": o}, st.one_of(text, junk)),
            junk)
        return st.fixed_dictionaries(
            {"model": st.just(model), "input": st.one_of(text, st.lists(item, min_size=1, max_size=4), junk),
             "max_output_tokens": st.one_of(st.integers(1, 8), junk.filter(lambda v: v is not None))},
            optional={"tools": st.one_of(st.just(RESPONSES_TOOLS), st.lists(junk, max_size=2)),
                      "tool_choice": st.one_of(st.sampled_from(["auto", "required", "none"]),
                                               st.just({"type": "function", "name": "search"}), junk),
                      "stream": st.booleans(), "parallel_tool_calls": st.one_of(st.booleans(), junk),
                      "instructions": st.one_of(text, junk), "text": junk})
    block = st.one_of(st.builds(lambda t: {"type": "text", "text": t}, text),
                      st.just({"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}), junk)
    turn = st.builds(lambda r, c: {"role": r, "content": c}, st.sampled_from(["user", "assistant", "x"]),
                     st.one_of(text, st.lists(block, max_size=3), junk))
    return st.fixed_dictionaries(
        {"model": st.just(model), "max_tokens": st.one_of(st.integers(1, 8), junk),
         "messages": st.one_of(st.lists(turn, min_size=1, max_size=3), junk)},
        optional={"tools": st.one_of(st.just(MESSAGES_TOOLS), st.lists(junk, max_size=2)),
                  "tool_choice": st.one_of(st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"},
                                                            {"type": "tool", "name": "search"}]), junk),
                  "stream": st.booleans(), "system": st.one_of(text, junk), "stop_sequences": junk})


@pytest.mark.parametrize("api", list(BAD))
def test_fuzz(api_root, api_model, api):
    """Generated bodies (a fixed seed): never a 5xx, never past TIMEOUT, errors in the API's shape."""
    from hypothesis import HealthCheck, given, seed, settings

    stats: dict = {}

    @seed(20261125)
    @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(agent_bodies(api, api_model))
    def one(body):
        t = time.perf_counter()
        status, data = post(api_root, api, body, stream=body.get("stream") is True)
        stats[status] = stats.get(status, 0) + 1
        assert status < 500 and time.perf_counter() - t < TIMEOUT, (status, body, data)
        if status >= 400:
            assert IS_ERROR[api](data), (body, data)

    one()
    print(f"\n{api} fuzz statuses: {stats}")


# -- POST /v1/messages/count_tokens, GET and DELETE /v1/responses/{id} ---------------------------------

@pytest.fixture(scope="module")
def api_routes(server) -> set[str]:
    """The optional agent-API routes the server serves (an engine module may override it):
    `python -m llamacpp_ext` serves all three; vLLM 0.32 serves count_tokens, keeps responses for GET
    only with VLLM_ENABLE_RESPONSES_API_STORE=1 (not set by the tests) and has no DELETE."""
    if any("llamacpp_ext" in a for a in server.argv):
        return {"count_tokens", "responses_retrieve", "responses_delete"}
    return {"count_tokens"}


PATHS["count_tokens"] = "/v1/messages/count_tokens"
IS_ERROR["count_tokens"] = messages_error


def needs(api_routes: set[str], route: str) -> None:
    if route not in api_routes:
        pytest.skip(f"this server does not serve {route}")


def test_messages_count_tokens(ant, api_model, api_routes):
    """The official client's count_tokens: the prompt the same request is answered from, tools
    included (the answer's usage says the same number)."""
    needs(api_routes, "count_tokens")
    ask = [{"role": "user", "content": ASK}]
    plain = ant.messages.count_tokens(model=api_model, messages=ask).input_tokens
    counted = ant.messages.count_tokens(model=api_model, messages=ask, tools=MESSAGES_TOOLS).input_tokens
    assert 0 < plain < counted, (plain, counted)
    answered = ant.messages.create(model=api_model, max_tokens=1, messages=ask, tools=MESSAGES_TOOLS,
                                   extra_body={"temperature": 0})
    assert answered.usage.input_tokens == counted, (answered.usage, counted)
    history = ask + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "Sunny."}]}]
    longer = ant.messages.count_tokens(model=api_model, messages=history, tools=MESSAGES_TOOLS,
                                       system="Be brief.").input_tokens
    assert longer > counted
    print(f"\ncount_tokens: {plain} without tools, {counted} with two tools, {longer} after a tool result")


def test_messages_count_tokens_bad_bodies(api_root, api_model, api_routes):
    """A count_tokens body is checked as a Messages body (no max_tokens): 400 in Anthropic's shape."""
    needs(api_routes, "count_tokens")
    ask = [{"role": "user", "content": ASK}]
    for body in ({"messages": "hi"}, {"messages": ask, "tools": [{"name": "f"}]},
                 {"messages": ask, "tools": MESSAGES_TOOLS, "tool_choice": {"type": "tool", "name": "nope"}},
                 {"messages": ask, "tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}}):
        status, data = post(api_root, "count_tokens", {"model": api_model, **body})
        assert status == 400 and messages_error(data), (body, status, data)


def as_stored(resp) -> dict:
    """A Response as the server sent it (the stream helper adds `parsed_arguments` to calls)."""
    data = resp.model_dump(mode="json")
    data["output"] = [{k: v for k, v in item.items() if k != "parsed_arguments"} for item in data["output"]]
    return data


def test_responses_retrieve_and_delete(oai, api_model, api_root, api_routes):
    """A stored response, created or streamed, is retrieved as it was answered and deleted; an
    unknown or deleted id is a 404 in OpenAI's error shape, and no longer continues."""
    import openai

    needs(api_routes, "responses_retrieve")
    kw = dict(model=api_model, input=ASK, tools=RESPONSES_TOOLS, tool_choice="required", temperature=0,
              max_output_tokens=64)
    created = oai.responses.create(**kw)
    streamed = responses_stream(oai, **kw)[1]
    for resp in (created, streamed):
        got = oai.responses.retrieve(resp.id)
        assert as_stored(got) == as_stored(resp), (got, resp)
    unstored = oai.responses.create(model=api_model, input="Hi", store=False, max_output_tokens=4)
    for rid in ("resp_unknown", unstored.id):
        with pytest.raises(openai.NotFoundError):
            oai.responses.retrieve(rid)
    with httpx.Client(timeout=TIMEOUT) as c:
        r = c.get(f"{api_root}/v1/responses/resp_unknown")
    assert r.status_code == 404 and responses_error(r.json()), r.text
    needs(api_routes, "responses_delete")
    with httpx.Client(timeout=TIMEOUT) as c:
        r = c.delete(f"{api_root}/v1/responses/{created.id}")
    assert r.status_code == 200 and r.json() == {"id": created.id, "object": "response", "deleted": True}, r.text
    assert oai.responses.delete(streamed.id) is None  # the SDK returns nothing
    for rid in (created.id, streamed.id):
        with pytest.raises(openai.NotFoundError):
            oai.responses.retrieve(rid)
        with pytest.raises(openai.NotFoundError):
            oai.responses.delete(rid)
        with pytest.raises(openai.BadRequestError):
            oai.responses.create(model=api_model, previous_response_id=rid, input="Hi", max_output_tokens=4)


# -- wrongly typed fields: a 400 in the API's own shape, never a 200 ------------------------------------

# bodies that only a field's type makes bad (each was answered 200 by python -m llamacpp_ext before)
TYPED_BAD = {
    "responses": [
        {"input": ASK, "max_output_tokens": "48"}, {"input": ASK, "stream": "true"}, {"input": ASK, "store": "yes"},
        {"input": ASK, "parallel_tool_calls": "no"}, {"input": ASK, "metadata": "x"}, {"input": ASK, "text": "json"},
        {"input": ASK, "text": {"format": {"type": "json_schema", "name": "x", "schema": "nope"}}},
        {"input": ASK, "tools": [{"type": "banana"}]}, {"input": [{"role": "user", "content": []}]},
    ],
    "messages": [
        {"messages": [{"role": "user", "content": ASK}], "tools": [{"name": "f", "description": "f"}]},
        {"messages": [{"role": "user", "content": ASK}], "tools": MESSAGES_TOOLS,
         "tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"}},
        {"messages": [{"role": "user", "content": ASK}], "stop_sequences": [""]},
    ],
}
# a well-formed body per API, and each field's JSON types (as the API's schema has them); the field
# fuzz sets one field to a value of another type
FIELD_BASES = {
    "responses": {"input": [{"role": "user", "content": ASK}], "max_output_tokens": 4, "tools": RESPONSES_TOOLS,
                  "tool_choice": "auto", "text": {"format": {"type": "json_schema", "name": "answer",
                                                             "schema": {"type": "object"}}},
                  "metadata": {"k": "v"}},
    "messages": {"max_tokens": 4, "messages": [{"role": "user", "content": ASK}], "tools": MESSAGES_TOOLS,
                 "tool_choice": {"type": "auto"}, "system": "Be brief.", "metadata": {"user_id": "u"}},
}
FIELD_TYPES = {
    "responses": {
        ("model",): "string null", ("input",): "string array null", ("instructions",): "string null",
        ("max_output_tokens",): "integer null", ("temperature",): "number null", ("top_p",): "number null",
        ("stream",): "boolean null", ("store",): "boolean null", ("parallel_tool_calls",): "boolean null",
        ("metadata",): "object null", ("metadata", "k"): "string", ("text",): "object null",
        ("text", "format"): "object null", ("text", "format", "schema"): "object", ("text", "format", "name"): "string",
        ("tools",): "array null", ("tools", 0): "object", ("tools", 0, "name"): "string",
        ("tools", 0, "parameters"): "object null", ("tool_choice",): "string object null",
        ("previous_response_id",): "string null", ("input", 0): "object", ("input", 0, "content"): "string array",
        ("user",): "string null", ("include",): "array null", ("reasoning",): "object null",
    },
    "messages": {
        ("model",): "string null", ("max_tokens",): "integer", ("messages",): "array", ("messages", 0): "object",
        ("messages", 0, "content"): "string array", ("system",): "string array null", ("tools",): "array null",
        ("tools", 0): "object", ("tools", 0, "name"): "string", ("tools", 0, "input_schema"): "object",
        ("tool_choice",): "object null", ("tool_choice", "disable_parallel_tool_use"): "boolean null",
        ("stop_sequences",): "array null", ("stream",): "boolean null", ("temperature",): "number null",
        ("top_p",): "number null", ("top_k",): "integer null", ("metadata",): "object null",
        ("metadata", "user_id"): "string null", ("thinking",): "object null",
    },
}


def wrong_typed(types: str):
    """A hypothesis strategy of JSON values of none of `types` (JSON Schema's type names; an integer
    is a number, a boolean is neither)."""
    from hypothesis import strategies as st

    leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=5))
    junk = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                      st.dictionaries(st.text(max_size=4), inner, max_size=2)),
                        max_leaves=4)
    kinds = {
        "null": st.none(), "boolean": st.booleans(), "integer": st.integers(-10**6, 10**6),
        "number": st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
        "string": st.one_of(st.sampled_from(["48", "true", "yes", "no", "null", "{}", "[]"]), st.text(max_size=8)),
        "array": st.lists(junk, max_size=3), "object": st.dictionaries(st.text(max_size=6), junk, max_size=3),
    }
    allowed = set(types.split())
    if "number" in allowed:
        allowed.add("integer")
    return st.one_of(*(s for k, s in kinds.items() if k not in allowed))


def with_field(base: dict, path: tuple, value) -> dict:
    """A copy of `base` with the field at `path` set to `value`."""
    body = json.loads(json.dumps(base))
    here = body
    for key in path[:-1]:
        here = here[key]
    here[path[-1]] = value
    return body


def field_cases(api: str):
    """A hypothesis strategy of (field path, body with that field wrongly typed)."""
    from hypothesis import strategies as st

    fields = sorted(FIELD_TYPES[api], key=str)
    return st.sampled_from(fields).flatmap(
        lambda path: wrong_typed(FIELD_TYPES[api][path]).map(lambda v: (path, with_field(FIELD_BASES[api], path, v))))


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("api", list(TYPED_BAD))
def test_typed_fields(api_root, api_model, api, stream):
    """Each field the API's schema types, given the wrong type, is a 400 in the API's shape."""
    for body in TYPED_BAD[api]:
        if stream and "stream" in body:  # the stream case is the field itself
            continue
        base = {"max_tokens": 16} if api == "messages" else {}
        check_bad(api_root, api_model, api, {**base, **body}, stream)


@pytest.mark.parametrize("api", list(TYPED_BAD))
def test_fuzz_field_types(api_root, api_model, api):
    """Generated (a fixed seed): one field of a well-formed body set to a value of another type is
    always a 400 in the API's shape: never a 200, never a 5xx."""
    from hypothesis import HealthCheck, given, seed, settings

    fields: dict = {}

    @seed(20261126)
    @settings(max_examples=80, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(field_cases(api))
    def one(case):
        path, body = case
        body = {"model": api_model, **body} if path != ("model",) else body
        fields[path] = fields.get(path, 0) + 1
        status, data = post(api_root, api, body)
        assert status == 400 and IS_ERROR[api](data), (path, body, status, data)

    one()
    print(f"\n{api}: {sum(fields.values())} bodies, {len(fields)} fields wrongly typed, each a 400")


# -- an answer ends after its calls (auto): no text after a call, stop reason and order ---------------

ENDING_ASKS = ("What is the weather in Paris right now?", "What is the weather in Paris, London and Tokyo?",
               "Search the web for the height of the Eiffel Tower.")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_messages_end_after_their_calls(ant, api_model, stream):
    """Under auto with room to run on (max_tokens 256): a Message holding a tool_use block has
    stop_reason tool_use, and no text block comes after a tool_use block, streamed or not."""
    called = 0
    for ask in ENDING_ASKS:
        kw = dict(model=api_model, max_tokens=256, messages=[{"role": "user", "content": ask}], tools=MESSAGES_TOOLS,
                  tool_choice={"type": "auto"}, extra_body={"temperature": 0})
        msg = messages_stream(ant, **kw)[1] if stream else ant.messages.create(**kw)
        kinds = [b.type for b in msg.content]
        if "tool_use" in kinds:
            called += 1
            assert msg.stop_reason == "tool_use", (ask, msg.stop_reason, msg.content)
            assert "text" not in kinds[kinds.index("tool_use"):], (ask, msg.content)
    assert called, "no question got a call: nothing was checked"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_end_after_their_calls(oai, api_model, stream):
    """The same on Responses: no message item after a function_call item, status completed."""
    called = 0
    for ask in ENDING_ASKS:
        kw = dict(model=api_model, input=ask, tools=RESPONSES_TOOLS, tool_choice="auto", temperature=0,
                  max_output_tokens=256)
        resp = responses_stream(oai, **kw)[1] if stream else oai.responses.create(**kw)
        kinds = [i.type for i in resp.output]
        if "function_call" in kinds:
            called += 1
            assert resp.status == "completed", (ask, resp.status, resp.output)
            assert "message" not in kinds[kinds.index("function_call"):], (ask, resp.output)
    assert called, "no question got a call: nothing was checked"


def test_chat_ends_after_its_calls(oai, api_model):
    """Chat Completions, streamed: no content delta after the first tool-call delta, and the finish
    reason tool_calls; not streamed, the same calls and no more content than the stream had before them."""
    called = 0
    for ask in ENDING_ASKS:
        kw = dict(model=api_model, messages=[{"role": "user", "content": ask}], tools=TOOLS, tool_choice="auto",
                  temperature=0, max_tokens=256)
        before, after, names, finish = "", "", [], None
        for chunk in oai.chat.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                names += [tc.function.name for tc in ch.delta.tool_calls or () if tc.function and tc.function.name]
                if ch.delta.content:
                    after, before = (after + ch.delta.content, before) if names else (after, before + ch.delta.content)
                finish = ch.finish_reason or finish
        whole = oai.chat.completions.create(**kw).choices[0]
        if names:
            called += 1
            assert not after and finish == "tool_calls", (ask, after, finish)
            assert [c.function.name for c in whole.message.tool_calls or ()] == names
            assert (whole.message.content or "").strip() == before.strip() and whole.finish_reason == "tool_calls"
    assert called, "no question got a call: nothing was checked"


# -- allowed_tools: every tool in the prompt, calls only to the allowed ones ---------------------------------

ALLOWED_ONLY = ["search"]  # the weather question's own tool is left out


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_chat_allowed_tools(oai, api_model, stream):
    """Chat Completions: a weather question with only the search tool allowed. `required`: a call, to
    search; `auto`: no call to the weather tool (a call to search, or text)."""
    for mode in ("required", "auto"):
        kw = dict(model=api_model, messages=[{"role": "user", "content": ASK}], tools=TOOLS, temperature=0,
                  max_tokens=64, tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
                      {"type": "function", "function": {"name": n}} for n in ALLOWED_ONLY]}})
        if stream:
            names, content = [], ""
            for chunk in oai.chat.completions.create(stream=True, **kw):
                for ch in chunk.choices:
                    names += [tc.function.name for tc in ch.delta.tool_calls or () if tc.function and tc.function.name]
                    content += ch.delta.content or ""
        else:
            message = oai.chat.completions.create(**kw).choices[0].message
            names, content = [c.function.name for c in message.tool_calls or ()], message.content or ""
        assert set(names) <= set(ALLOWED_ONLY), (mode, names)
        if mode == "required":
            assert names, content
        no_markup(content)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_allowed_tools(oai, api_model, stream):
    """Responses: the same, in its own `allowed_tools` shape, under `required`."""
    kw = dict(model=api_model, input=ASK, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=64,
              tool_choice={"type": "allowed_tools", "mode": "required",
                           "tools": [{"type": "function", "name": n} for n in ALLOWED_ONLY]})
    resp = responses_stream(oai, **kw)[1] if stream else oai.responses.create(**kw)
    calls = [i for i in resp.output if i.type == "function_call"]
    assert calls and {c.name for c in calls} <= set(ALLOWED_ONLY), resp.output
    for c in calls:
        valid(c.name, c.arguments)


# -- strict: accepted on every API; a schema strict mode forbids is the API's 400 ------------------------

STRICT_WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.", "strict": True,
                  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                                 "additionalProperties": False}}


def test_strict_tools(oai, ant, api_model):
    import anthropic
    import openai

    chat = oai.chat.completions.create(model=api_model, messages=[{"role": "user", "content": ASK}], temperature=0,
                                       max_tokens=64, tools=[{"type": "function", "function": STRICT_WEATHER}],
                                       tool_choice="required")
    calls = chat.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), STRICT_WEATHER["parameters"])
    resp = oai.responses.create(model=api_model, input=ASK, tools=[{"type": "function", **STRICT_WEATHER}],
                                tool_choice="required", temperature=0, max_output_tokens=64)
    assert [i.name for i in resp.output if i.type == "function_call"] == ["get_weather"], resp.output
    msg = ant.messages.create(model=api_model, max_tokens=64, messages=[{"role": "user", "content": ASK}],
                              tool_choice={"type": "any"}, extra_body={"temperature": 0}, tools=[{
                                  "name": "get_weather", "description": STRICT_WEATHER["description"],
                                  "input_schema": STRICT_WEATHER["parameters"], "strict": True}])
    assert [b.name for b in msg.content if b.type == "tool_use"] == ["get_weather"], msg.content
    loose = {**STRICT_WEATHER, "parameters": {**STRICT_WEATHER["parameters"], "required": []}}
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=api_model, messages=[{"role": "user", "content": ASK}], max_tokens=8,
                                    tools=[{"type": "function", "function": loose}])
    assert "required" in str(e.value) and "city" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model=api_model, input=ASK, tools=[{"type": "function", **loose}], max_output_tokens=8)
    with pytest.raises(anthropic.BadRequestError):  # a strict that is not a boolean
        ant.messages.create(model=api_model, max_tokens=8, messages=[{"role": "user", "content": ASK}], tools=[{
            "name": "get_weather", "input_schema": STRICT_WEATHER["parameters"], "strict": "yes"}])


# -- response_format beside tools under auto: calls, or a final answer in the format ---------------------

FINAL_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 120}},
                "required": ["answer"], "additionalProperties": False}
FORMAT_ASKS = (ASK, "Write one short sentence about autumn.")


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_chat_response_format_beside_tools(oai, api_model, stream):
    """Chat Completions, `auto`, a json_schema response_format and tools: each answer is calls (valid) or a
    final answer that validates against the schema (one that max_tokens cut is not checked, but counted)."""
    finals = calls = 0
    for ask in FORMAT_ASKS:
        kw = dict(model=api_model, messages=[{"role": "user", "content": ask}], tools=TOOLS, tool_choice="auto",
                  temperature=0, max_tokens=96, response_format={"type": "json_schema", "json_schema": {
                      "name": "answer", "schema": FINAL_SCHEMA}})
        if stream:
            content, named, finish = "", [], None
            for chunk in oai.chat.completions.create(stream=True, **kw):
                for ch in chunk.choices:
                    content += ch.delta.content or ""
                    named += [tc.function.name for tc in ch.delta.tool_calls or () if tc.function and tc.function.name]
                    finish = ch.finish_reason or finish
        else:
            choice = oai.chat.completions.create(**kw).choices[0]
            content, finish = choice.message.content or "", choice.finish_reason
            named = [c.function.name for c in choice.message.tool_calls or ()]
        if named:
            calls += 1
            assert finish == "tool_calls" and not content.strip(), (ask, content, finish)
        elif finish == "stop":
            finals += 1
            jsonschema.validate(json.loads(content), FINAL_SCHEMA)
    assert finals + calls, "every answer was cut: nothing was checked"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_format_beside_tools(oai, api_model, stream):
    """Responses, the same through its `text.format`."""
    checked = 0
    for ask in FORMAT_ASKS:
        kw = dict(model=api_model, input=ask, tools=RESPONSES_TOOLS, tool_choice="auto", temperature=0,
                  max_output_tokens=96, text={"format": {"type": "json_schema", "name": "answer",
                                                         "schema": FINAL_SCHEMA}})
        resp = responses_stream(oai, **kw)[1] if stream else oai.responses.create(**kw)
        kinds = responses_kind(resp)
        if "function_call" in kinds:
            checked += 1
            assert kinds == ("function_call",), resp.output
        elif resp.status == "completed":
            checked += 1
            jsonschema.validate(json.loads(resp.output_text), FINAL_SCHEMA)
    assert checked, "every answer was cut: nothing was checked"


# -- custom tools: a call's input held to the tool's regex or Lark grammar ------------------------------------

CUSTOM_ASKS = {  # a tool per syntax and the question that calls it
    "zip_code": ("regex", r"[0-9]{5}", "What is the zip code of Beverly Hills?"),
    "forecast": ("lark", 'start: "sunny" | "rainy" | "cloudy"', "Will it rain in Paris tomorrow?"),
}


def custom_ok(name: str, text: str) -> bool:
    """Whether a custom tool's input follows its grammar (toolbridge.custom.follows: Python's re, the lark library)."""
    from toolbridge.custom import follows

    syntax, definition, _ = CUSTOM_ASKS[name]
    return follows(syntax, definition, text)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_chat_custom_tools(oai, api_model, stream):
    """Chat Completions: a custom tool with a grammar, named in tool_choice: the call comes back in the custom
    shape (`custom.name`, `custom.input`), its input following the grammar, whole and streamed."""
    for name, (syntax, definition, ask) in CUSTOM_ASKS.items():
        tools = [{"type": "custom", "custom": {"name": n, "description": f"The {n.replace('_', ' ')}.", "format": {
            "type": "grammar", "grammar": {"syntax": s, "definition": d}}}} for n, (s, d, _) in CUSTOM_ASKS.items()]
        kw = dict(model=api_model, messages=[{"role": "user", "content": ask}], tools=tools + TOOLS, temperature=0,
                  max_tokens=48, tool_choice={"type": "custom", "custom": {"name": name}})
        if stream:
            calls: dict[int, dict] = {}
            for chunk in oai.chat.completions.create(stream=True, **kw):
                for ch in chunk.choices:
                    for tc in ch.delta.tool_calls or ():
                        part = tc.model_dump()
                        assert part.get("function") is None, part
                        call = calls.setdefault(tc.index, {"name": None, "input": ""})
                        call["name"] = part["custom"].get("name") or call["name"]
                        call["input"] += part["custom"].get("input") or ""
            got = [(c["name"], c["input"]) for c in calls.values()]
        else:
            message = oai.chat.completions.create(**kw).choices[0].message
            assert all(c.type == "custom" for c in message.tool_calls or ()), message
            got = [(c.custom.name, c.custom.input) for c in message.tool_calls or ()]
        assert got and all(n == name and custom_ok(n, text) for n, text in got), (name, got)


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_responses_custom_tools(oai, api_model, stream):
    """Responses: the same through `custom_tool_call` items (and their input events when streamed)."""
    tools = [{"type": "custom", "name": n, "description": f"The {n.replace('_', ' ')}.",
              "format": {"type": "grammar", "syntax": s, "definition": d}} for n, (s, d, _) in CUSTOM_ASKS.items()]
    for name, (_, _, ask) in CUSTOM_ASKS.items():
        kw = dict(model=api_model, input=ask, tools=tools, temperature=0, max_output_tokens=48,
                  tool_choice={"type": "custom", "name": name})
        resp = responses_stream(oai, **kw)[1] if stream else oai.responses.create(**kw)
        calls = [i for i in resp.output if i.type == "custom_tool_call"]
        assert calls and all(c.name == name and custom_ok(name, c.input) for c in calls), resp.output


def test_custom_tool_bad_grammars(oai, api_model):
    """A grammar no engine here can hold is a 400 naming the construct, on both APIs: never a free-text call."""
    import openai

    bad = {"type": "grammar", "syntax": "regex", "definition": "(?=[0-9])[0-9]{5}"}
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=api_model, messages=[{"role": "user", "content": ASK}], max_tokens=8,
                                    tools=[{"type": "custom", "custom": {"name": "zip_code", "format": {
                                        "type": "grammar", "grammar": {k: bad[k] for k in ("syntax", "definition")}}}}])
    assert "lookahead" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=api_model, input=ASK, max_output_tokens=8, tools=[{
            "type": "custom", "name": "forecast", "format": {"type": "grammar", "syntax": "lark",
                                                             "definition": "start: %%% nonsense"}}])
    assert "grammar" in str(e.value).lower()


def test_chat_custom_tool_turns(oai, api_model):
    """Chat: a custom call in the history and its result are taken back (the answer is the model's, with no markup);
    `allowed_tools` may name a custom tool, whose call then comes in the custom shape."""
    name, (syntax, definition, ask) = next(iter(CUSTOM_ASKS.items()))
    tools = [{"type": "custom", "custom": {"name": name, "format": {
        "type": "grammar", "grammar": {"syntax": syntax, "definition": definition}}}}] + TOOLS
    history = [{"role": "user", "content": ask},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "custom", "custom": {"name": name, "input": "90210"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "90210 is the zip code of Beverly Hills."}]
    answer = oai.chat.completions.create(model=api_model, messages=history, tools=tools, temperature=0, max_tokens=48)
    no_markup(answer.choices[0].message.content)
    allowed = oai.chat.completions.create(
        model=api_model, messages=[{"role": "user", "content": ask}], tools=tools, temperature=0, max_tokens=48,
        tool_choice={"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
            {"type": "custom", "custom": {"name": name}}]}})
    calls = allowed.choices[0].message.tool_calls or []
    assert calls and all(c.type == "custom" and c.custom.name == name and custom_ok(name, c.custom.input)
                         for c in calls), calls
