"""Thinking, declared once beside the dialects: the markers a thinking block is written between.

A reasoning model thinks before it answers, between markers (`<think>` ... `</think>` for DeepSeek-R1's
distills and most open reasoning fine-tunes). Its template's generation prompt often opens the block
itself, so the model's own text starts inside it; otherwise the model may write the open marker first.
The parser splits the thinking from the answer (toolbridge.parsing.thinking), and every API returns it
apart from the content.
"""
from __future__ import annotations

from dataclasses import dataclass


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

