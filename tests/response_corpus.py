"""What the response-template tests read: model outputs, and how toolbridge's parser and another
parser are compared on them.

An output is (id, prompt, text, deltas): the text is what the model wrote after `prompt`, the deltas
how a stream delivered it. Two sources:
- renderings: calls written by each dialect's own `format_calls` (varied names and arguments, one to
  three calls, with and without text before them), streamed a character at a time and in 7-character
  pieces;
- recordings: real answers of SmolLM2-135M-Instruct and Qwen2.5-Coder-0.5B-Instruct to prompts a
  toolbridge template rendered, whole and streamed (tests/data/recorded_answers.json, made by
  tests/record_answers.py).

Both sides are read as (content, calls): content stripped of surrounding whitespace ("" for none),
calls as (name, arguments as a JSON value).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from toolsets import CITY_WEATHER, TOOLS, bench_question, ids

from toolbridge import StreamParser, collect, parse
from toolbridge.dialects import DIALECTS
from toolbridge.prompt.chat_templates import FAMILIES, wrap
from toolbridge.prompt.response_template import expressible

RECORDED = Path(__file__).resolve().parent / "data" / "recorded_answers.json"
EXPRESSIBLE = [d for d in DIALECTS if expressible(d)]

CALL_SETS: list[list[tuple[str, Any]]] = [
    [("get_weather", {"city": "Paris"})],
    [("get_weather", {"city": "Zürich", "days": 3, "unit": "celsius"})],
    [("search", {"query": 'say "hi" {now} [ok], then: done'})],
    [("search", {"query": "two\nlines\tand a \\ backslash"})],
    [("read", {"path": "a/b.txt", "offset": 0, "raw": True, "ratio": 0.5, "tags": ["x", "y"], "note": None})],
    [("read", {"path": "notes.md", "tags": []})],
    [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})],
    [("get_weather", {"city": "Tokyo"}), ("search", {"query": "Tokyo {events}"}), ("read", {"path": "x"})],
]
LEADS = ["", "Let me check that.\n", "I'll look it up:\n\n"]
ANSWERS = ["The capital of France is Paris.", "Sure! Here is a haiku:\nleaves fall {softly}\n", ""]


@dataclass
class Output:
    id: str
    dialect: str
    prompt: str
    text: str
    deltas: list[str]
    tools: list[dict]


def pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def renderings(dialect: str, prompt: str, end: str) -> Iterator[Output]:
    """Answers written in `dialect` by its own format_calls, and answers without calls; each whole,
    by character and in 7-character pieces. `end`: the turn's end marker, as a model writes it."""
    d = DIALECTS[dialect]
    texts = [(f"calls{i}-lead{j}", lead + d.format_calls(calls))
             for i, calls in enumerate(CALL_SETS) for j, lead in enumerate(LEADS)]
    texts += [(f"answer{i}", text) for i, text in enumerate(ANSWERS)]
    for name, text in texts:
        for tail in ("", end):
            for size in (1, 7):
                yield Output(f"{dialect}:{name}{'+end' if tail else ''}:by{size}", dialect, prompt, text + tail,
                             pieces(text + tail, size), TOOLS)


def toolbridge_reads(out: Output) -> tuple[str, list]:
    """(content, calls) toolbridge's parser reads, fed as the stream came (its reference)."""
    p = StreamParser(out.tools, id_factory=ids())
    events = [e for delta in out.deltas for e in p.feed(delta)] + p.finish()
    whole = parse(out.text, out.tools, id_factory=ids())
    streamed = collect(events)
    got = _shape(streamed.content, [(c.name, c.arguments) for c in streamed.calls])
    assert got == _shape(whole.content, [(c.name, c.arguments) for c in whole.calls]), out.id
    return got


def _shape(content: str | None, calls: list[tuple[str, Any]]) -> tuple[str, list]:
    return ((content or "").strip(),
            [(name, json.loads(args) if isinstance(args, str) else args) for name, args in calls])


