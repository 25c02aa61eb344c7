"""Response templates: each dialect written in the ecosystem's own words, read back by transformers.

`toolbridge templates export` writes a tokenizer directory whose `response_template` transformers
reads in `tokenizer.parse_response` and `transformers serve`. These tests hold it to toolbridge's
parser, the reference, over the corpus of tests/response_corpus.py: every rendering must agree, and
on the recorded answers of real models every disagreement is listed below with its reason (a new one,
or one that went away, fails). Run with `-s` to see the agreement per dialect and every disagreement.
"""
from __future__ import annotations

import json

import pytest

from response_corpus import (CHATML, EDGES, EXPRESSIBLE, KNOWN_DIFFER, PARIS, Output, chatml, check_reasons, compare,
                             conversation, exported, message_reads, recorded, recorded_outputs, renderings, report,
                             tokenizer_model, toolbridge_reads)
from toolsets import TOOLS

from toolbridge.cli import main as cli
from toolbridge.dialects import DIALECTS
from toolbridge.prompt.chat_templates import FAMILIES, thinking_behaviour, wrap
from toolbridge.prompt.render import compile_template
from toolbridge.prompt.response_template import WHY_NOT, NotExpressible, response_template, turn_markers

END = "<|im_end|>"


def transformers_reads(tok):
    """(content, calls) transformers reads with the tokenizer's response template: parse_response on
    the whole text, and its streaming parser fed the deltas, which must agree."""
    def read(out: Output) -> tuple[str, list]:
        whole = message_reads(tok.parse_response(out.text, prefix=out.prompt, tools=out.tools))
        stream = tok.get_response_parser(prefix=out.prompt, tools=out.tools)
        for delta in out.deltas:
            stream.feed(delta)
        streamed = message_reads(stream.finalize()[0])
        return whole if streamed == whole else ("stream and whole differ", [whole, streamed])
    return read


