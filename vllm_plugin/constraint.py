"""The core's call frames as an xgrammar structural tag (vLLM's `structured_outputs`).

`auto` is lazy (`triggered_tags`: text is free until the dialect's trigger, then one tag per
tool with its schema); `required` and named choices are strict (`tags_with_separator`: the
answer is calls and nothing else). A tag is checked with xgrammar, the backend vLLM compiles
it with, once per tool set (the result is kept with the set): in slices of tools on parallel
threads (xgrammar converts without holding the GIL), which is faster than one pass on a large new
tool set; a slice that fails is narrowed down to the tools whose schema fails.

vLLM itself converts the tag once more per request to validate it, on the API server's event
loop; `memoize_validation` remembers the tags that passed, so a repeated tool set does not pay that
again (both figures: docs/measurements.md, "Code figures").
"""
from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from toolbridge.engine import (MAX_WHITESPACE, PLAIN, USER, BadRequest, Dialect, Frame, Memo, Tool, ToolChoice,
                               ToolRequest, constrain, entries, frames, input_grammar, plain_data,
                               prepare, separator)

log = logging.getLogger("toolbridge.vllm")

WORKERS = max(2, min(8, os.cpu_count() or 2))
MIN_SLICE = 16  # fewer tools than this are checked in one pass
_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="toolbridge-xgrammar")


def _tag(f: Frame) -> dict:
    """One call's tag: its arguments held to its schema, or a custom tool's input to its grammar (toolbridge.custom)."""
    grammar = input_grammar(f.schema)
    content = {"type": "grammar", "grammar": grammar} if grammar is not None else \
        {"type": "json_schema", "json_schema": f.schema, "max_whitespace_cnt": MAX_WHITESPACE}
    return {"type": "tag", "begin": f.begin, "content": content, "end": f.end}


