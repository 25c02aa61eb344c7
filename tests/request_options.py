"""A request's own toolbridge options (`chat_template_kwargs`), the same on every server: each option
takes effect for that request alone. Run by the end-to-end modules of both engines."""
from __future__ import annotations

from toolsets import SEARCH, WEATHER

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def answer(client, model: str, options: dict | None, choice: str = "auto") -> tuple[int, str, list]:
    """(prompt tokens, finish_reason, call names) of the answer with these per-request options."""
    extra = {"chat_template_kwargs": options} if options is not None else {}
    r = client.chat.completions.create(model=model, messages=QUESTION, tools=[WEATHER, SEARCH], tool_choice=choice,
                                       max_tokens=80, temperature=0, extra_body=extra)
    calls = [c.function.name for c in r.choices[0].message.tool_calls or ()]
    return r.usage.prompt_tokens, r.choices[0].finish_reason, calls


def check_request_options(client, model: str) -> None:
    """`tb_call_bias` per request moves the answer's start (SmolLM2 answers this question in prose
    by default; a bias of 100 nats makes it a call, -20 keeps it prose); `tb_dialect` per request
    changes the prompt's call format (its length), and the call is still read."""
    _, finish, calls = answer(client, model, {"tb_call_bias": 100})
    assert finish == "tool_calls" and calls == ["get_weather"], (finish, calls)
    _, finish, calls = answer(client, model, {"tb_call_bias": -20})
    assert not calls, calls
    lengths = {}
    for dialect in ("tags", "json", "toolcall"):
        lengths[dialect], finish, calls = answer(client, model, {"tb_dialect": dialect}, "required")
        assert finish == "tool_calls" and calls == ["get_weather"], (dialect, finish, calls)
    assert len(set(lengths.values())) == 3, lengths
