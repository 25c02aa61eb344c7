"""The request check in front of vLLM's chat, Responses, Messages and count_tokens routes. The plugin
installs it in every app vLLM's launcher builds (`install`); `--middleware
vllm_plugin.middleware.RequestCheck` names it by hand, and it is then not added a second time. As the
app is built, the served chat template is checked against the settings too (`check_template`).

- Bad bodies vLLM's own request handling fails (a body that is not UTF-8 answers a non-OpenAI error;
  a named tool_choice next to a tool without `function` is a 500 in vLLM's request validator) or
  takes (its request models read `"48"` as 48 and `"yes"` as true; toolbridge.apis.validate checks
  each agent-API body against its API's schema, strictly) answer 400 in the API's own error shape.
- Every answer of those routes leaves in the API's shape (toolbridge.serving.shape): errors, a
  Responses stream cut at max_output_tokens, an exception after a stream started.
- On the chat route, a first call whose values the model made up is answered again in text
  (toolbridge.serving.again; the `grounded` word check of `tb_word_checks`). The check makes the
  request's plan from the body, as the parser does from vLLM's request object; the second request
  carries `AGAIN` in its `vllm_xargs`, which the parser reads and takes out (a client's own is taken
  out here). So is an answer the logits processor ended inside a call start the bias chose (the
  model went on with something else: toolbridge.steer.logits.start_hold), without the start bias.

The parser works without it; it only changes those answers."""
from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from toolbridge.engine import (DIALECT_ENV, EFFORT_BUDGETS, BadRequest, Memo, ToolRequest, allowed_choice,
                               check_environment, read_stock, renders_tools, served_dialect)
from toolbridge.apis import responses, validate
from toolbridge.serving import again, cut
from toolbridge.serving.asgi import CHAT_PATH, MESSAGES_PATH, CheckMiddleware, Passed
from toolbridge.serving.shape import CHAT, MESSAGES, RESPONSES
from vllm_plugin.constraint import planned, user_constraint

log = logging.getLogger(__name__)

AGAIN = "toolbridge_again"  # the `vllm_xargs` key that marks the second answer of a request, and how it is asked:
IN_TEXT, UNBIASED = 1, 2  # with every call opening held back; without the start bias toward calls
WATCHED = 3  # the first answer, whose start the check watches: one the bias chose and the model left ends there
ALLOWED = "toolbridge_allowed"  # the `vllm_xargs` key that carries an allowed_tools choice's names (hand_on)
PLAN = "toolbridge_plan"  # the `vllm_xargs` key under which the check hands its plan on to the parser (hand_on)
OWN_KEYS = (AGAIN, ALLOWED, PLAN)  # a client's own are taken out
USAGE_ASKED = "toolbridge_usage_asked"  # scope state: the client asked for a streamed chat answer's usage


class RequestCheck(CheckMiddleware):
    """The request check; `tool_trained`: the served model's own template renders tools (the
    plan's defaults differ for it, toolbridge.options.PROFILES), as the parser finds from the tokenizer."""

    def __init__(self, app: Any, tool_trained: bool = False):
        super().__init__(app)
        self.tool_trained = tool_trained

    def check(self, data: dict) -> bool | Passed:
        """A chat body: its whole plan, made here once (a 400 where the plan refuses it) and handed on to
        the parser (`hand_on`); the check's own `vllm_xargs` keys a client sent taken out."""
        xargs = data.get("vllm_xargs")
        if isinstance(xargs, dict) and any(k in xargs for k in OWN_KEYS):
            data["vllm_xargs"] = {k: v for k, v in xargs.items() if k not in OWN_KEYS}
        added = hand_on(data, body_plan(data, self.tool_trained))
        if data.get("tools") and data.get("stream") and cut.limit_of(data):  # its usage says whether it was cut
            return Passed({USAGE_ASKED: cut.asks_usage(data)})  # (which may add to the body: written again whole)
        return Passed(added=added) if added is not None else True

    def route(self, path: str) -> tuple[str, Callable[[dict], bool | Passed], Callable[[BadRequest], dict]] | None:
        found = super().route(path)
        if found is not None and found[0] == RESPONSES:
            return RESPONSES, self.check_responses, found[2]
        return found

    def check_responses(self, data: dict) -> bool | Passed:
        """A Responses body: checked against the API's schema, then planned whole once from its chat request
        (toolbridge.serving.asgi.check_responses, with the request's own options) and handed on."""
        validate.responses_body(data)
        added = hand_on(data, body_plan(responses.chat_request(data), self.tool_trained))
        if responses.grammars_as_text(data.get("tools")):  # vLLM's route refuses a grammar; the plan holds it
            added = None
        return Passed(added=added) if added is not None else True

    async def answer(self, scope: dict, body: bytes, receive: Callable, send: Callable, data: dict) -> None:
        path = scope.get("path", "")
        chat = path.endswith(CHAT_PATH)
        api = CHAT if chat else MESSAGES if path.endswith(MESSAGES_PATH) else None
        limit = cut.limit_of(data) if api and data.get("tools") else None
        if limit:  # a call cut by max_tokens is reported cut, as vLLM does not under `auto`
            send = cut.CutAnswer(send, limit, bool(data.get("stream")),
                                 scope.get("state", {}).get(USAGE_ASKED, True), api).send
        plan = self.plan(data) if chat else None
        if (again.checked(plan) or again.start_checked(plan)) and data.get("n") in (None, 1):
            first = _marked(data, WATCHED) if again.start_checked(plan) else body
            await again.answer(self.app, scope, receive, send,
                               again.Attempts(first, _marked(data, IN_TEXT), plan, bool(data.get("stream")),
                                              _marked(data, UNBIASED)))
        else:
            await super().answer(scope, body, receive, send, data)

    def plan(self, data: dict) -> ToolRequest | None:
        """The chat request's plan, as the check made it (None without tools)."""
        return handed(data.get("vllm_xargs")) if data.get("tools") else None


