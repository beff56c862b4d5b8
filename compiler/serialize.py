"""Deterministic YAML and JSON: sorted keys, literal blocks, quoted look-alikes, LF and a final newline."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from yaml.nodes import ScalarNode

STR_TAG = "tag:yaml.org,2002:str"

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
        if any(ch in data for ch in _UNICODE_BREAKS):
            # PyYAML folds these YAML 1.1 line breaks wrongly in plain and block styles; escapes are exact.
            return self.represent_scalar(STR_TAG, data, style='"')
        if "\n" in data:
            return self.represent_scalar(STR_TAG, data, style="|")
        if is_ambiguous(data):
            return self.represent_scalar(STR_TAG, data, style='"')
        return self.represent_scalar(STR_TAG, data)


Dumper.add_representer(str, Dumper.represent_str)


def is_ambiguous(text: str) -> bool:
    """True when a plain scalar ``text`` would not be read back as this string by some YAML reader."""
    if text == "" or _LOOKALIKE.match(text):
        return True
    return Dumper.resolve(Dumper, ScalarNode, text, (True, False)) != STR_TAG  # type: ignore[arg-type]


def dump_yaml(data: Any) -> bytes:
    """One YAML document as UTF-8 bytes: sorted keys, no line wrapping, LF, exactly one final newline."""
    text = yaml.dump(
        data,
        Dumper=Dumper,
        sort_keys=True,
        width=2**31 - 1,  # never wrap: wrapped scalars churn diffs (ecosystem.md §1.7)
        allow_unicode=True,
        default_flow_style=False,
        indent=2,
        line_break="\n",
    )
    return text.encode("utf-8")  # yaml.dump ends every document with exactly one line break


def dump_json(data: Any) -> bytes:
    """JSON as UTF-8 bytes: sorted keys, two-space indent, LF, one final newline."""
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
