"""Deterministic YAML and JSON: sorted keys, literal blocks, quoted look-alikes, LF and a final newline."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.representer import SafeRepresenter
from yaml.resolver import Resolver

try:  # libyaml's emitter: the same bytes as PyYAML's for the documents the fast path admits, 6x faster
    from yaml.cyaml import CEmitter
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    CEmitter = None

STR_TAG = "tag:yaml.org,2002:str"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"

# Strings that some YAML reader would not read back as strings, beyond what PyYAML's own YAML 1.1
# resolver already catches ("on", "true", "0777", "1.30", "~").  go-yaml v2 (kubectl, Argo CD, Flux)
# reads y/n as booleans (go-yaml resolve.go); YAML 1.2 core readers read 0o17, 0x1F, .inf and .nan
# as numbers; "=" is the YAML 1.1 value key.  Quoting them costs nothing and keeps them strings.
_LOOKALIKE = re.compile(
    r"""^(?:
        [yYnN]
      | [-+]?0o[0-7]+
      | [-+]?0x[0-9a-fA-F]+
      | [-+]?\.(?:inf|Inf|INF)
      | \.(?:nan|NaN|NAN)
      | [-+]?(?:\d[\d_]*)?\.?\d[\d_]*(?:[eE][-+]?\d+)?
      | =
      | <<
    )$""",
    re.VERBOSE,
)
_UNICODE_BREAKS = "\x85\u2028\u2029"


class Dumper(yaml.SafeDumper):
    """SafeDumper for generated manifests: no aliases, literal blocks, quoted look-alike strings."""

    def ignore_aliases(self, data: Any) -> bool:
        # A shared dict (the same labels in metadata and selector) must not become &id001/*id001.
        return True

    def represent_str(self, data: str) -> ScalarNode:
        return self.represent_scalar(STR_TAG, data, style=_str_style(data))


Dumper.add_representer(str, Dumper.represent_str)


@functools.lru_cache(maxsize=16384)  # manifests repeat the same keys and values thousands of times
def _str_style(data: str) -> str | None:
    """How a string is written: double-quoted, a literal block, or plain (None)."""
    if any(ch in data for ch in _UNICODE_BREAKS):
        # PyYAML folds these YAML 1.1 line breaks wrongly in plain and block styles; escapes are exact.
        return '"'
    if "\n" in data:
        return "|"
    return '"' if is_ambiguous(data) else None


def is_ambiguous(text: str) -> bool:
    """True when a plain scalar ``text`` would not be read back as this string by some YAML reader."""
    if text == "" or _LOOKALIKE.match(text):
        return True
    return _scalar_tag(text, (True, False)) != STR_TAG


_DUMP_OPTIONS: dict[str, Any] = {
    "sort_keys": True,
    "width": 2**31 - 1,  # never wrap: wrapped scalars churn diffs (ecosystem.md §1.7)
    "allow_unicode": True,
    "default_flow_style": False,
    "indent": 2,
    "line_break": "\n",
}


def dump_yaml(data: Any) -> bytes:
    """One YAML document as UTF-8 bytes: sorted keys, no line wrapping, LF, exactly one final newline."""
    if _LibyamlDumper is not None and isinstance(data, dict | list):
        try:
            return yaml.dump(data, Dumper=_LibyamlDumper, **_DUMP_OPTIONS).encode("utf-8")
        except _NotPlain:
            pass  # a string outside the agreed class: the reference emitter writes this document
    return yaml.dump(data, Dumper=Dumper, **_DUMP_OPTIONS).encode("utf-8")  # ends with exactly one line break


# --- the fast path -------------------------------------------------------------------------------------
# PyYAML's pure-Python emitter was 80% of `gpupolicy compile` for large fleets (docs/performance.md).
# libyaml's emitter writes the same bytes for everything we generate, but not for every input: it
# escapes astral-plane characters, writes `"": x` where PyYAML writes `? ""`, ends a `|+` block with
# `...`, and indents literal blocks in nested sequences differently. So a document takes the fast path
# only when it is a mapping or list whose keys and strings are printable ASCII of the shapes below;
# on any other string the fast dumper gives up and PyYAML's emitter, the reference, writes the document
# (a description with an emoji, say). bench/yaml_bench.py compares both emitters over this class of
# documents, and tests/test_bench_smoke.py runs it.


class _NotPlain(Exception):
    """A string outside the class on which libyaml's and PyYAML's emitters agree."""


def _is_plain_string(text: str) -> bool:
    if not text.isascii():
        return False
    if text.isprintable():
        return True
    return "\n" in text and text.replace("\n", "").isprintable() and not (
        text.startswith((" ", "\n")) or text.endswith("\n\n"))


_NOT_PLAIN = "not plain"


@functools.lru_cache(maxsize=16384)
def _plain_style(data: str) -> str | None:
    """_str_style for a string of the agreed class, or _NOT_PLAIN."""
    return _str_style(data) if _is_plain_string(data) else _NOT_PLAIN


def _is_plain_key(key: Any) -> bool:
    return type(key) is str and _is_plain_key_text(key)


@functools.lru_cache(maxsize=16384)
def _is_plain_key_text(key: str) -> bool:
    # Both emitters write keys over 128 characters as "? " keys, but not identically around the limit.
    return 0 < len(key) <= 100 and key.isascii() and key.isprintable()


@functools.lru_cache(maxsize=8192)
def _scalar_tag(value: str, implicit: tuple[bool, bool]) -> str:
    return Resolver.resolve(Dumper, ScalarNode, value, implicit)  # type: ignore[arg-type]


if CEmitter is not None:

    class _LibyamlDumper(CEmitter, SafeRepresenter, Resolver):  # type: ignore[misc]
        """Dumper's representers on libyaml's emitter; raises _NotPlain outside the agreed class."""

        def __init__(self, stream: Any, *, default_style: str | None = None, default_flow_style: bool | None = False,
                     canonical: bool | None = None, indent: int | None = None, width: int | None = None,
                     allow_unicode: bool | None = None, line_break: str | None = None, encoding: str | None = None,
                     explicit_start: bool | None = None, explicit_end: bool | None = None,
                     version: tuple[int, int] | None = None, tags: dict[str, str] | None = None,
                     sort_keys: bool = True) -> None:
            CEmitter.__init__(self, stream, canonical=canonical, indent=indent, width=width, encoding=encoding,
                              allow_unicode=allow_unicode, line_break=line_break, explicit_start=explicit_start,
                              explicit_end=explicit_end, version=version, tags=tags)
            SafeRepresenter.__init__(self, default_style=default_style, default_flow_style=default_flow_style,
                                     sort_keys=sort_keys)
            Resolver.__init__(self)

        ignore_aliases = Dumper.ignore_aliases

        def represent_data(self, data: Any) -> Node:
            # SafeRepresenter's own steps for the three types manifests are made of, without its per-node
            # alias bookkeeping and type dispatch: a mapping sorted by key and a list, both in block style
            # (default_flow_style=False), and a string through represent_str. Anything else, as before.
            kind = type(data)
            if kind is str:
                return self.represent_str(data)
            if kind is dict:
                if not all(_is_plain_key(key) for key in data):
                    raise _NotPlain
                pairs = [(self.represent_str(key), self.represent_data(value)) for key, value in sorted(data.items())]
                return MappingNode(MAP_TAG, pairs, flow_style=False)
            if kind is list:
                return SequenceNode(SEQ_TAG, [self.represent_data(item) for item in data], flow_style=False)
            return super().represent_data(data)  # type: ignore[no-any-return]

        def represent_str(self, data: str) -> ScalarNode:
            style = _plain_style(data)
            if style is _NOT_PLAIN:
                raise _NotPlain
            return ScalarNode(STR_TAG, data, style=style)  # represent_scalar's node: no default style, no aliases

        def represent_mapping(self, tag: str, mapping: Any, flow_style: bool | None = None) -> Any:
            if not all(_is_plain_key(key) for key in mapping):
                raise _NotPlain
            return super().represent_mapping(tag, mapping, flow_style)

        def resolve(self, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
            # The emitter asks twice per scalar; with no path resolvers a scalar's tag depends on its text
            # alone, and manifests repeat the same keys and values thousands of times.
            if kind is ScalarNode:
                return _scalar_tag(value, implicit)
            return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]

    _LibyamlDumper.add_representer(str, _LibyamlDumper.represent_str)
else:  # pragma: no cover
    _LibyamlDumper = None  # type: ignore[assignment,misc]


def dump_json(data: Any) -> bytes:
    """JSON as UTF-8 bytes: sorted keys, two-space indent, LF, one final newline."""
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