def body_plan(body: dict, tool_trained: bool) -> ToolRequest:
    """A chat body's whole plan, as the parser makes it from vLLM's request object (toolbridge_parser._fields):
    its tool fields, options, response format, thinking budget and own constraint (BadRequest for a 400)."""
    effort, budget = body.get("reasoning_effort"), body.get("thinking_token_budget")
    kw = dict({k: body.get(k) for k in ("tools", "functions", "function_call", "parallel_tool_calls", "stop",
                                       "response_format")},
              tool_choice=choice_of(body.get("tool_choice"), body.get("vllm_xargs")),
              messages=body.get("messages") if isinstance(body.get("messages"), list) else [],
              template_kwargs=body.get("chat_template_kwargs"), tool_trained=tool_trained,
              thinking_budget=budget if type(budget) is int else None,  # vLLM checks a wrongly typed one itself
              reasoning_effort=effort if isinstance(effort, str) and effort in EFFORT_BUDGETS else None)
    return planned(kw, user_constraint(_fields(body)))


# The plans the check made, by the key it put in their bodies' `vllm_xargs` (PLAN): the parser, in the
# same process, takes the plan instead of making it again (`handed`); a process that did not check the
# body (vLLM's /derender in another process) plans it itself.
_HANDED: Memo[ToolRequest] = Memo(1024)


def hand_on(data: dict, req: ToolRequest) -> dict | None:
    """Hand `req` on to the parser with the body: under a new key in `vllm_xargs` (PLAN). A body whose
    tool_choice is `allowed_tools` is rewritten for vLLM's request models, which do not take it: the
    choice's mode in its place, and the names it allows in `vllm_xargs` (ALLOWED), where a parser that
    plans the request itself reads them back (`choice_of`). Returns the fields added to the body where
    that is all that changed in it (asgi.Passed.added), else None (the body is written again whole)."""
    sent = data.get("vllm_xargs")
    key = uuid.uuid4().hex
    _HANDED.get(key, lambda: req)
    xargs = {**(sent if isinstance(sent, dict) else {}), PLAN: key}
    if req.choice.allowed is not None:
        data["tool_choice"] = req.choice.mode
        xargs[ALLOWED] = list(req.choice.allowed)
    data["vllm_xargs"] = xargs
    return {"vllm_xargs": xargs} if sent is None and req.choice.allowed is None else None


def handed(xargs: Any) -> ToolRequest | None:
    """The plan the check handed on with a request whose `vllm_xargs` are `xargs`, if this process made it."""
    key = xargs.get(PLAN) if isinstance(xargs, dict) else None
    return _HANDED.find(key) if isinstance(key, str) else None


def choice_of(tool_choice: Any, xargs: Any) -> Any:
    """A request's tool_choice as the client sent it: `allowed_tools` again where the check carried it
    in `vllm_xargs` (hand_on)."""
    names = xargs.get(ALLOWED) if isinstance(xargs, dict) else None
    return allowed_choice(tool_choice, names) if isinstance(names, list) else tool_choice


