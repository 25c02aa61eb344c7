"""The request check in front of vLLM's chat, Responses, Messages and count_tokens routes. The plugin
installs it in every app vLLM's launcher builds (`install`); `--middleware
vllm_plugin.middleware.RequestCheck` names it by hand, and it is then not added a second time.

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
from typing import Any, Callable

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
        builder(args, app, *rest, **kw)
        if not any(isinstance(m.cls, type) and issubclass(m.cls, _Check) for m in app.user_middleware):
            app.add_middleware(RequestCheck)

    init_entrypoints_middleware.adds_request_check = True  # type: ignore[attr-defined]
    launcher.init_entrypoints_middleware = init_entrypoints_middleware
    return True


__all__ = ["RequestCheck", "RequestGuard", "install"]
