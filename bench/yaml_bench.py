"""YAML emitter benchmark, and the proof the compiler's fast path writes the bytes PyYAML's emitter writes.

    .venv/bin/python bench/yaml_bench.py            # 50,000 fuzzed documents + the speed table (~25 s)
    .venv/bin/python bench/yaml_bench.py --quick    # 3,000 documents (the smoke test)

compiler/serialize.py `dump_yaml` emits through libyaml when a document is in the class on which
libyaml and PyYAML's pure-Python emitter agree (mappings and lists of printable-ASCII strings, numbers,
booleans and nulls, with a few shapes excluded), and through PyYAML's emitter otherwise. Its contract is
that the output never depends on which path ran. This script checks that contract on random documents
built to hit the differences found while writing it (astral and non-ASCII text, empty and long keys,
literal blocks that start with a space or end with blank lines, tabs, carriage returns, YAML 1.1 look-
alikes) as well as plain ones, and exits 1 on the first mismatch. Then it times both emitters on the
documents `gpupolicy compile` renders for a generated 300-class spec.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))

import specgen  # noqa: E402
import yaml  # noqa: E402

from compiler import serialize  # noqa: E402

_CHARS = list("ab :#-'\"\n\\|>{}[],&*!%@`?~=.0123456789eExyYnN/_+ \t\r\x85é中😀\x7f\ufeff")
_SPECIAL = ["", "on", "1.30", "0777", "~", "null", "y", "- a", "a: b", " lead", "trail ", "a\n", "a\n\n", "\n",
            " \n", "a  \nb", "line\n  indented\n", "x" * 200, "-", "?", ":", "a:", "#a", "a #b", "'", '"', "@a",
            "|", ">", "a\tb", "a\nb\n", "k: v\nx: [1]\n", "a \n", "#!/bin/sh\nset -e\n", "a" * 100, "a" * 101,
            "a" * 128, "é" * 50, "0x1F", ".inf", "=", "<<"]


def reference(data: Any) -> bytes:
    """PyYAML's pure-Python emitter with the compiler's Dumper: what dump_yaml must always write."""
    return yaml.dump(data, Dumper=serialize.Dumper, **serialize._DUMP_OPTIONS).encode("utf-8")


def _text(rng: random.Random, plain: bool) -> str:
    if rng.random() < 0.3:
        text = rng.choice(_SPECIAL)
    else:
        text = "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 14)))
    if plain:  # mostly printable ASCII, as in manifests, so the fast path is taken often
        text = "".join(c for c in text if " " <= c <= "~" or c == "\n")
    return text


def _document(rng: random.Random, plain: bool, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return _text(rng, plain) if rng.random() < 0.7 else rng.choice([0, 1, -5, 3.5, True, False, None, 10**20])
    if roll < 0.7:
        return [_document(rng, plain, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng, plain): _document(rng, plain, depth + 1) for _ in range(rng.randint(0, 3))}


def check_equivalence(count: int, seed: int) -> tuple[int, int]:
    """Compare dump_yaml with the reference on ``count`` documents; returns (documents, fast-path share %)."""
    rng = random.Random(seed)
    fast = 0
    for n in range(count):
        plain = n % 2 == 0
        doc = {_text(rng, plain): _document(rng, plain) for _ in range(rng.randint(1, 3))} \
            if rng.random() < 0.9 else [_document(rng, plain) for _ in range(3)]
        got, want = serialize.dump_yaml(doc), reference(doc)
        if got != want:
            print(f"MISMATCH for {doc!r}:\n  dump_yaml: {got!r}\n  reference: {want!r}", file=sys.stderr)
            raise SystemExit(1)
        try:
            yaml.dump(doc, Dumper=serialize._LibyamlDumper, **serialize._DUMP_OPTIONS)
            fast += 1
        except serialize._NotPlain:
            pass
    return count, round(100 * fast / count)


def rendered_documents(classes: int) -> list[Any]:
    """Every document `gpupolicy compile` serialises for a generated spec."""
    from compiler import compile_policy
    from policy.load import load_policy_or_raise

    captured: list[Any] = []
    original = serialize.dump_yaml

    def capture(data: Any) -> bytes:
        captured.append(data)
        return original(data)

    serialize.dump_yaml = capture  # type: ignore[assignment]
    try:
        compile_policy(load_policy_or_raise(specgen.generate_spec(classes), filename="bench.yaml"))
    finally:
        serialize.dump_yaml = original  # type: ignore[assignment]
    return captured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3,000 documents, a small spec (the smoke test)")
    parser.add_argument("--documents", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args(argv)
    count, share = check_equivalence(3000 if args.quick else args.documents, args.seed)
    print(f"equivalence: dump_yaml == PyYAML's emitter on {count:,} random documents "
          f"({share}% took the libyaml path)")
    docs = rendered_documents(10 if args.quick else 300)
    rows = []
    for name, dump in (("PyYAML emitter (before)", reference), ("dump_yaml (libyaml fast path)", serialize.dump_yaml)):
        start = time.perf_counter()
        out = [dump(d) for d in docs]
        rows.append((name, time.perf_counter() - start, out))
    if rows[0][2] != rows[1][2]:
        print("MISMATCH on the rendered documents", file=sys.stderr)
        return 1
    print(f"\n| emitter | {len(docs):,} rendered documents | per document |\n|---|---:|---:|")
    for name, seconds, _ in rows:
        print(f"| {name} | {seconds * 1000:,.0f} ms | {seconds / len(docs) * 1e6:,.0f} µs |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
