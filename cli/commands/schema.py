"""gpupolicy schema: print or write the JSON Schemas generated from the models."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--write", metavar="DIR", help="write every schema into DIR instead of printing one")
    parser.add_argument("--name", default="cluster-policy.schema.json",
                        help="the schema to print (default: cluster-policy.schema.json)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from policy.schemas import render_schemas

    schemas = render_schemas()
    if args.write is None:
        if args.name not in schemas:
            print(f"gpupolicy schema: error: no schema {args.name!r}; choose from {', '.join(sorted(schemas))}",
                  file=sys.stderr)
            return 2
        sys.stdout.write(schemas[args.name])
        return 0
    out = Path(args.write)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in sorted(schemas.items()):
            (out / name).write_text(text, encoding="utf-8", newline="\n")
            print(f"wrote {out / name}", file=sys.stderr)
    except OSError as err:
        print(f"gpupolicy schema: error: cannot write {args.write}: {err.strerror}", file=sys.stderr)
        return 2
    return 0
