"""toolbridge's per-request options, read alike by both engines.

From the request's chat-template kwargs (vLLM `chat_template_kwargs`; llama.cpp the model's
`chat_template_kwargs`), else the environment, else the defaults:

- `tb_dialect` / TOOLBRIDGE_DIALECT: the call format prompts ask for (grammars follow it;
  the parser reads every dialect anyway).
- `tb_call_bias` / TOOLBRIDGE_CALL_BIAS: for `auto`, how many nats the call marker's first
  token is favoured at the answer's first position (toolbridge.steer); 0 turns it off.
- `tb_example`, `tb_system_role`: read by the template prelude (toolbridge.render);
  `tb_template`: the llama.cpp adapter's choice of stock template.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from .dialects import Dialect, get_dialect

DEFAULT_CALL_BIAS = 5.0
KEYS = ("tb_template", "tb_dialect", "tb_example", "tb_system_role", "tb_call_bias")


@dataclass(frozen=True)
class Options:
    dialect: Dialect
    call_bias: float


def resolve(kwargs: Mapping[str, Any] | None = None, env: Mapping[str, str] = os.environ) -> Options:
    """Options from template kwargs, then environment, then defaults (ValueError when unknown)."""
    kwargs = kwargs or {}
    dialect = get_dialect(kwargs.get("tb_dialect") or env.get("TOOLBRIDGE_DIALECT") or None)
    bias = kwargs.get("tb_call_bias", env.get("TOOLBRIDGE_CALL_BIAS", DEFAULT_CALL_BIAS))
    try:
        bias = float(bias)
    except (TypeError, ValueError):
        raise ValueError(f"tb_call_bias must be a number, not {bias!r}") from None
    return Options(dialect, bias)
