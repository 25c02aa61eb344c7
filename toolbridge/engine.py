"""What an engine adapter needs of the core, in one module: llama.cpp's (llamacpp_ext) generation side
imports the core through it, so the core's contract with an engine is read here, and a name moving
inside the core is mended here.

An adapter makes a request's plan once (`check` and `plan`, or `prepare`: a `ToolRequest`, 400s as
`BadRequest`) and translates it into its engine's terms: the prompt (the stock template `wrap`ped and
`compile_template`d, the plan's `tools_instruction`), the stops, the triggers and call frames its grammar
is made of (`Entry`, `frames`, `separator`, `constrain` for the fallback), the steering and the call
guard over the engine's `Vocabulary` (`Steering`, `CallGuard`, applied to logits with `token_changes`
and `write`), and the thinking (`opened_by`, `with_budget`). The answer is read back by the plan's
parser, behind `ThinkingSplit`, into events (`collect`, or `delta` for a stream, `message` for a whole
answer). The server side (request checks, API shapes) is toolbridge.serving and toolbridge.apis.
"""
from .constrain.grammar import Entry, constrain, frames, separator
from .deltas import delta, message
from .dialects import Dialect
from .errors import BadRequest
from .events import CallEnd, Event, ToolCall
from .jsondata import json_escape, json_string
from .memo import Memo
from .options import KEYS, resolve
from .parsing.answer import collect
from .parsing.thinking import PlainText, ThinkingSplit
from .prompt.chat_templates import FAMILIES, read_stock, renders_tools, template_path, wrap, writes_calls
from .prompt.render import compile_template, tools_instruction
from .request import LAZY, PLAIN, STRICT, CheckedRequest, ToolRequest, ToolSet, check, plan, prepare
from .schema import engine_schema, resolve_ref
from .steer.callguard import CallGuard
from .steer.logits import token_changes, write
from .steer.steering import BAN, Steering
from .steer.vocab import Vocabulary
from .thinking import BUDGET_OPTION, DEFAULT_THINKING, opened_by, with_budget
from .tools import Tool, ToolChoice

__all__ = [
    # the request's plan
    "BadRequest", "CheckedRequest", "LAZY", "PLAIN", "STRICT", "ToolRequest", "ToolSet", "check", "plan", "prepare",
    "KEYS", "resolve", "Dialect", "Tool", "ToolChoice",
    # the prompt
    "FAMILIES", "compile_template", "read_stock", "renders_tools", "template_path", "tools_instruction", "wrap",
    "writes_calls",
    # constraints
    "Entry", "constrain", "engine_schema", "frames", "json_escape", "json_string", "resolve_ref", "separator",
    # steering
    "BAN", "CallGuard", "Steering", "Vocabulary", "token_changes", "write",
    # thinking
    "BUDGET_OPTION", "DEFAULT_THINKING", "opened_by", "with_budget",
    # the answer
    "CallEnd", "Event", "PlainText", "ThinkingSplit", "ToolCall", "collect", "delta", "message",
    # caches
    "Memo",
]
