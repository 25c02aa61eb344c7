"""`--middleware vllm_plugin.middleware.RequestGuard`: the core's request guard in front of
vLLM's chat route, so that the bad bodies vLLM's own request handling fails (a body that is not
UTF-8 answers a non-OpenAI error; a named tool_choice next to a tool without `function` is a
500 in vLLM's request validator) answer 400 with an OpenAI error object, as every other bad
tool request does. The parser works without it; it only changes those answers."""
from toolbridge.guard import RequestGuard

__all__ = ["RequestGuard"]