def prompt(tok) -> str:
    return tok.apply_chat_template([{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS,
                                   add_generation_prompt=True, tokenize=False)


def test_react_has_none_and_says_why(tmp_path, capsys):
    """Every dialect has a response template, or a reason it cannot; the export says it."""
    assert set(EXPRESSIBLE) | set(WHY_NOT) == set(DIALECTS) and not set(EXPRESSIBLE) & set(WHY_NOT)
    assert list(WHY_NOT) == ["react"]
    with pytest.raises(NotExpressible, match="Observation"):
        response_template("react", chatml("react"))
    model = tokenizer_model(tmp_path / "model", CHATML)
    assert cli(["templates", "export", str(model), "-o", str(tmp_path / "out"), "--dialect", "react"]) == 1
    assert "react" in capsys.readouterr().err


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dialect", EXPRESSIBLE)
def test_every_packaged_template(family, dialect):
    """Every packaged family in every dialect: transformers loads the template, and the answer's start
    and end are where the family's template puts them."""
    from transformers.utils.chat_parsing.response_templates import load_response_template

    template = wrap(FAMILIES[family].stock, dialect=dialect)
    spec = response_template(dialect, template, bos_token="<s>", eos_token="</s>")
    loaded = load_response_template(spec)
    # a family whose generation prompt opens a thinking block (DeepSeek-R1's) has the thinking field too
    thinks = thinking_behaviour(template).opens
    assert set(loaded.fields) == {"content", "tool_calls", *(["thinking"] if thinks else [])}
    assert loaded.implicit == "content"
    start, ends = turn_markers(template, bos_token="<s>", eos_token="</s>")
    rendered = compile_template(template).render(messages=[{"role": "user", "content": "hi"}], tools=TOOLS,
                                                 add_generation_prompt=True, bos_token="<s>", eos_token="</s>")
    if thinks:
        rendered = rendered.rstrip().removesuffix("<think>")
    assert rendered.rstrip().endswith(start) and spec["start_anchor"] == start
    assert "</s>" in ends


def test_export_writes_a_tokenizer_directory(tmp_path):
    """The directory holds the wrapped template, the response template and the tokenizer; exporting
    it again changes nothing; with the weights linked, it holds the model's other files too."""
    model = tokenizer_model(tmp_path / "model", CHATML)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    out = tmp_path / "out"
    assert cli(["templates", "export", str(model), "-o", str(out), "--dialect", "toolcall", "--link-weights"]) == 0
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["response_template"] == response_template("toolcall", wrap(CHATML, dialect="toolcall"),
                                                             eos_token=END)
    assert (out / "chat_template.jinja").read_text() == wrap(CHATML, dialect="toolcall")
    assert (out / "model.safetensors").is_symlink() and (out / "config.json").resolve() == model / "config.json"
    assert not (out / "tokenizer.json").is_symlink()
    again = tmp_path / "again"
    assert cli(["templates", "export", str(out), "-o", str(again), "--dialect", "toolcall"]) == 0
    assert (again / "chat_template.jinja").read_text() == (out / "chat_template.jinja").read_text()
    assert json.loads((again / "tokenizer_config.json").read_text())["response_template"] == config["response_template"]


@pytest.mark.parametrize("dialect", EXPRESSIBLE)
def test_renderings_read_the_same(tmp_path, dialect):
    """Calls written by the dialect's own format_calls (and answers without calls), with or without the
    turn's end marker, whole and streamed: transformers reads what toolbridge reads."""
    tok = exported(tmp_path, CHATML, dialect)
    outs = list(renderings(dialect, prompt(tok), END))
    tally, differ = compare(outs, transformers_reads(tok))
    print("\n" + report(f"renderings ({dialect})", tally, differ))
    assert not differ
    assert tally[dialect][1] == len(outs) > 100


@pytest.mark.parametrize("edge", sorted(EDGES))
def test_what_only_the_plugin_reads(tmp_path, edge):
    """toolbridge reads one call and no content; transformers, through the tags template, reads what
    response_corpus.EDGES says (or raises)."""
    text, expected, _ = EDGES[edge]
    tok = exported(tmp_path, CHATML, "tags")
    out = Output(edge, "tags", prompt(tok), text, [text], TOOLS)
    assert toolbridge_reads(out)[1] == PARIS
    if expected == "raises":
        with pytest.raises(ValueError):
            tok.parse_response(text, prefix=out.prompt, tools=TOOLS)
    else:
        assert transformers_reads(tok)(out) == expected


@pytest.fixture(scope="module")
def recorded_tokenizers(tmp_path_factory):
    """The exported tokenizer of each recorded model (its own stock template and end tokens) and dialect."""
    data = recorded()
    toks = {}
    for model, info in data["models"].items():
        for dialect in EXPRESSIBLE:
            toks[model, dialect] = exported(tmp_path_factory.mktemp(f"{model}-{dialect}"), info["stock_template"],
                                            dialect, bos_token=info["bos_token"], eos_token=info["eos_token"])
    return toks


def test_recorded_answers(recorded_tokenizers):
    """Real answers of SmolLM2 and Qwen, whole and streamed: transformers reads what toolbridge reads,
    but for the disagreements listed, with their reasons, in
    response_corpus.RECORDED_DIFFER."""
    def render(model, dialect, messages, tools):
        return recorded_tokenizers[model, dialect].apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False)

    outs = recorded_outputs(render)
    by_id = {o.id: o for o in outs}

    def read(out):
        return transformers_reads(recorded_tokenizers[out.id.split(":")[0], out.dialect])(out)

    tally, differ = compare(outs, read)
    print("\n" + report("recorded answers (transformers)", tally, differ))
    assert {d for d, _ in (k.split(":")[1:3] for k in by_id)} == set(EXPRESSIBLE)
    assert sorted(differ) == sorted(KNOWN_DIFFER), {k: differ.get(k) for k in set(differ) ^ set(KNOWN_DIFFER)}
    check_reasons(differ, 'transformers')


@pytest.mark.slow
def test_export_from_a_gguf(tmp_path):
    """A GGUF's own tokenizer and chat template (SmolLM2's): the recorded follow-up answer in each
    dialect reads as its call through the real tokenizer."""
    from transformers import AutoTokenizer

    from servers import smollm2_gguf

    answers = {a["dialect"]: a["whole"] for a in recorded()["answers"]
               if (a["model"], a["question"]) == ("smollm2", "w1")}
    messages, tools = conversation("w1")
    for dialect in ("tags", "json"):
        out = tmp_path / dialect
        assert cli(["templates", "export", smollm2_gguf(), "-o", str(out), "--dialect", dialect]) == 0
        tok = AutoTokenizer.from_pretrained(out)
        assert tok.response_template["start_anchor"] == "<|im_start|>assistant" and tok.eos_token == END
        prefix = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        assert message_reads(tok.parse_response(answers[dialect] + END, prefix=prefix, tools=tools)) == ("", PARIS)


def test_a_template_that_thinks(tmp_path):
    """A stock template whose generation prompt opens a thinking block: the response template has a
    thinking region, and the answer's start is the assistant's header, so the block the prompt opened
    is read as thinking."""
    stock = CHATML.replace("'<|im_start|>assistant\\n'", "'<|im_start|>assistant\\n<think>\\n'")
    tok = exported(tmp_path, stock, "tags")
    assert tok.response_template["start_anchor"] == "<|im_start|>assistant"
    assert tok.response_template["fields"]["thinking"] == {"open": "<think>", "close": "</think>", "content": "text"}
    text = ('Paris, so get_weather.\n</think>\n\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    got = tok.parse_response(text + END, prefix=prompt(tok), tools=TOOLS)
    assert got["thinking"] == "Paris, so get_weather." and message_reads(got) == ("", PARIS)
