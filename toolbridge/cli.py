"""`toolbridge templates list | path NAME | wrap SRC -o OUT | export MODEL -o DIR | generate [DIR]`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .dialects import DIALECTS
from .prompt.chat_templates import FAMILIES, read_stock, template_dir, template_path, wrap, write_all

SYSTEM_ROLE = {"auto": None, "yes": True, "no": False}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="toolbridge", description=__doc__)
    sub = ap.add_subparsers(dest="group", required=True)
    tp = sub.add_parser("templates", help="packaged tool-capable chat templates")
    ts = tp.add_subparsers(dest="cmd", required=True)
    ts.add_parser("list", help="list packaged templates")
    p = ts.add_parser("path", help="print the installed path of a packaged template")
    p.add_argument("name", choices=sorted(FAMILIES))
    w = ts.add_parser("wrap", help="make any stock template tool-capable")
    w.add_argument("src", help="a template file, a Hugging Face model directory, or a .gguf file")
    w.add_argument("-o", "--output", required=True, help="where to write the wrapped template ('-' for stdout)")
    e = ts.add_parser("export", help="write a tokenizer directory with the wrapped template and its response template")
    e.add_argument("model", help="a Hugging Face model directory or a .gguf file")
    e.add_argument("-o", "--output", required=True, help="the directory to write")
    e.add_argument("--link-weights", action="store_true",
                   help="link the model's weights and config beside the tokenizer (for `transformers serve DIR`)")
    for sp in (w, e):
        sp.add_argument("--dialect", default=None, choices=sorted(DIALECTS), help="the call format the prompt asks for")
        sp.add_argument("--no-example", action="store_true", help="leave the one-call example out of the prompt")
        sp.add_argument("--system-role", choices=("auto", "yes", "no"), default="auto",
                        help="whether the stock template takes a system turn (auto: probe it)")
    g = ts.add_parser("generate", help="regenerate the packaged templates (maintainers)")
    g.add_argument("directory", nargs="?", default=str(template_dir()))
    args = ap.parse_args(argv)

    if args.cmd == "list":
        for fam in FAMILIES.values():
            print(f"{fam.name:19} dialect={fam.dialect:8} {fam.models}")
    elif args.cmd == "path":
        path = template_path(args.name)
        if not path.is_file():
            print(f"toolbridge: {path} is missing (was the package installed?)", file=sys.stderr)
            return 1
        print(path)
    elif args.cmd == "wrap":
        try:
            stock = read_stock(args.src)
            text = wrap(stock, dialect=args.dialect or "tags", example=not args.no_example,
                        system_role=SYSTEM_ROLE[args.system_role])
        except Exception as e:  # a CLI reports, it does not trace back
            print(f"toolbridge: cannot wrap {args.src}: {e}", file=sys.stderr)
            return 1
        if args.output == "-":
            sys.stdout.write(text)
        else:
            Path(args.output).write_text(text, encoding="utf-8")
            print(args.output)
    elif args.cmd == "export":
        from .export import export

        try:
            export(args.model, args.output, dialect=args.dialect, example=not args.no_example,
                   system_role=SYSTEM_ROLE[args.system_role], link_weights=args.link_weights)
        except Exception as e:  # a CLI reports, it does not trace back
            print(f"toolbridge: cannot export {args.model}: {e}", file=sys.stderr)
            return 1
        print(args.output)
    elif args.cmd == "generate":
        for path in write_all(Path(args.directory)):
            print(path)
    return 0