def message_reads(message: dict) -> tuple[str, list]:
    """(content, calls) of a parsed message dict (transformers' parse_response)."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return _shape(message.get("content"), calls)


def compare(outputs: list[Output], theirs: Callable[[Output], tuple[str, list]]) -> tuple[dict, dict]:
    """Per dialect (agreeing, total), and each disagreement by output id: (ours, theirs); a parser that
    raises reads as ("raised: ...", None)."""
    tally: dict[str, list[int]] = {}
    differ: dict[str, tuple] = {}
    for out in outputs:
        ours = toolbridge_reads(out)
        try:
            got = theirs(out)
        except Exception as e:  # what a consumer's parser does with this output
            got = (f"raised: {type(e).__name__}: {str(e).splitlines()[0][:120]}", None)
        counts = tally.setdefault(out.dialect, [0, 0])
        counts[1] += 1
        if got == ours:
            counts[0] += 1
        else:
            differ[out.id] = (ours, got)
    return {d: tuple(c) for d, c in tally.items()}, differ


def report(title: str, tally: dict, differ: dict) -> str:
    lines = [f"{title}: agreement with toolbridge's parser per dialect"]
    lines += [f"  {d:9} {a}/{n}" for d, (a, n) in sorted(tally.items())]
    lines += [f"  differs {k}:\n    toolbridge {ours}\n    other      {got}"
              for k, (ours, got) in sorted(differ.items())]
    return "\n".join(lines)


def history(cities: list[str]) -> list[dict]:
    """Turns where the user asked for each city's weather and the assistant called get_weather."""
    turns = []
    for i, city in enumerate(cities):
        call = {"id": f"call_{i}", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
        turns += [{"role": "user", "content": f"What is the weather in {city}?"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": f"call_{i}", "content": "ok"},
                  {"role": "assistant", "content": f"It is ok in {city}."}]
    return turns


# Conversations where the model has called the tool before (SmolLM2 calls only then, unsteered).
FOLLOW_UPS = {"w1": "What is the weather in Paris?", "w2": "What is the weather in Paris and in London?"}


def conversation(question: str) -> tuple[list[dict], list[dict]]:
    """(messages, tools) of a recorded question: a bench/accuracy question, or a follow-up."""
    if question in FOLLOW_UPS:
        return history(["Rome", "Oslo", "Lima"]) + [{"role": "user", "content": FOLLOW_UPS[question]}], [CITY_WEATHER]
    return bench_question(question)


def recorded() -> dict:
    return json.loads(RECORDED.read_text(encoding="utf-8"))


def recorded_outputs(prompt_for: Callable[[str, str, list[dict], list[dict]], str]) -> list[Output]:
    """The recorded answers, whole and streamed; `prompt_for(model, dialect, messages, tools)` renders
    each one's prompt as the exported template does."""
    data = recorded()
    outs = []
    for a in data["answers"]:
        messages, tools = conversation(a["question"])
        prompt = prompt_for(a["model"], a["dialect"], messages, tools)
        base = f"{a['model']}:{a['dialect']}:{a['question']}"
        outs.append(Output(base + ":whole", a["dialect"], prompt, a["whole"], [a["whole"]], tools))
        outs.append(Output(base + ":stream", a["dialect"], prompt, "".join(a["stream"]), a["stream"], tools))
    return outs


CHATML = FAMILIES["chatml"].stock


def chatml(dialect: str) -> str:
    """The packaged ChatML template wrapped for `dialect`."""
    return wrap(CHATML, dialect=dialect)


def tokenizer_model(path: Path, chat_template: str, *, bos_token: str | None = None,
                    eos_token: str = "<|im_end|>", special: tuple[str, ...] = ("<|im_start|>",)) -> Path:
    """A model directory holding only a tokenizer (bytes as tokens, the turn markers as special tokens)
    and a stock chat template: what `toolbridge templates export` reads, at no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos_token, eos_token=eos_token,
                                  extra_special_tokens=list(special))
    tok.chat_template = chat_template
    tok.save_pretrained(path)
    return path


def exported(tmp: Path, chat_template: str, dialect: str, **tokens: Any):
    """The tokenizer `toolbridge templates export` writes for a tokenizer-only model, loaded back."""
    from transformers import AutoTokenizer

    from toolbridge.export import export

    export(tokenizer_model(tmp / "model", chat_template, **tokens), tmp / "out", dialect=dialect)
    return AutoTokenizer.from_pretrained(tmp / "out")


# Every answer recorded in tests/data/recorded_answers.json that another parser reads differently from
# toolbridge's, by reason: model:dialect:question (the whole and the streamed answer both differ), or
# with :whole or :stream (only that one; the two were generated apart and may differ). The same answers
# differ on transformers and on vLLM 0.33.
RECORDED_DIFFER: dict[str, list[str]] = {
    # Qwen names tools of its own (capital_of_france, weather_tool, water_reminder, schedule_event): a call
    # counts for toolbridge only when it names a declared tool, and a response template has no tool list
    "names no declared tool: toolbridge keeps the text, the others return the call": [
        "qwen:json:n02", "qwen:json:p01", "qwen:json:p06", "qwen:json:s10", "qwen:toolcall:p06", "qwen:toolcall:s10"],
    "a call in another dialect than the prompt asked for (bare JSON under the tags prompt): toolbridge "
    "reads every dialect, the others leave it as content": ["qwen:tags:c11", "qwen:tags:w1"],
    "the model writes a tool's result itself (<tool_response>, TOOL_RESULT): toolbridge ends the answer "
    "there, the others return it as content": ["smollm2:tags:w2", "smollm2:toolcall:w1", "smollm2:toolcall:w2"],
    "JSON that only toolbridge repairs (Qwen closes the fenced call list's brackets out of order, or is cut "
    "off at max_tokens): transformers raises, vLLM drops the call": [
        "qwen:fenced:c11", "qwen:fenced:p01", "qwen:fenced:p06", "qwen:fenced:s01", "qwen:fenced:s10",
        "qwen:fenced:w2:stream"],
    "a ```json block that is no call list (cut off, keys of its own): toolbridge keeps it as content, "
    "transformers raises, vLLM drops it": ["smollm2:fenced:c05"],
}
KNOWN_DIFFER = {f"{key}:{form}" if key.count(":") == 2 else key: why
                for why, keys in RECORDED_DIFFER.items() for key in keys
                for form in (("whole", "stream") if key.count(":") == 2 else ("",))}


def check_reasons(differ: dict, consumer: str) -> None:
    """Each recorded disagreement looks as its reason says, for `consumer` ("transformers" or "vLLM")."""
    for key, (ours, theirs) in differ.items():
        why = KNOWN_DIFFER[key]
        if why.startswith("names no declared tool"):
            assert not ours[1] and theirs[1], key
        elif why.startswith("a call in another dialect"):
            assert ours[1] and not theirs[1], key
        elif why.startswith("the model writes a tool's result"):
            assert ours == ("", []) and theirs[0] and theirs[1] == [], key
        elif consumer == "transformers":
            assert "transformers raises" in why and theirs[0].startswith("raised"), key
        else:
            assert "vLLM drops" in why and theirs[1] == [], key


PARIS = [("get_weather", {"city": "Paris"})]
_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
# What only toolbridge's parser reads as one call to get_weather (Paris), with its content: each edge's
# text, then (content, calls) through the tags template on transformers and on vLLM 0.33 ("raises": an
# error). transformers keeps the last content region; vLLM joins them all, and drops a call it cannot parse.
EDGES: dict[str, tuple[str, Any, Any]] = {
    "text after the call (toolbridge: no content)": (
        f"{_CALL}\nThe weather in Paris is 22°C.",
        ("The weather in Paris is 22°C.", PARIS), ("The weather in Paris is 22°C.", PARIS)),
    "text before and after the call (toolbridge: the text before)": (
        f"Let me check.\n{_CALL}\nIt is sunny.", ("It is sunny.", PARIS), ("Let me check.\nIt is sunny.", PARIS)),
    "a call in another dialect": (
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', []),
        ('{"name": "get_weather", "arguments": {"city": "Paris"}}', [])),
    "JSON with single quotes": (
        "<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Paris'}}\n</tool_call>",
        ("<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Paris'}}\n</tool_call>", []),
        ("<tool_call>\n{'name': 'get_weather', 'arguments': {'city': 'Paris'}}\n</tool_call>", [])),
    "keys in another order": (
        '<tool_call>{"arguments": {"city": "Paris"}, "name": "get_weather"}</tool_call>',
        ('<tool_call>{"arguments": {"city": "Paris"}, "name": "get_weather"}</tool_call>', []),
        ('<tool_call>{"arguments": {"city": "Paris"}, "name": "get_weather"}</tool_call>', [])),
    "an unquoted string argument": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>', "raises", ("", [])),
}
