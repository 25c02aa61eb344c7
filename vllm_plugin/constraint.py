"""The core's call frames as an xgrammar structural tag (vLLM's `structured_outputs`).

`auto` is lazy (`triggered_tags`: text is free until the dialect's trigger, then one tag per
tool with its schema); `required` and named choices are strict (`tags_with_separator`: the
answer is calls and nothing else). Each tag is checked with xgrammar, the backend vLLM
compiles it with, and the result is kept with the tool set, so a repeated tool set costs a
lookup.
"""
from __future__ import annotations

import json
import logging
from typing import Sequence

from toolbridge.dialects import Dialect
from toolbridge.grammar import MAX_WHITESPACE, constrain, frames, separator
from toolbridge.request import ToolRequest
from toolbridge.tools import Tool, ToolChoice

log = logging.getLogger("toolbridge.vllm")


def render(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice, parallel: bool) -> dict:
    """xgrammar structural tag for calls to these tools."""
    tags = [{"type": "tag", "begin": f.begin,
             "content": {"type": "json_schema", "json_schema": f.schema, "max_whitespace_cnt": MAX_WHITESPACE},
             "end": f.end} for f in frames(tools, dialect, choice)]
    if choice.mode == "auto":
        fmt = {"type": "triggered_tags", "triggers": [dialect.grammar_trigger], "tags": tags,
               "at_least_one": False, "stop_after_first": not parallel}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": separator(dialect),
               "at_least_one": True, "stop_after_first": not parallel or choice.mode == "named"}
    return {"type": "structural_tag", "format": fmt}


def compiles(spec: str) -> bool:
    """Whether xgrammar takes this structural tag (vLLM's backend would otherwise fail the
    request); without xgrammar, let vLLM decide."""
    try:
        import xgrammar
    except ImportError:
        return True
    try:
        xgrammar.Grammar.from_structural_tag(spec)
    except Exception as e:  # xgrammar raises RuntimeError subclasses with the reason
        log.info("toolbridge: structural tag rejected: %s", e)
        return False
    return True


def structural_tag(req: ToolRequest) -> str | None:
    """The checked structural tag (JSON text) for this request's calls, or None when no
    constraint can be built (calls are then parsed unconstrained)."""
    def build(tools: Sequence[Tool], choice: ToolChoice) -> str | None:
        spec = json.dumps(render(tools, req.dialect, choice, req.parallel), ensure_ascii=False)
        return spec if compiles(spec) else None

    return req.toolset.memo(("vllm-structural-tag", req.dialect.name, req.choice, req.parallel),
                            lambda: constrain(req.tools, req.choice, build))
