"""vLLM plugin: importing it registers the `toolbridge` tool parser.

    vllm serve MODEL --enable-auto-tool-choice --tool-call-parser toolbridge \
        --tool-parser-plugin vllm_plugin --chat-template $(toolbridge templates path chatml)
"""
from .toolbridge_parser import NAME, ToolbridgeToolParser, register

__all__ = ["NAME", "ToolbridgeToolParser", "register"]
