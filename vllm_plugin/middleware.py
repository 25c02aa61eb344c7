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
  (toolbridge.serving.again; the `grounded` word check of `tb_word_checks`).

The parser works without it; it only changes those answers. `RequestGuard` is the name it had
before, kept for existing command lines."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable

from toolbridge.prompt.chat_templates import DIALECT_ENV, read_stock, served_dialect
from toolbridge.serving import again
from toolbridge.serving.asgi import CHAT_PATH, RequestCheck as _Check

log = logging.getLogger(__name__)


class RequestCheck(_Check):
    async def answer(self, scope: dict, body: bytes, receive: Callable, send: Callable, data: dict) -> None:
        if scope.get("path", "").endswith(CHAT_PATH):
            await again.answer(self.app, scope, body, receive, send, data)
        else:
            await super().answer(scope, body, receive, send, data)


RequestGuard = RequestCheck


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
        if not any(isinstance(m.cls, type) and issubclass(m.cls, _Check) for m in app.user_middleware):
            app.add_middleware(RequestCheck)

    init_entrypoints_middleware.adds_request_check = True  # type: ignore[attr-defined]
    launcher.init_entrypoints_middleware = init_entrypoints_middleware
    return True


def check_template(args: Any) -> None:
    """The template vLLM serves (`--chat-template`, else the tokenizer's or model's directory) against
    TOOLBRIDGE_DIALECT: a template toolbridge wrapped records its dialect, which becomes this
    process's default where the variable is unset; a variable that names another stops the start
    (ValueError, toolbridge.prompt.chat_templates.served_dialect)."""
    made = served_dialect(_served_template(args))
    if made and DIALECT_ENV not in os.environ:
        os.environ[DIALECT_ENV] = made
        log.info("toolbridge: the chat template was wrapped for the %r dialect; parsing and constraining it", made)


def _served_template(args: Any) -> str | None:
    source = getattr(args, "chat_template", None)
    if source:
        return read_stock(source) if _is_file(source) else str(source)
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


__all__ = ["RequestCheck", "RequestGuard", "install", "check_template"]
