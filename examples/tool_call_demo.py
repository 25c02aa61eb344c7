"""Ask a running toolbridge server for a tool call with the official openai client.

    python -m llamacpp_ext --port 8000 &            # or: toolbridge-llamacpp --port 8000
    python examples/tool_call_demo.py [BASE_URL]     # default: $OPENAI_BASE_URL or http://127.0.0.1:8000/v1

Sends a weather tool with tool_choice "required" and prints the call, streamed and not.
"""
from __future__ import annotations

import json
import os
import sys

from openai import OpenAI

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}


def main() -> None:
    base_url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]

    r = client.chat.completions.create(model="default", messages=messages, tools=[WEATHER],
                                       tool_choice="required", max_tokens=80, temperature=0)
    choice = r.choices[0]
    print("finish_reason:", choice.finish_reason)
    for call in choice.message.tool_calls or []:
        print(f"tool call {call.id}: {call.function.name}({call.function.arguments})")

    print("streamed:", end=" ", flush=True)
    for chunk in client.chat.completions.create(model="default", messages=messages, tools=[WEATHER],
                                                tool_choice="required", max_tokens=80, temperature=0, stream=True):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                if tc.function.name:
                    print(f"{tc.function.name}(", end="", flush=True)
                print(tc.function.arguments or "", end="", flush=True)
            if c.finish_reason:
                print(f")  [{c.finish_reason}]")
    if choice.message.tool_calls:
        json.loads(choice.message.tool_calls[0].function.arguments)  # the arguments are JSON


if __name__ == "__main__":
    main()
