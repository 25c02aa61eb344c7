"""Constraints from tool schemas: the call frames every engine's grammar is built from."""
