"""The tool API parts that need a grammar, measured on a running server (Chat Completions, temperature 0):

    python bench/tool_api.py --base-url http://127.0.0.1:8000/v1 [--model NAME] [--json out.json]

- allowed_tools: the 20 tool questions of bench/answer_start.py, each with only the *other* tool allowed,
  under `required` and `auto`: calls, and calls to a tool outside the allowed set (must be 0);
- response_format beside tools (`auto`, a json_schema final answer): the 20 tool questions and 20 of the
  no-tool ones, with and without the format: calls, final answers, final answers that validate against
  the schema (every finished one must), answers cut by max_tokens;
- parallel_tool_calls: 20 questions that ask for two calls, under `required` and `auto`, with parallel
  calls on and off: answers with two or more calls (must be 0 where off);
- custom tools: 20 questions per syntax (regex, lark), 5 for each of four grammars (an enum of words, a date, a
  small expression language, a key=value list), the one custom tool `required`, with the grammar and with
  `format: text`: calls, and inputs that follow the grammar (every one must where the grammar is given).
Prints one table per part (`--parts` chooses them).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from answer_start import PLAIN, TOOL, TOOLS  # noqa: E402

from toolbridge.custom import follows  # noqa: E402

NAMES = [t["function"]["name"] for t in TOOLS]
FINAL = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 200}}, "required": ["answer"],
         "additionalProperties": False}
CITIES = ["Paris", "Rome", "Tokyo", "Berlin", "Madrid", "Oslo", "Cairo", "Lima", "Seoul", "Dublin"]
TWO_CALLS = ([f"What is the weather in {a} and in {b}?" for a, b in zip(CITIES[::2], CITIES[1::2])]
             + [f"Get the weather for {a}, then the weather for {b}." for a, b in zip(CITIES[1::2], CITIES[::2])]
             + [f"Search the web for {a} and for {b}." for a, b in (("cats", "dogs"), ("tea", "coffee"),
                                                                   ("Mars", "Venus"), ("jazz", "opera"),
                                                                   ("chess", "go"))]
             + [f"What is the weather in {c}, and search the web for its museums." for c in CITIES[:5]])


def ask(client, model: str, question: str, max_tokens: int = 64, **kw) -> dict:
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], tools=TOOLS,
                                       temperature=0, max_tokens=max_tokens, **kw)
    choice = r.choices[0]
    return {"question": question, "calls": [c.function.name for c in choice.message.tool_calls or ()],
            "content": choice.message.content or "", "finish": choice.finish_reason}


def allowed(client, model: str) -> list[dict]:
    rows = []
    for i, q in enumerate(TOOL):
        own = "get_weather" if i < 10 else "search"  # bench/answer_start.py: 10 weather, then 10 search questions
        other = [n for n in NAMES if n != own]
        for mode in ("required", "auto"):
            choice = {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
                {"type": "function", "function": {"name": n}} for n in other]}}
            rows.append({**ask(client, model, q, tool_choice=choice), "mode": mode, "allowed": other})
    return rows


def formats(client, model: str) -> list[dict]:
    rows = []
    for q, needs in [(q, True) for q in TOOL] + [(q, False) for q in PLAIN[:20]]:
        for fmt in (True, False):
            kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": FINAL}}} \
                if fmt else {}
            row = {**ask(client, model, q, max_tokens=96, tool_choice="auto", **kw), "format": fmt, "needs": needs}
            if fmt and not row["calls"] and row["finish"] == "stop":
                try:
                    jsonschema.validate(json.loads(row["content"]), FINAL)
                    row["valid"] = True
                except (ValueError, jsonschema.ValidationError):
                    row["valid"] = False
            rows.append(row)
    return rows


def parallel(client, model: str) -> list[dict]:
    rows = []
    for q in TWO_CALLS:
        for mode in ("required", "auto"):
            for on in (True, False):
                rows.append({**ask(client, model, q, max_tokens=128, tool_choice=mode, parallel_tool_calls=on),
                             "mode": mode, "parallel": on})
    return rows


# name, description, regex, Lark grammar, questions
GRAMMARS = [
    ("forecast", "The sky's state tomorrow.", r"sunny|rainy|cloudy", 'start: "sunny" | "rainy" | "cloudy"',
     ["Will it rain in Paris tomorrow?", "What will the sky be like in Oslo?", "Is it going to be sunny in Madrid?",
      "Give me the forecast for Tokyo.", "Should I bring an umbrella in London tomorrow?"]),
    ("event_date", "Record the date of an event, as YYYY-MM-DD.",
     r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
     'start: YEAR "-" MONTH "-" DAY\nYEAR: /[0-9]{4}/\nMONTH: /0[1-9]|1[0-2]/\nDAY: /0[1-9]|[12][0-9]|3[01]/',
     ["Christmas 2026 is on which date?", "Record New Year's Day 2027.", "Schedule the meeting for March 3rd, 2027.",
      "Set a reminder for the 14th of July 2026.", "Book the flight on December 5, 2026."]),
    ("calculate", "Evaluate an arithmetic expression.", r"[0-9]+( ?[-+*/] ?[0-9]+)*",
     'start: expr\nexpr: term (OP term)*\nterm: NUMBER | "(" expr ")"\nOP: "+" | "-" | "*" | "/"\n'
     '%import common.NUMBER\n%ignore " "',
     ["What is 12 plus 30?", "Compute 4 + 5 times 3.", "How much is 100 minus 7?", "Add 2, 3 and 4.",
      "What is 8 divided by 2?"]),
    ("set_options", "Set configuration options, as key=value pairs separated by commas.",
     r"[a-z_]+=[A-Za-z0-9]+(,[a-z_]+=[A-Za-z0-9]+)*",
     'start: pair ("," pair)*\npair: KEY "=" VALUE\nKEY: /[a-z_]+/\nVALUE: /[A-Za-z0-9]+/',
     ["Set the city to Paris and the unit to C.", "Turn the volume to 7.", "Set mode to dark and font size to 12.",
      "Change the language to en.", "Set retries to 3 and timeout to 30."]),
]


def custom_tools(client, model: str) -> list[dict]:
    rows = []
    for name, description, regex, lark_text, questions in GRAMMARS:
        for syntax, definition in (("regex", regex), ("lark", lark_text)):
            for given in (True, False):
                fmt = {"type": "grammar", "grammar": {"syntax": syntax, "definition": definition}} if given else {
                    "type": "text"}
                tool = {"type": "custom", "custom": {"name": name, "description": description, "format": fmt}}
                for q in questions:
                    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": q}],
                                                       tools=[tool], tool_choice="required", temperature=0,
                                                       max_tokens=64)
                    inputs = [c.custom.input for c in r.choices[0].message.tool_calls or () if c.type == "custom"]
                    rows.append({"question": q, "tool": name, "syntax": syntax, "grammar": given, "inputs": inputs,
                                 "follow": [follows(syntax, definition, i) for i in inputs],
                                 "finish": r.choices[0].finish_reason})
    return rows


def report(out: dict) -> str:
    lines = []
    if "allowed" in out:
        lines += _allowed_report(out)
    if "formats" in out:
        lines += _formats_report(out)
    if "parallel" in out:
        lines += _parallel_report(out)
    if "custom" in out:
        lines += ["", "custom tools (`required`, 20 questions per syntax):",
                  "| syntax | format | answers | with a call | cut by max_tokens | finished | finished inputs that "
                  "follow the grammar |", "|---|---|---|---|---|---|---|"]
        for syntax in ("regex", "lark"):
            for given in (True, False):
                rows = [r for r in out["custom"] if r["syntax"] == syntax and r["grammar"] == given]
                done = [r for r in rows if r["inputs"] and r["finish"] != "length"]
                lines.append(f"| {syntax} | {'grammar' if given else 'text'} | {len(rows)} | "
                             f"{sum(bool(r['inputs']) for r in rows)} | {sum(r['finish'] == 'length' for r in rows)} | "
                             f"{len(done)} | {sum(all(r['follow']) for r in done)} |")
    return "\n".join(lines)


def _allowed_report(out: dict) -> list[str]:
    lines = ["allowed_tools (20 questions, only the other tool allowed):",
             "| mode | answers | with calls | calls outside the set |", "|---|---|---|---|"]
    for mode in ("required", "auto"):
        rows = [r for r in out["allowed"] if r["mode"] == mode]
        lines.append(f"| {mode} | {len(rows)} | {sum(bool(r['calls']) for r in rows)} | "
                     f"{sum(any(c not in r['allowed'] for c in r['calls']) for r in rows)} |")
    return lines


def _formats_report(out: dict) -> list[str]:
    lines = ["", "response_format beside tools (auto):",
              "| questions | format | answers | with calls | final answers | finals that validate | cut |",
              "|---|---|---|---|---|---|---|"]
    for needs in (True, False):
        for fmt in (True, False):
            rows = [r for r in out["formats"] if r["needs"] == needs and r["format"] == fmt]
            finals = [r for r in rows if not r["calls"] and r["finish"] == "stop"]
            valid = str(sum(r.get("valid", False) for r in finals)) if fmt else "-"
            lines.append(f"| {'need a tool' if needs else 'need none'} | {'json_schema' if fmt else 'none'} | "
                         f"{len(rows)} | {sum(bool(r['calls']) for r in rows)} | {len(finals)} | {valid} | "
                         f"{sum(r['finish'] == 'length' and not r['calls'] for r in rows)} |")
    return lines


def _parallel_report(out: dict) -> list[str]:
    lines = ["", "parallel_tool_calls (20 questions that ask for two calls):",
              "| mode | parallel | answers | with calls | with 2+ calls |", "|---|---|---|---|---|"]
    for mode in ("required", "auto"):
        for on in (True, False):
            rows = [r for r in out["parallel"] if r["mode"] == mode and r["parallel"] == on]
            lines.append(f"| {mode} | {'on' if on else 'off'} | {len(rows)} | {sum(bool(r['calls']) for r in rows)} | "
                         f"{sum(len(r['calls']) >= 2 for r in rows)} |")
    return lines


PARTS = {"allowed": allowed, "formats": formats, "parallel": parallel, "custom": custom_tools}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=None)
    p.add_argument("--report", default=None, help="print the tables of answers saved with --json, and stop")
    p.add_argument("--model", default=None)
    p.add_argument("--json", default=None, help="save every answer here")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    args = p.parse_args()
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    import openai

    client = openai.OpenAI(base_url=args.base_url, api_key="none", timeout=600)
    model = args.model or client.models.list().data[0].id
    out = {part: PARTS[part](client, model) for part in args.parts.split(",")}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(report(out))


if __name__ == "__main__":
    main()
