"""toolbridge: OpenAI tool calls for models whose chat templates have none.

The engine-neutral core: dialects (how calls are written), render (tools and history into
prompts), parse/stream (model text back into calls), grammar (constraints for the engines).
It imports neither vllm nor llama_cpp.
"""
from .dialects import DEFAULT_DIALECT, DIALECTS, Dialect, get_dialect
from .errors import BadRequest
from .parsing.answer import ParseResult, collect, parse
from .prompt.render import render_messages, tools_instruction
from .events import CallArgs, CallEnd, CallStart, Content, Event, ToolCall, new_call_id
from .parsing.stream import StreamParser
from .tools import Tool, ToolChoice, check_tool_results, normalize_tool_choice, normalize_tools

__version__ = "0.1.0"

__all__ = [
    "BadRequest", "CallArgs", "CallEnd", "CallStart", "Content", "DEFAULT_DIALECT", "DIALECTS", "Dialect",
    "Event", "ParseResult", "StreamParser", "Tool", "ToolCall", "ToolChoice", "check_tool_results", "collect", "get_dialect",
    "new_call_id", "normalize_tool_choice", "normalize_tools", "parse", "render_messages", "tools_instruction",
]
