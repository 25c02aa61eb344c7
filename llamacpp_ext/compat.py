"""Every place toolbridge reaches below llama-cpp-python's public API, in one file.

llama-cpp-python keeps the model, its vocabulary, the seed, a grammar's text and the JSON-schema
converter's state in private attributes. The adapter reads and extends them only through the
functions and the converter base class here, so an upgrade that moves one of them is fixed in
this file.
"""
from __future__ import annotations

import contextlib
import ctypes
import inspect
from typing import Any, AsyncIterator, Mapping, Sequence

import llama_cpp
import llama_cpp.llama_chat_format
import numpy as np
from llama_cpp._internals import LlamaSampler
from llama_cpp.llama_tokenizer import LlamaTokenizer
from llama_cpp.llama_grammar import (INVALID_RULE_CHARS_RE, JSON_GBNF, PRIMITIVE_RULES, RESERVED_NAMES,
                                     BuiltinRule, LlamaGrammar, SchemaConverter)

from toolbridge.engine import Vocabulary

__all__ = ["INVALID_RULE_CHARS_RE", "JSON_GBNF", "PRIMITIVE_RULES", "RESERVED_NAMES", "BuiltinRule",
           "ConverterBase", "GrammarSampler", "LlamaGrammar", "LlamaSampler", "base_seed", "compiles",
           "create_chat_completion", "detokenize", "grammar_text", "input_ids", "is_end_of_generation", "last_logits", "model_key",
           "reuse_cache", "sample_in_c", "sampler_chain", "token_text", "vocabulary"]


def model_key(llama: llama_cpp.Llama) -> tuple[str, int]:
    """Names the loaded model for caches of what depends on its file (grammars, templates, token
    ids): its path and vocabulary size, stable across loads, unlike an object's id."""
    return llama.model_path, llama.n_vocab()


def vocabulary(llama: llama_cpp.Llama) -> Vocabulary:
    """The core's view of the model's vocabulary (toolbridge.steer.vocab), kept on the model object: it
    calls the model's tokenizer, so it lives exactly as long as the model does."""
    vocab = llama.__dict__.get(_VOCABULARY)
    if vocab is None:
        key = ("llama.cpp", *model_key(llama))
        vocab = Vocabulary(key,
                           lambda t: llama.tokenize(t.encode("utf-8"), add_bos=False, special=False),
                           lambda t: detokenize(llama, (t,)).decode("utf-8", "replace"), llama.n_vocab())
        llama.__dict__[_VOCABULARY] = vocab
    return vocab


_VOCABULARY = "_toolbridge_vocabulary"


def detokenize(llama: llama_cpp.Llama, tokens: Sequence[int]) -> bytes:
    """The bytes of generated tokens (special tokens have none), as `Llama.detokenize` gives them, but
    whole: llama-cpp-python 0.3.36 reads each token's piece into a 32-byte buffer and drops a longer one
    (a run of 32 spaces, a line of dashes: abetlen/llama-cpp-python#2362), where llama.cpp says the
    size it needs and this reads it again. A tokenizer the server was given from Hugging Face decodes
    by itself."""
    if type(llama.tokenizer_) is not LlamaTokenizer:
        return llama.detokenize(list(tokens))
    vocab = llama._model.vocab
    out = bytearray()
    buf = ctypes.create_string_buffer(64)
    for token in tokens:
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
        out += buf.raw[:max(n, 0)]
    return bytes(out)


def token_text(llama: llama_cpp.Llama, token: int) -> str:
    """A token's text, special tokens included ("" for no token, -1)."""
    return llama._model.token_get_text(token) if token != -1 else ""


def base_seed(llama: llama_cpp.Llama) -> int:
    """The seed the model was loaded with (a request without one derives its seed from it)."""
    return llama._seed


def is_end_of_generation(llama: llama_cpp.Llama, token: int) -> bool:
    return bool(llama_cpp.llama_vocab_is_eog(llama._model.vocab, token))


def end_tokens(llama: llama_cpp.Llama) -> tuple[int, ...]:
    """Every token that ends generation (end of turn, end of text), kept on the model object."""
    ends = llama.__dict__.get(_ENDS)
    if ends is None:
        vocab = llama._model.vocab
        ends = llama.__dict__[_ENDS] = tuple(t for t in range(llama.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t))
    return ends