def render(tools: Sequence[Tool], dialect: Dialect, choice: ToolChoice, parallel: bool, formats: bool = False,
           final: dict | None = None) -> dict:
    """xgrammar structural tag for calls to these tools (auto: armed by every entry's trigger; beside a
    `final` JSON schema: calls, or a final answer that follows it, toolbridge.request.EITHER)."""
    if choice.mode == "auto" and final is None:
        lazy = entries(tools, dialect, formats)
        fmt = {"type": "triggered_tags", "triggers": [e.trigger for e in lazy],
               "tags": [_tag(f) for e in lazy for f in e.frames(choice)],
               "at_least_one": False, "stop_after_first": not parallel}
    else:
        fmt = {"type": "tags_with_separator", "tags": [_tag(f) for f in frames(tools, dialect, choice, formats)],
               "separator": separator(dialect),
               "at_least_one": True, "stop_after_first": not parallel or choice.mode == "named"}
    if final is not None:
        fmt = {"type": "or", "elements": [fmt, {"type": "json_schema", "json_schema": final}]}
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
        def spec(part: Sequence[Tool]) -> str:
            return json.dumps(render(part, req.dialect, choice, req.parallel, req.decisions.formats, req.final),
                              ensure_ascii=False)

        if choice.mode == "named" or len(tools) < 2 * MIN_SLICE:
            whole = spec(tools)
            return whole if compiles(whole) else None
        n = min(WORKERS, len(tools) // MIN_SLICE)
        slices = [spec(tools[i::n]) for i in range(n)]
        return spec(tools) if all(_POOL.map(compiles, slices)) else None

    final = json.dumps(req.final, sort_keys=True) if req.final is not None else None
    return req.toolset.memo(("vllm-structural-tag", req.dialect.name, req.choice, req.parallel, req.decisions.formats,
                             final), lambda: constrain(req.tools, req.choice, build))


# Structured-output constraints other than a structural tag.
OTHER_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object")


def only_tag(so: Any) -> str | None:
    """The structural tag of structured-output params whose sole constraint it is, else None."""
    tag = getattr(so, "structural_tag", None)
    return tag if tag is not None and not any(getattr(so, k, None) for k in OTHER_CONSTRAINTS) else None


def planned(fields: dict, user: bool | str) -> ToolRequest:
    """The plan of a request whose constraint of its own is `user` (user_constraint): toolbridge's own
    plan where that is the structural tag toolbridge sets for it, else the core's (BadRequest for a
    request answered 400). `fields`: prepare's arguments, its `response_format` among them. The parser
    and the request check plan alike."""
    own = _own_plan(fields, user) if isinstance(user, str) else None
    return own if own is not None else prepare(**fields, user_constraint=bool(user))


def _own_plan(fields: dict, tag: str) -> ToolRequest | None:
    """The request's plan when its sole constraint, `tag`, is the structural tag toolbridge itself sets
    for it, carried in: vLLM's render / derender split hands /derender the request as adjust_request
    left it (its response_format taken out, and kept in the tag: `render`'s `final`), and the request
    check reads the body before the parser does."""
    try:
        req = prepare(**{**fields, "response_format": _final_of(tag) or fields.get("response_format")},
                      user_constraint=False)
    except BadRequest:
        return None
    ours = structural_tag(req) if req.mode not in (PLAIN, USER) else None
    return req if ours is not None and _same_json(ours, tag) else None


def _same_json(a: str, b: str) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except (TypeError, ValueError):
        return a == b


def _final_of(tag: str) -> dict | None:
    """The response format a structural tag toolbridge set holds beside its calls (`render`'s `final`)."""
    try:
        fmt = json.loads(tag).get("format") or {}
        return {"type": "json_schema", "json_schema": {"schema": fmt["elements"][1]["json_schema"]}} \
            if fmt.get("type") == "or" else None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None


def response_format(request: Any) -> Any:
    """A request's own response format, as plain data: a chat request's `response_format`, a Responses
    request's `text.format` (toolbridge.request.final_format reads both shapes)."""
    rf = getattr(request, "response_format", None) or getattr(getattr(request, "text", None), "format", None)
    if hasattr(rf, "model_dump"):  # by alias: a Responses format's `schema` field is `schema_` in vLLM's model
        return rf.model_dump(mode="json", by_alias=True, exclude_none=True)
    return plain_data(rf) if rf is not None else None


def user_constraint(request: Any) -> bool | str:
    """Whether a request constrains its answer itself by other means than its response format
    (structured outputs). A structural tag that is the sole constraint is returned: it may be the
    one toolbridge set for this request in another process (the parser recognises it by content)."""
    so = getattr(request, "structured_outputs", None)
    if so is None:
        return False
    return only_tag(so) or any(getattr(so, k, None) for k in (*OTHER_CONSTRAINTS, "structural_tag"))


def memoize_validation() -> None:
    """Install `remembering` over vLLM's structural-tag validation (it converts the tag with
    xgrammar on every request). Idempotent; does nothing on a vLLM without this function."""
    try:
        from vllm.v1.structured_output import backend_xgrammar
    except ImportError:
        return
    original = getattr(backend_xgrammar, "validate_xgrammar_grammar", None)
    if original is None or getattr(original, "toolbridge_memo", False):
        return
    backend_xgrammar.validate_xgrammar_grammar = remembering(original)


def remembering(validate: Callable[[Any], None]) -> Callable[[Any], None]:
    """`validate`, remembering the structural tags it passed (the verdict depends only on the
    tag's text): a request whose sole constraint is such a tag is not validated again; any other
    is validated as before."""
    passed: Memo[bool] = Memo(64)

    def validate_xgrammar_grammar(sampling_params: Any) -> None:
        tag = only_tag(getattr(sampling_params, "structured_outputs", None))
        if tag is not None and tag in passed:
            return
        validate(sampling_params)
        if tag is not None:
            passed.get(tag, lambda: True)

    validate_xgrammar_grammar.toolbridge_memo = True  # type: ignore[attr-defined]
    return validate_xgrammar_grammar
