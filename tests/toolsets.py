"""Tool definitions shared by the tests."""
import json
from pathlib import Path

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "minimum": 1},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}}}
READ = {"type": "function", "function": {
    "name": "read", "description": "Read file contents",
    "parameters": {"type": "object", "required": ["path"], "properties": {
        "path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"},
        "raw": {"type": "boolean"}, "ratio": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]}}}}}
TOOLS = [WEATHER, SEARCH, READ]


def ids():
    """A deterministic call-id factory."""
    n = iter(range(10**9))
    return lambda: f"call_{next(n)}"


BENCH = Path(__file__).resolve().parent.parent / "bench" / "accuracy"


def bench_question(qid: str) -> tuple[list[dict], list[dict]]:
    """(messages, tools) of one bench/accuracy question, as the bench asks it."""
    tools = json.loads((BENCH / "tools.json").read_text())
    (q,) = [q for q in json.loads((BENCH / "questions.json").read_text())["questions"] if q["id"] == qid]
    return ([{"role": "user", "content": q["question"]}],
            [{"type": "function", "function": {"name": n, **tools[n]}} for n in q["tools"]])


# Two small tools with no optional number (a base model without the argument close fills an
# optional integer with digits until max_tokens): the vLLM and Gemma end-to-end tests'.
CITY_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
WEB_SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}}}
SMALL_TOOLS = [CITY_WEATHER, WEB_SEARCH]