_ENDS = "_toolbridge_end_tokens"


def grammar_text(grammar: LlamaGrammar) -> tuple[str, str]:
    """A LlamaGrammar's GBNF text and root rule."""
    return grammar._grammar, grammar._root


def compiles(llama: llama_cpp.Llama, grammar: str, root: str = "root") -> bool:
    """Whether llama.cpp's own grammar parser accepts `grammar` (it logs the error if not).
    llama.cpp parses a grammar only when sampling starts, and a bad one crashes the process
    there, so every grammar passes this first."""
    ptr = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode("utf-8"), root.encode("utf-8"))
    if ptr:
        llama_cpp.llama_sampler_free(ptr)
    return bool(ptr)


# -- generation ------------------------------------------------------------------------------------

def reuse_cache(llama: llama_cpp.Llama, tokens: list[int]) -> list[int]:
    """Prepare the model's KV cache for `tokens` as Llama.generate does (keep the longest cached
    prefix, drop the rest); returns the tokens still to evaluate ([]: the last logits in the
    cache are already those after `tokens`)."""
    if llama.n_tokens > 0:
        longest = 0
        for a, b in zip(llama._input_ids, tokens):
            if a != b:
                break
            longest += 1
        consumed = longest == len(tokens)
        if consumed and llama.n_tokens == len(tokens) and not llama._requires_eval:
            return []
        reuse = longest - 1 if consumed else longest  # replay one token to refresh the logits
        if reuse > 0 and llama._ctx.kv_cache_seq_rm(-1, reuse, -1):
            llama.n_tokens = reuse
            llama._requires_eval = True
            return tokens[reuse:]
    llama.reset()
    return tokens


def input_ids(llama: llama_cpp.Llama) -> np.ndarray:
    """The tokens in the model's context (what a logits processor is given)."""
    return llama._input_ids


def last_logits(llama: llama_cpp.Llama) -> np.ndarray:
    """The logits after the last evaluated token (a view of llama.cpp's buffer)."""
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llama._ctx.ctx, -1), shape=(llama.n_vocab(),))


def sample_in_c(llama: llama_cpp.Llama, chain: LlamaSampler) -> int:
    """Sample from the last logits with `chain` and accept the token, all in llama.cpp."""
    return llama_cpp.llama_sampler_sample(chain.sampler, llama._ctx.ctx, -1)


def sampler_chain(llama: llama_cpp.Llama, s: Any, seed: int, logit_bias: Mapping[int, float]) -> LlamaSampler:
    """The sampler chain Llama.generate builds for these settings (`s`: generate.Sampling), in
    its order, without a grammar, with the request's logit bias at its head."""
    chain = LlamaSampler()
    if logit_bias:
        items = (llama_cpp.llama_logit_bias * len(logit_bias))(
            *(llama_cpp.llama_logit_bias(int(t), float(b)) for t, b in logit_bias.items()))
        llama_cpp.llama_sampler_chain_add(chain.sampler, llama_cpp.llama_sampler_init_logit_bias(
            llama.n_vocab(), len(logit_bias), items))
    chain.add_penalties(n_vocab=llama.n_vocab(), penalty_last_n=llama.last_n_tokens_size,
                        penalty_repeat=s.repeat_penalty, penalty_freq=s.frequency_penalty,
                        penalty_present=s.presence_penalty)
    if s.temp < 0.0:
        chain.add_dist(seed)
    elif s.temp == 0.0:
        chain.add_greedy()
    elif s.mirostat_mode == 1:
        chain.add_mirostat(llama.n_vocab(), seed, s.mirostat_tau, s.mirostat_eta, 100)
    elif s.mirostat_mode == 2:
        chain.add_mirostat_v2(seed, s.mirostat_tau, s.mirostat_eta)
    else:
        chain.add_top_k(s.top_k)
        chain.add_typical(s.typical_p, 1)
        chain.add_top_p(s.top_p, 1)
        chain.add_min_p(s.min_p, 1)
        chain.add_temp(s.temp)
        chain.add_dist(seed)
    return chain


