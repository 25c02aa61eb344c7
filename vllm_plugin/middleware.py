"""`--middleware vllm_plugin.middleware.RequestCheck`: the request check in front of vLLM's chat,
Responses and Messages routes, so that the bad bodies vLLM's own request handling fails (a body
that is not UTF-8 answers a non-OpenAI error; a named tool_choice next to a tool without `function`
is a 500 in vLLM's request validator) answer 400 in the API's own error shape, as every other bad
tool request does. The parser works without it; it only changes those answers. `RequestGuard` is
the name it had before, kept for existing command lines."""
from toolbridge.serving.asgi import RequestCheck

RequestGuard = RequestCheck

__all__ = ["RequestCheck", "RequestGuard"]
