"""Whether a request's user turns share any word with its tools: a call-free answer is likely
where they share none.

A tool-trained model asked something no tool serves still calls one, and its first token does not
tell these questions apart; the words do, on BFCL's live categories (docs/steering.md). With the
`unrelated` word check (toolbridge.steer.policy) the start bias drops there: a bias, not a ban.

The same words tell which tools a question asks for: those it names by a word that no other tool
of the set is described by (`asked_for`); the `asked` word check moves the next-call decision by
them (toolbridge.steer.steering).

Only words of three or more Latin letters count, less a short list of English function words;
a request with no such word (another script, only numbers) is never called unrelated. Tool names
are split at `_`, `.`, `-` and camelCase humps.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from ..tools import Tool

_WORD = re.compile(r"[a-z]{3,}")
_HUMP = re.compile(r"([a-z])([A-Z])")
STEM = 5
STOPWORDS = frozenset(
    "the and for with are can you this that what how please from does want would like need some any all your our "
    "about which when where who there".split()
    # verbs that ask for something without saying what: a question and a tool that share only one of them
    # ("retrieve") share no subject; nor do they name a tool (`asked_for`: "list" is a word of `list_servers`'s
    # name, not a request for it). `find` stays: it names tools (`FindEvents`). The cases and what the list
    # moved: docs/measurements.md.
    + "retrieve retrieves retrieved retrieving retrieval get gets getting provide provides provided providing show "
      "shows give gives list lists fetch fetches fetching".split())


def words(text: str) -> frozenset[str]:
    """The content words of `text`: lower-cased runs of three or more Latin letters, camelCase
    split, function words left out, each cut to its first five letters (`movie` meets `Movies`,
    `multiplication` meets `multiply`)."""
    return frozenset(w[:STEM] for w in _WORD.findall(_HUMP.sub(r"\1 \2", text).lower()) if w not in STOPWORDS)


def tool_words(tool: Tool) -> frozenset[str]:
    """The words a tool is described by: its name, description, argument names and their
    descriptions and enum values, at any depth."""
    return words(" ".join([tool.name, tool.description, *_schema_texts(tool.parameters)]))


def user_words(messages: Sequence[Any]) -> tuple[frozenset[str], frozenset[str]]:
    """The content words of the user turns of `messages`: of all of them, and of the latest (those
    after the last turn that is neither a user nor a system turn: the ones an answer is to). Each
    text is read once."""
    messages = list(messages or ())
    start = _latest(messages)
    latest = words(" ".join(_user_texts(messages[start:])))
    return words(" ".join(_user_texts(messages[:start]))) | latest, latest


def unrelated(said: frozenset[str], tools: Iterable[frozenset[str]]) -> bool:
    """Whether the user's words (`said`: `user_words`) hold content words and none of them is
    among any tool's words (`tools`: each tool's `tool_words`)."""
    return bool(said) and not any(said & t for t in tools)


def own_words(tools: Sequence[frozenset[str]]) -> tuple[frozenset[str], ...]:
    """Each tool's words that no other tool of the set has (`tools`: each tool's `tool_words`)."""
    seen = Counter(word for w in tools for word in w)
    return tuple(frozenset(word for word in w if seen[word] == 1) for w in tools)


def asked_for(said: frozenset[str], names: Sequence[str], own: Sequence[frozenset[str]]) -> frozenset[str]:
    """The tools the user asks for by name: those with an own word (`own`: `own_words`, in the
    order of `names`) among the words of the turns the answer is to (`said`: the latest of
    `user_words`). A single tool has no rival, so none is asked for by name."""
    if len(names) < 2:
        return frozenset()
    return frozenset(name for name, w in zip(names, own) if said & w)


def _latest(messages: list[Any]) -> int:
    """Where the latest user turns start: after the last message that is neither a user nor a
    system turn."""
    for at in range(len(messages) - 1, -1, -1):
        m = messages[at]
        if not (isinstance(m, Mapping) and m.get("role") in ("user", "system")):
            return at + 1
    return 0


def _user_texts(messages: Sequence[Any]) -> Iterable[str]:
    for m in messages or ():
        if isinstance(m, Mapping) and m.get("role") == "user":
            yield from content_texts(m)


def content_texts(message: Mapping[str, Any]) -> Iterable[str]:
    """The texts of a message's content: a string, or the text parts of a list."""
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        yield from (p["text"] for p in content
                    if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str))


def _schema_texts(schema: Any) -> Iterable[str]:
    """Property names, descriptions and string enum values anywhere in a JSON schema."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, Mapping):
                yield from (k for k in value if isinstance(k, str))
            if key in ("description", "title") and isinstance(value, str):
                yield value
            elif key == "enum" and isinstance(value, list):
                yield from (v for v in value if isinstance(v, str))
            else:
                yield from _schema_texts(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_texts(item)
