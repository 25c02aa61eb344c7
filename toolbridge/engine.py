"""What an engine adapter needs of the core, in one module: the generation side of both adapters
(llamacpp_ext, vllm_plugin) imports the core through it, so the core's contract with an engine is read
here, and a name moving inside the core is mended here.

An adapter makes a request's plan once (`check` and `plan`, or `prepare`: a `ToolRequest`, 400s as
`BadRequest`; the options as the server started, `check_environment`) and translates it into its
engine's terms: the prompt (the stock template `wrap`ped and `compile_template`d, the plan's
`tools_instruction`), the stops, the triggers and call frames its grammar or structural tag is made of
(`Entry`, `entries`, `Frame`, `frames`, `separator`, `constrain` for the fallback; a pattern as GBNF,
`pattern_to_gbnf`, and a custom tool's arguments, `input_grammar`), and the answer's
per-token rules over the engine's `Vocabulary`: one `AnswerRules` per answer (the thinking, the steering,
the call guard, the end after calls), made by the plan (`ToolRequest.rules`, or packed for a logits
processor by `ToolRequest.logit_args` and unpacked by `AnswerRules.unpack`), which the engine's loop feeds
the tokens it generated and asks for the next token's changes, written into its logits with `write`. The
thinking's prompt side is `opened_by` and `with_budget`. The answer is read back by the plan's parser,
behind `ThinkingSplit`, into events (`collect`, or `delta` for a stream, `message` for a whole answer;
`text_only` where the answer is plain text). The server side (request checks, API shapes) is
toolbridge.serving and toolbridge.apis.
"""
from .constrain.grammar import MAX_WHITESPACE, Entry, Frame, constrain, entries, frames, separator
from .constrain.pattern import Unsupported, pattern_to_gbnf
from .custom import input_grammar
from .deltas import delta, message
from .dialects import Dialect
from .errors import BadRequest
from .events import CallArgs, CallEnd, CallStart, Content, Event, Reasoning, ToolCall
from .jsondata import json_escape, json_string, plain_data
from .memo import Memo
from .options import KEYS, check_environment, resolve
from .parsing.answer import collect
from .parsing.stream import StreamParser
from .parsing.thinking import ANSWER, PlainText, ThinkingSplit
from .prompt.chat_templates import (DIALECT_ENV, FAMILIES, read_stock, renders_tools, served_dialect, template_path,
                                    wrap, writes_calls)
from .prompt.render import compile_template, tools_instruction
from .request import (EITHER, LAZY, PLAIN, STRICT, USER, CheckedRequest, ToolRequest, ToolSet, check, plan, prepare,
                      text_only)
from .schema import engine_schema, resolve_ref
from .steer.args import ARG
from .steer.callguard import POINTS
from .steer.logits import Edit, write
from .steer.rules import AnswerRules
from .steer.thinking import PROMPT_TAIL, ThinkingEnd
from .steer.vocab import Vocabulary, hf_vocabulary
from .thinking import BUDGET_OPTION, DEFAULT_THINKING, EFFORT_BUDGETS, opened_by, with_budget
from .tools import EMPTY_PARAMETERS, Tool, ToolChoice, allowed_choice

__all__ = [
    # the request's plan
    "BadRequest", "CheckedRequest", "EITHER", "LAZY", "PLAIN", "STRICT", "USER", "ToolRequest", "ToolSet", "check",
    "plan", "prepare", "KEYS", "check_environment", "resolve", "Dialect", "EMPTY_PARAMETERS", "Tool", "ToolChoice", "plain_data",
    "allowed_choice",
    # the prompt
    "DIALECT_ENV", "FAMILIES", "compile_template", "read_stock", "renders_tools", "served_dialect", "template_path",
    "tools_instruction", "wrap", "writes_calls",
    # constraints
    "Entry", "Frame", "MAX_WHITESPACE", "constrain", "engine_schema", "entries", "frames", "json_escape",
    "json_string", "pattern_to_gbnf", "resolve_ref", "separator", "Unsupported", "input_grammar",
    # steering
    "ARG", "AnswerRules", "Edit", "POINTS", "Vocabulary", "hf_vocabulary", "write",
    # thinking
    "BUDGET_OPTION", "DEFAULT_THINKING", "EFFORT_BUDGETS", "PROMPT_TAIL", "ThinkingEnd", "opened_by", "with_budget",
    # the answer
    "ANSWER", "CallArgs", "CallEnd", "CallStart", "Content", "Event", "PlainText", "Reasoning", "ThinkingSplit",
    "StreamParser", "ToolCall", "collect", "delta", "message", "text_only",
    # caches
    "Memo",
]