class GrammarSampler:
    """llama.cpp's grammar sampler for one GBNF grammar (owned; freed with close())."""

    def __init__(self, llama: llama_cpp.Llama, grammar: str, root: str = "root"):
        self.ptr = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode("utf-8"),
                                                        root.encode("utf-8"))
        if not self.ptr:
            raise ValueError("llama.cpp rejected the grammar")

    def close(self) -> None:
        if self.ptr:
            llama_cpp.llama_sampler_free(self.ptr)
            self.ptr = None


class ConverterBase(SchemaConverter):
    """llama-cpp-python's JSON-schema-to-GBNF converter behind names of our own: its private
    hooks call the public-named methods below (which a subclass overrides), and its private
    state is reached through the accessors."""

    def __init__(self) -> None:
        super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)

    # -- state -----------------------------------------------------------------------------------
    def has_rule(self, name: str) -> bool:
        return name in self._rules

    def set_rule(self, name: str, body: str) -> None:
        self._rules[name] = body

    def add_rule(self, name: str, body: str) -> str:
        """Add a rule (renamed if the name is taken by another body); returns its name."""
        return self._add_rule(name, body)

    def primitive(self, name: str) -> str:
        """One of the converter's built-in rules (string, value, char, ...), added once."""
        return self._add_primitive(name, PRIMITIVE_RULES[name])

    def ref_target(self, ref: str) -> Any:
        return self._refs.get(ref)

    def set_ref_target(self, ref: str, node: Any) -> None:
        self._refs[ref] = node

    # -- hooks: the private methods the stock converter calls --------------------------------------
    def _format_literal(self, literal: str) -> str:
        return self.format_literal(literal)

    def _add_primitive(self, name: str, rule: BuiltinRule) -> str:
        return super()._add_primitive(name, self.primitive_rule(name, rule))

    def _resolve_ref(self, ref: str) -> str:
        return self.resolve_ref(ref)

    def _visit_pattern(self, pattern: str, name: str) -> str:
        return self.visit_pattern(pattern, name)

    # -- the stock behaviour of each hook -------------------------------------------------------------
    def format_literal(self, literal: str) -> str:
        return super()._format_literal(literal)

    def primitive_rule(self, name: str, rule: BuiltinRule) -> BuiltinRule:
        return rule

    def resolve_ref(self, ref: str) -> str:
        return super()._resolve_ref(ref)

    def visit_pattern(self, pattern: str, name: str) -> str:
        return super()._visit_pattern(pattern, name)


# -- llama-cpp-python's server internals the agent-API routes need (routes.py) ---------------------------------------------

@contextlib.asynccontextmanager
async def served_model(model: str | None) -> AsyncIterator[tuple[Any, dict]]:
    """The model a chat request for `model` is answered by, and its chat_template_kwargs (the
    handler's options), held as the server's own routes hold it (one request at a time)."""
    from llama_cpp.server import app

    async with contextlib.asynccontextmanager(app.get_llama_proxy)() as proxy:
        llama = proxy(model)
        aliases = list(proxy)
        alias = model if model in aliases else aliases[0]  # the proxy's own fallback: the first model
        yield llama, dict(proxy[alias].get("chat_template_kwargs") or {})


def authorized(scope: dict) -> bool:
    """The server's API key check (`--api_key`), as its own routes make it: a matching bearer token."""
    from llama_cpp.server import app

    settings = next(app.get_server_settings())
    if settings is None or settings.api_key is None:
        return True
    auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
    scheme, _, token = auth.partition(" ")
    return scheme.lower() == "bearer" and token == settings.api_key


def create_chat_completion(llama: llama_cpp.Llama, handler_kwargs: Mapping[str, Any], **kwargs: Any) -> Any:
    """Llama.create_chat_completion (its arguments and defaults, the model's chat handler, which the
    server wraps to add the model's chat_template_kwargs), with `handler_kwargs` handed to the handler too."""
    bound = _CREATE_CHAT.bind(llama, **kwargs)
    bound.apply_defaults()
    arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
    handler = (llama.chat_handler or llama._chat_handlers.get(llama.chat_format)
               or llama_cpp.llama_chat_format.get_chat_completion_handler(llama.chat_format))
    return handler(llama=llama, **arguments, **handler_kwargs)


_CREATE_CHAT = inspect.signature(llama_cpp.Llama.create_chat_completion)
