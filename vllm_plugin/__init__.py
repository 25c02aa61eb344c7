"""vLLM plugin: importing it registers the `toolbridge` tool parser and the `toolbridge` reasoning
parser (thinking in plain text; add `--reasoning-parser toolbridge` for a template that thinks).

    vllm serve MODEL --enable-auto-tool-choice --tool-call-parser toolbridge \
        --tool-parser-plugin vllm_plugin --chat-template $(toolbridge templates path chatml)
"""
from . import reasoning  # noqa: F401  (registers the reasoning parser)
from .toolbridge_parser import NAME, ToolbridgeToolParser, register

__all__ = ["NAME", "ToolbridgeToolParser", "register"]
