"""`--middleware vllm_plugin.middleware.RequestCheck`: the request check in front of vLLM's chat,
Responses, Messages and count_tokens routes, so that the bad bodies vLLM's own request handling fails
(a body that is not UTF-8 answers a non-OpenAI error; a named tool_choice next to a tool without
`function` is a 500 in vLLM's request validator) or takes (its request models read `"48"` as 48 and
`"yes"` as true; toolbridge.apis.validate checks each agent-API body against its API's schema, strictly)
answer 400 in the API's own error shape, as every other bad tool request does; and, on the chat route,
a first call whose values the model made up answered again in text (toolbridge.serving.again;
the `grounded` word check of `tb_word_checks`). The parser works without it; it only changes those answers. `RequestGuard` is the
name it had before, kept for existing command lines."""
from typing import Callable

from toolbridge.serving import again
from toolbridge.serving.asgi import CHAT_PATH, RequestCheck as _Check


class RequestCheck(_Check):
    async def answer(self, scope: dict, body: bytes, receive: Callable, send: Callable, data: dict) -> None:
        if scope.get("path", "").endswith(CHAT_PATH):
            await again.answer(self.app, scope, body, receive, send, data)
        else:
            await super().answer(scope, body, receive, send, data)


RequestGuard = RequestCheck

__all__ = ["RequestCheck", "RequestGuard"]
