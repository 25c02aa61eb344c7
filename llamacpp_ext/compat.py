"""Every place toolbridge reaches below llama-cpp-python's public API, in one file.

llama-cpp-python keeps the model, its vocabulary, the seed, a grammar's text and the JSON-schema
converter's state in private attributes. The adapter reads and extends them only through the
functions and the converter base class here, so an upgrade that moves one of them is fixed in
this file.
"""
from __future__ import annotations

from typing import Any

import llama_cpp
from llama_cpp.llama_grammar import (INVALID_RULE_CHARS_RE, JSON_GBNF, PRIMITIVE_RULES, RESERVED_NAMES,
                                     BuiltinRule, LlamaGrammar, SchemaConverter)

__all__ = ["INVALID_RULE_CHARS_RE", "JSON_GBNF", "PRIMITIVE_RULES", "RESERVED_NAMES", "BuiltinRule",
           "ConverterBase", "LlamaGrammar", "base_seed", "compiles", "grammar_text", "is_end_of_generation",
           "model_key", "token_text"]


def model_key(llama: llama_cpp.Llama) -> int:
    """Identifies the loaded model (caches of what depends on its vocabulary)."""
    return id(llama._model)


def token_text(llama: llama_cpp.Llama, token: int) -> str:
    """A token's text, special tokens included ("" for no token, -1)."""
    return llama._model.token_get_text(token) if token != -1 else ""


def base_seed(llama: llama_cpp.Llama) -> int:
    """The seed the model was loaded with (a request without one derives its seed from it)."""
    return llama._seed


def is_end_of_generation(llama: llama_cpp.Llama, token: int) -> bool:
    return bool(llama_cpp.llama_vocab_is_eog(llama._model.vocab, token))


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
