"""Thinking, declared once beside the dialects: the markers a thinking block is written between, and
whether a rendered prompt leaves one open.

A reasoning model thinks before it answers, between markers (`<think>` ... `</think>` for DeepSeek-R1's
distills and most open reasoning fine-tunes). Its template's generation prompt often opens the block
itself, so the model's own text starts inside it; otherwise the model may write the open marker first.
The parser splits the thinking from the answer (toolbridge.parsing.thinking), and every API returns it
apart from the content.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Thinking:
    name: str
    open: str
    close: str


THINKING: dict[str, Thinking] = {t.name: t for t in (Thinking("think", "<think>", "</think>"),)}
DEFAULT_THINKING = THINKING["think"]


def get_thinking(name: str | Thinking | None) -> Thinking:
    """Look a thinking format up by name (None means the default)."""
    if isinstance(name, Thinking):
        return name
    try:
        return THINKING[name or DEFAULT_THINKING.name]
    except KeyError:
        raise ValueError(f"unknown thinking format {name!r}; known: {', '.join(THINKING)}") from None



def opened_by(prompt: str, thinking: Thinking = DEFAULT_THINKING) -> bool:
    """Whether a rendered prompt ends inside an open thinking block: its template's generation prompt
    opened one (found by rendering, as the tool probe is), so the model's text starts inside it."""
    return prompt.rstrip().endswith(thinking.open)


# The thinking budget an effort asks for, in tokens (OpenAI's Responses `reasoning.effort` and Chat
# `reasoning_effort`): Anthropic's `thinking.budget_tokens` gives tokens itself, and its floor (1024) is
# `low`; each step up is four times the last, `minimal` a quarter of `low`.
EFFORT_BUDGETS = {"minimal": 256, "low": 1024, "medium": 4096, "high": 16384}


def effort_budget(effort: Any) -> int | None:
    """The budget of a reasoning effort (None for none asked); ValueError for an effort OpenAI has no name for."""
    if effort is None:
        return None
    if effort not in EFFORT_BUDGETS:
        raise ValueError(f"reasoning effort must be one of {', '.join(EFFORT_BUDGETS)}, not {effort!r}")
    return EFFORT_BUDGETS[effort]


BUDGET_OPTION = "tb_thinking_budget"


def with_budget(options: Mapping[str, Any] | None, budget: int | None = None,
                effort: Any = None) -> Mapping[str, Any] | None:
    """A request's options with the thinking budget it asks for where they name none themselves: its
    own budget (an engine's field, a Messages `thinking.budget_tokens`), else its reasoning effort's;
    ValueError for an unknown effort."""
    if options and options.get(BUDGET_OPTION) is not None:
        return options
    budget = budget if budget is not None else effort_budget(effort)
    return options if budget is None else {**(options or {}), BUDGET_OPTION: budget}
