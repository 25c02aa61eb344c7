"""Request checks that must answer 400 (not 500, and before a stream starts): the tools, the
tool choice, and tool messages that answer no call (all three are the core's rules). Used by
the server middleware and, for in-process callers, by the handler."""
from __future__ import annotations

from typing import Any, Mapping

from toolbridge import Tool, ToolChoice, check_tool_results, normalize_tool_choice, normalize_tools
from toolbridge.render import plain_data


def legacy_tools(functions: Any, function_call: Any) -> tuple[list | None, Any]:
    """The deprecated `functions` / `function_call` as `tools` / `tool_choice`."""
    tools = [{"type": "function", "function": f} for f in plain_data(functions or [])] or None
    choice = plain_data(function_call)
    if isinstance(choice, Mapping) and "name" in choice:
        choice = {"type": "function", "function": {"name": choice["name"]}}
    return tools, choice


def check_request(body: Mapping[str, Any]) -> tuple[list[Tool], ToolChoice]:
    """The tools and tool choice of a chat request; raises BadRequest."""
    tools_in, choice_in = body.get("tools"), body.get("tool_choice")
    if not tools_in and body.get("functions"):
        tools_in, legacy_choice = legacy_tools(body.get("functions"), body.get("function_call"))
        choice_in = choice_in if choice_in is not None else legacy_choice
    tools = normalize_tools(tools_in)
    choice = normalize_tool_choice(choice_in, tools)
    check_tool_results(body.get("messages") or ())
    return tools, choice