def _fields(data: dict) -> SimpleNamespace:
    """The body's structured outputs as vLLM's request object holds them (attributes)."""
    so = data.get("structured_outputs")
    return SimpleNamespace(structured_outputs=SimpleNamespace(**so) if isinstance(so, dict) else so)


def _marked(data: dict, how: int) -> bytes:
    """The body that asks the route for the second answer, `how` (IN_TEXT, UNBIASED)."""
    xargs = data.get("vllm_xargs") if isinstance(data.get("vllm_xargs"), dict) else {}
    return json.dumps({**data, "vllm_xargs": {**xargs, AGAIN: how}}).encode("utf-8")




def install() -> bool:
    """Add RequestCheck to every app vLLM's launcher builds (the API server, each of several API
    processes, the render server), after the middleware vLLM and `--middleware` add, unless one is
    there already. False where this vLLM builds its apps elsewhere (warned: pass `--middleware`)."""
    try:
        from vllm.entrypoints.launchers import app as launcher
        builder = launcher.init_entrypoints_middleware
    except (ImportError, AttributeError):
        log.warning("toolbridge: this vLLM builds its app where the plugin cannot add its request check; "
                    "pass --middleware vllm_plugin.middleware.RequestCheck for errors in each API's shape")
        return False
    if getattr(builder, "adds_request_check", False):
        return True

    def init_entrypoints_middleware(args: Any, app: Any, *rest: Any, **kw: Any) -> None:
        check_template(args)
        builder(args, app, *rest, **kw)
        trained = tool_trained(args)
        named = [m for m in app.user_middleware if isinstance(m.cls, type) and issubclass(m.cls, CheckMiddleware)]
        for m in named:  # `--middleware` named it: vLLM built it without what the plugin knows
            if issubclass(m.cls, RequestCheck):
                m.kwargs["tool_trained"] = trained
        if not named:
            app.add_middleware(RequestCheck, tool_trained=trained)

    init_entrypoints_middleware.adds_request_check = True  # type: ignore[attr-defined]
    launcher.init_entrypoints_middleware = init_entrypoints_middleware
    return True


def check_template(args: Any) -> None:
    """The template vLLM serves (`--chat-template`, else the tokenizer's or model's directory) against
    TOOLBRIDGE_DIALECT: a template toolbridge wrapped records its dialect, which becomes this
    process's default where the variable is unset (and the options every request starts from are
    made again with it: the plugin read the environment when it was imported, before this); a variable
    that names another stops the start (ValueError, toolbridge.prompt.chat_templates.served_dialect)."""
    made = served_dialect(_served_template(args))
    if made and DIALECT_ENV not in os.environ:
        os.environ[DIALECT_ENV] = made
        check_environment()
        log.info("toolbridge: the chat template was wrapped for the %r dialect; parsing and constraining it", made)


def tool_trained(args: Any) -> bool:
    """Whether the served model's own template (its tokenizer's, not `--chat-template`) renders
    tools, as the parser reads it from the tokenizer; False where it is not found on disk."""
    return renders_tools(_model_template(args) or _cached_template(args))


def _cached_template(args: Any) -> str | None:
    """The template of a model named by its Hugging Face id, from the local cache vLLM loaded it to."""
    name = getattr(args, "tokenizer", None) or getattr(args, "model", None)
    if not name:
        return None
    try:
        from huggingface_hub import snapshot_download
        revision = getattr(args, "tokenizer_revision", None) or getattr(args, "revision", None)
        return read_stock(snapshot_download(str(name), revision=revision, local_files_only=True))
    except Exception:  # not an id, not cached, no template: the parser's profile is then unknown here
        return None


def _served_template(args: Any) -> str | None:
    source = getattr(args, "chat_template", None)
    if source:
        return read_stock(source) if _is_file(source) else str(source)
    return _model_template(args)


def _model_template(args: Any) -> str | None:
    for place in (getattr(args, "tokenizer", None), getattr(args, "model", None)):
        if place and _is_dir(place):
            try:
                return read_stock(place)
            except (OSError, ValueError):
                return None
    return None


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except OSError:  # a template given inline may be longer than a path may be
        return False


def _is_dir(text: str) -> bool:
    try:
        return Path(text).is_dir()
    except OSError:
        return False


__all__ = ["ALLOWED", "AGAIN", "IN_TEXT", "UNBIASED", "WATCHED", "PLAN", "RequestCheck", "body_plan", "choice_of", "handed",
           "hand_on", "install", "check_template", "tool_trained"]
