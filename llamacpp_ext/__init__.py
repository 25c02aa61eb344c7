"""llama-cpp-python adapter of toolbridge: the `toolbridge` chat handler, its grammars, and
a server entry point (`python -m llamacpp_ext`, `toolbridge-llamacpp`).

Import and call `register()` to make `chat_format="toolbridge"` available in this process.
"""
from __future__ import annotations

HANDLER_NAME = "toolbridge"


def register(name: str = HANDLER_NAME) -> None:
    """Register the handler in llama-cpp-python's (process-wide) registry; idempotent."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    from .handler import toolbridge_chat_handler

    LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, toolbridge_chat_handler,
                                                                          overwrite=True)


__all__ = ["HANDLER_NAME", "register"]
