"""Whether a call's argument values come from the conversation: a call whose values appear
nowhere in it was made up, not asked for.

Asked something its tools cannot do, or asked without the details a call needs, a tool-trained
model still calls, and fills the arguments in itself: `{"receiver": "user@example.com"}` for
"Transfer some funds for me.", `"123e4567-e89b-..."` for a project the user named otherwise,
`{"city": "New York, NY"}` for "I want to find a train." A required argument's value counts as
invented when it holds a word or a number and none of them is in the conversation (any turn's text,
past calls' arguments, tool results), nor, for a number, in the tool's description of that argument
(`1 for Bangkok`; its bounds aside: "between 1 and 4" allows 4, the user did not ask for it). A value
copied from an example its description quotes counts only with every number in it said: "(e.g.,
'2023-04-01')" copied for "from April 1st" has the question's day and the tool's year. A month's name
grounds its number (`April` meets 4). Values
equal to the argument's default or one of its enum values are the tool's own; a value with no Latin
word and no digit (another script) is not judged, nor is a code of two to four capitals (`USD` for
"US dollars", `JFK`), which a model derives from names rather than copies.
Optional arguments are not judged: a made-up `"count": 5` costs a call less than losing it does.

With the `grounded` word check (toolbridge.steer.policy), an `auto` answer whose first call has a
made-up value is answered again without a call: `python -m llamacpp_ext` in its handler, vLLM in
toolbridge's middleware (toolbridge.serving.again). Figures: docs/steering.md.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping, Sequence

from ..constrain.formats import quoted
from .relevance import content_texts, words

_DIGITS = re.compile(r"\d+")
_NUMBER_WORDS = {w: str(n) for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUMBER_WORDS.update(thirty="30", forty="40", fifty="50", sixty="60", seventy="70", eighty="80", ninety="90",
                     hundred="100", thousand="1000", dozen="12", once="1", twice="2", single="1", double="2",
                     first="1", second="2", third="3", fourth="4", fifth="5")
# A month's name grounds its number: "the 15th of April 2023" gives 2023-04-15 every number.
_NUMBER_WORDS.update({m: str(n) for n, m in enumerate(
    "january february march april may june july august september october november december".split(), 1)})
_WORDISH = re.compile(r"[a-z]+")
_CODE = re.compile(r"[A-Z]{2,4}")
_GROUPED = re.compile(r"(?<=\d)[,_](?=\d{3}(?!\d))")  # thousands separators: 300,000 is 300000
# A schema's bounds say which values are allowed, not which one the user wants.
_BOUND_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                         "minItems", "maxItems", "multipleOf"})
_NUM = r"-?\d[\d,.]*"
_RANGES = re.compile(rf"\b(?:between|from)\s+{_NUM}\s+(?:and|to)\s+{_NUM}|{_NUM}\s*(?:-|–|to)\s*{_NUM}"
                     rf"|\b(?:up to|at least|at most|no more than|no less than|less than|more than|greater than"
                     rf"|fewer than|maximum(?: of)?|minimum(?: of)?|max|min)\s+{_NUM}", re.IGNORECASE)


def marks(text: str) -> frozenset[str]:
    """What a text can ground: its content words (toolbridge.steer.relevance.words, with and without
    camelCase split: `PlayStation` meets `Playstation`) and its numbers (digit runs without leading
    zeros or thousands separators, and number words: `two` meets 2)."""
    lowered = text.lower()
    numbers = {d.lstrip("0") or "0" for d in _DIGITS.findall(_GROUPED.sub("", text))}
    numbers.update(_NUMBER_WORDS[w] for w in _WORDISH.findall(lowered) if w in _NUMBER_WORDS)
    return words(text) | words(lowered) | frozenset(numbers)


def conversation_marks(messages: Sequence[Any]) -> frozenset[str]:
    """The marks of every turn of a conversation: texts, past calls' names and arguments, tool
    results."""
    return marks(" ".join(_texts(messages)))


def invented(arguments: Any, parameters: Mapping[str, Any], seen: frozenset[str]) -> tuple[str, ...]:
    """The names of the required arguments (a call's arguments object; `parameters`: the tool's JSON
    schema) whose values have marks and none of them in `seen` (`conversation_marks`)."""
    if not isinstance(arguments, Mapping) or not isinstance(parameters, Mapping):
        return ()
    properties, required = parameters.get("properties"), parameters.get("required")
    properties = properties if isinstance(properties, Mapping) else {}
    required = set(n for n in required if isinstance(n, str)) if isinstance(required, list) else set()
    out = []
    for name, value in arguments.items():
        spec = properties.get(name)
        spec = spec if isinstance(spec, Mapping) else {}
        if name not in required or _the_tools_own(value, spec):
            continue
        if _copied_example(value, spec, seen):
            out.append(name)
            continue
        leaves = list(_leaves(value))
        texts = frozenset().union(*(marks(v) for v in leaves if isinstance(v, str) and not _CODE.fullmatch(v)))
        numbers = frozenset().union(*(marks(str(v)) for v in leaves
                                      if isinstance(v, (int, float)) and not isinstance(v, bool)))
        if (texts or numbers) and not (texts & seen or numbers & seen or numbers & _schema_numbers(spec)):
            out.append(name)
    return tuple(out)


def _the_tools_own(value: Any, spec: Mapping[str, Any]) -> bool:
    """The value is the argument's default or one of its enum values."""
    if "default" in spec and value == spec["default"]:
        return True
    enum = spec.get("enum")
    return isinstance(enum, list) and any(value == e for e in enum)


def _copied_example(value: Any, spec: Mapping[str, Any], seen: frozenset[str]) -> bool:
    """The value is an example its description quotes, with a number the conversation does not
    hold: '2023-04-01' copied from "(e.g., '2023-04-01')" for "April 1st" shares the day with the
    question, but its year came from the tool."""
    if not isinstance(value, str):
        return False
    examples = {q.strip().casefold() for q in quoted(spec.get("description"))}
    if value.strip().casefold() not in examples:
        return False
    return bool({m for m in marks(value) if m.isdigit()} - seen)


def _schema_numbers(spec: Mapping[str, Any]) -> frozenset[str]:
    """The numbers an argument's schema text holds (a description that maps codes to names), its
    bounds aside (`minimum`, "between 1 and 4": a model picking 4 for "a cab" chose a value)."""
    text = json.dumps({k: v for k, v in spec.items() if k not in _BOUND_KEYS}, ensure_ascii=False, default=str)
    return frozenset(m for m in marks(_RANGES.sub(" ", text)) if m.isdigit())


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _texts(messages: Sequence[Any]) -> Iterable[str]:
    for m in messages or ():
        if not isinstance(m, Mapping):
            continue
        yield from content_texts(m)
        calls = m.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                yield from (v for v in (function.get("name"), function.get("arguments")) if isinstance(v, str))
