"""How answers start under `auto`: the model's own answer, a call, or a stray piece of a call start.

    python bench/answer_start.py --base-url http://127.0.0.1:8000/v1 [--model NAME] [--stream] [--json out.json]
    python bench/answer_start.py --compare before.json after.json

Two tools (weather, web search); 40 questions that need no tool and 20 that need one, asked once each at
temperature 0 with 40 tokens, under `auto` and the server's default options. Per answer: whether it made
a call, and whether its content begins with the first character of a call start (`<` of `<tool_call>`,
`{` of a bare JSON call) without being a call: the start bias picked that token and the model went on
with markup of its own (`<pre>`, `<sea_hokai>`). Prints the counts (and, with --compare, the answers
that changed between two saved runs).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

PLAIN = [
    "Write two lines about autumn.", "Write a haiku about the sea.", "Translate 'good night' into Spanish.",
    "What is 12 times 7?", "Say hello in French.", "Give me a synonym for happy.",
    "What is the capital of Italy?", "Name three primary colors.", "Write a short poem about a cat.",
    "Explain what a noun is in one sentence.", "How many days are in a leap year?", "Tell me a joke about computers.",
    "What is the opposite of cold?", "Spell the word 'necessary' backwards.", "Write a limerick about a frog.",
    "Describe the color blue to a child.", "What is the plural of mouse?", "Suggest a name for a pet goldfish.",
    "Write one sentence about friendship.", "What does 'bonjour' mean?", "List four fruits that are red.",
    "Summarize the story of Cinderella in two sentences.", "Write a motivational quote.",
    "How do you say thank you in German?", "What is the square root of 81?", "Write a riddle about time.",
    "Give me a tip for better sleep.", "Who wrote Romeo and Juliet?", "Write a two-line rhyme about rain.",
    "What is a verb? Give an example.", "Convert 3 hours into minutes.", "Write a thank-you note to a teacher.",
    "Name the planets closest to the sun.", "What rhymes with moon?", "Write a tweet about coffee.",
    "Describe a sunset in one sentence.", "What is 15 plus 27?", "Write an opening line for a fantasy novel.",
    "Give me three words that start with Z.", "Write a short birthday message for my sister.",
]
TOOL = [
    "What is the weather in Paris?", "Is it raining in Tokyo right now?", "How hot is it in Cairo today?",
    "Weather in Rome in fahrenheit, please.", "What's the temperature in Berlin?", "Will it snow in Oslo today?",
    "Check the weather for Madrid.", "Get me the current weather in Sydney.", "Is it sunny in Lisbon?",
    "How cold is it in Moscow right now?", "Search the web for the tallest building in the world.",
    "Find news about the Mars rover.", "Look up the population of Canada.", "Search for the best pizza recipe.",
    "Find the release date of the next iPhone.", "Search the web for reviews of the Tesla Model 3.",
    "Look up who won the last World Cup.", "Search for cheap flights to Bangkok.",
    "Find the opening hours of the Louvre.", "Search the web for the latest Python release.",
]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": {"type": "object", "required": ["city"], "properties": {
                                          "city": {"type": "string", "description": "City name"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web",
                                      "parameters": {"type": "object", "required": ["query"],
                                                     "properties": {"query": {"type": "string"}}}}},
]
STRAY = ("<", "{")  # the first characters of the default dialect's call start and of a bare JSON call


def ask(client, model: str, question: str, needs_tool: bool, stream: bool = False) -> dict:
    kw = dict(model=model, messages=[{"role": "user", "content": question}], tools=TOOLS, tool_choice="auto",
              temperature=0, max_tokens=40)
    if stream:
        content, names, finish = "", {}, None
        for chunk in client.chat.completions.create(stream=True, **kw):
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for c in choice.delta.tool_calls or []:
                    if c.function and c.function.name:
                        names[c.index] = c.function.name
                finish = choice.finish_reason or finish
        calls = [names[i] for i in sorted(names)]
    else:
        r = client.chat.completions.create(**kw)
        m, finish = r.choices[0].message, r.choices[0].finish_reason
        content, calls = m.content or "", [c.function.name for c in m.tool_calls or []]
    return {"question": question, "needs_tool": needs_tool, "content": content, "calls": calls,
            "stray": not calls and content.lstrip().startswith(STRAY), "finish": finish}


def table(rows: list[dict]) -> str:
    plain = [r for r in rows if not r["needs_tool"]]
    tool = [r for r in rows if r["needs_tool"]]
    stray = sum(r["stray"] for r in rows)
    stray_partial = sum(r["stray"] for r in plain)
    return (f"answers starting with a stray call-start piece: {stray} of {len(rows)} ({stray_partial} of "
            f"{len(plain)} no-tool)\ncalls on tool questions: {sum(bool(r['calls']) for r in tool)} of {len(tool)}\n"
            f"calls on no-tool questions: {sum(bool(r['calls']) for r in plain)} of {len(plain)}")


def compare(before: list[dict], after: list[dict]) -> None:
    for b, a in zip(before, after):
        if (b["content"], b["calls"]) != (a["content"], a["calls"]):
            print(f"- {b['question']}\n    before: {b['calls'] or repr(b['content'][:70])}"
                  f"\n    after:  {a['calls'] or repr(a['content'][:70])}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", default=None, help="the served model's name (default: the server's first)")
    ap.add_argument("--json", help="save every answer here")
    ap.add_argument("--stream", action="store_true", help="ask for streamed answers (put together here)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), help="two saved runs: counts and changes")
    args = ap.parse_args()
    if args.compare:
        runs = [json.load(open(p)) for p in args.compare]
        for path, rows in zip(args.compare, runs):
            print(f"{path}:\n{table(rows)}")
        compare(*runs)
        return 0
    from openai import OpenAI

    client = OpenAI(base_url=args.base_url, api_key="none", timeout=600)
    model = args.model or client.models.list().data[0].id
    t0 = time.perf_counter()
    rows = [ask(client, model, q, False, args.stream) for q in PLAIN] + [ask(client, model, q, True, args.stream)
                                                                         for q in TOOL]
    for r in rows:
        if r["stray"]:
            print(f"stray: {r['question']!r} -> {r['content'][:60]!r}")
    print(table(rows))
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
