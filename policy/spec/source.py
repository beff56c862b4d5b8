"""YAML text to plain data plus a position index, catching the traps of YAML 1.1."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from policy.spec.diagnostics import Diagnostic, Path, Span, shorten

try:  # libyaml's composer is several times faster (and, unlike the pure scanner, allows a tab before a comment)
    _Loader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader

def compose_document(text: str) -> yaml.Node:
    """The node tree of a one-document text, composed as specs are loaded (so with the same grammar: libyaml's
    allows a tab before a comment where PyYAML's pure scanner does not), marks included."""
    return yaml.compose(text, Loader=_Loader)


# PyYAML implements YAML 1.1, where these plain scalars are not strings.  Kubernetes and most
# editors read YAML 1.2, so the same file means different things to different tools: refuse it.
_YAML11_BOOLEANS = re.compile(r"^(y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF)$")
_YAML11_OCTAL = re.compile(r"^[-+]?0[0-7_]+$")
_YAML11_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?$")
_MAX_NODES = 200_000  # guards against alias bombs ("billion laughs")


@dataclass
class SourceMap:
    """Where each path of a parsed document starts, for keys and for values."""

    file: str
    values: dict[Path, Span] = field(default_factory=dict)
    keys: dict[Path, Span] = field(default_factory=dict)
    texts: dict[Path, str] = field(default_factory=dict)
    """The text of each plain scalar YAML read as something other than a string (1.30 -> 1.3, on -> true), so a
    hint can quote what the user wrote."""

    def span(self, path: Path, *, key: bool = False) -> Span | None:
        """The span of ``path`` (its key when ``key``), else of its nearest located ancestor."""
        table = self.keys if key else self.values
        probe = tuple(path)
        while True:
            hit = table.get(probe) or (self.keys.get(probe) if key else None)
            if hit is None and not key:
                hit = self.values.get(probe)
            if hit is not None:
                return hit
            if not probe:
                return Span(self.file, 1, 1)
            probe = probe[:-1]


@dataclass(frozen=True)
class Document:
    """One YAML document: its data, its positions and what went wrong reading it."""

    data: Any
    source: SourceMap
    index: int
    diagnostics: tuple[Diagnostic, ...] = ()


class _Builder:
    """Turns a composed node tree into plain data, recording spans and diagnostics."""

    def __init__(self, file: str) -> None:
        self.source = SourceMap(file)
        self.diagnostics: list[Diagnostic] = []
        self.constructor = yaml.constructor.SafeConstructor()
        self.visited = 0

    def span(self, node: yaml.Node) -> Span:
        return Span(self.source.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def count(self, node: yaml.Node) -> None:
        """Count one node of the expanded document (keys too), refusing before the work grows past the limit."""
        self.visited += 1
        if self.visited > _MAX_NODES:
            raise _Refused(self.span(node), f"document expands to more than {_MAX_NODES} nodes (alias bomb?)",
                           "remove the anchors and aliases that multiply the document")

    def build(self, node: yaml.Node, path: Path) -> Any:
        self.count(node)
        self.source.values.setdefault(path, self.span(node))
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.scalar(node, path)

    def mapping(self, node: yaml.MappingNode, path: Path) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first_seen: dict[Any, Span] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                merged = self.build(value_node, path)
                for source in merged if isinstance(merged, list) else [merged]:
                    if isinstance(source, dict):
                        for k, v in source.items():
                            out.setdefault(k, v)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                # A complex key (`? [a, b]`): no spec or Kubernetes field has one (JSON keys are text), and
                # spelling it out would expand whatever aliases it holds, unbounded. Refused unread.
                raise _Refused(self.span(key_node), "a mapping key is a list or a mapping (a YAML complex key); "
                               "specs and Kubernetes manifests take only text keys",
                               "write the key as plain text, or remove the `?` entry")
            self.count(key_node)
            key = self.scalar(key_node, path, key=True)
            if not isinstance(key, str | int | float | bool) or key is None:
                key = str(key)
            child = (*path, key)
            key_span = self.span(key_node)
            if key in first_seen:
                self.diagnostics.append(
                    Diagnostic(
                        code="duplicate-key",
                        message=f"key {shorten(repr(key))} appears twice in one mapping (first at line "
                                f"{first_seen[key].line})",
                        path=child,
                        hint="YAML parsers silently keep only one of them; delete or merge the duplicate",
                        span=key_span,
                    )
                )
                continue
            first_seen[key] = key_span
            self.source.keys[child] = key_span
            out[key] = self.build(value_node, child)
        return out

    def scalar(self, node: yaml.ScalarNode, path: Path, *, key: bool = False) -> Any:
        if not node.style:  # plain scalar: libyaml says '', the pure-Python composer None
            self.check_yaml11(node, path)
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value  # dates stay text: no field of ours is a timestamp
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError:
            return node.value
        if not (key or node.style or isinstance(value, str)):
            self.source.texts[path] = node.value
        return value

    def check_yaml11(self, node: yaml.ScalarNode, path: Path) -> None:
        text = node.value
        for pattern, code, meaning in (
            (_YAML11_BOOLEANS, "yaml11-boolean", "a boolean"),
            (_YAML11_OCTAL, "yaml11-octal", "an octal number"),
            (_YAML11_SEXAGESIMAL, "yaml11-sexagesimal", "a base-60 number"),
        ):
            if pattern.match(text) and not (code == "yaml11-octal" and text.lstrip("+-") == "0"):
                self.diagnostics.append(
                    Diagnostic(
                        code=code,
                        message=f"unquoted {text!r} is {meaning} in YAML 1.1 but a string in YAML 1.2",
                        path=path,
                        hint=f'quote it ("{text}") if you mean text'
                        + (", or write true/false" if code == "yaml11-boolean" else ""),
                        span=self.span(node),
                    )
                )
                return


class _Refused(Exception):
    """A document read no further: its data would be unbounded or unreadable for every consumer."""

    def __init__(self, span: Span, message: str, hint: str) -> None:
        self.span, self.message, self.hint = span, message, hint


def parse_documents(text: str, *, filename: str) -> Iterator[Document]:
    """Parse every document of ``text``; a syntax error yields one document holding the error."""
    try:
        nodes = list(yaml.compose_all(text, Loader=_Loader))
    except yaml.MarkedYAMLError as err:
        yield Document(None, SourceMap(filename), 0, (_syntax_error(err, filename),))
        return
    except yaml.YAMLError as err:  # errors without a mark (e.g. bad encoding)
        yield Document(None, SourceMap(filename), 0, (_plain_syntax_error(str(err), filename),))
        return
    for index, node in enumerate(nodes):
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag.endswith(":null") and not node.value):
            continue  # an empty document between two separators
        builder = _Builder(filename)
        try:
            data = builder.build(node, ())
        except _Refused as err:
            refused = Diagnostic(code="yaml-syntax", message=err.message, hint=err.hint, span=err.span)
            yield Document(None, builder.source, index, (refused,))
            continue
        yield Document(data, builder.source, index, tuple(builder.diagnostics))


def _syntax_error(err: yaml.MarkedYAMLError, filename: str) -> Diagnostic:
    mark = err.problem_mark or err.context_mark
    span = Span(filename, mark.line + 1, mark.column + 1) if mark else Span(filename, 1, 1)
    what = " ".join(part for part in (err.context, err.problem) if part)
    hint = "check the indentation and quoting around this position"
    if "tab" in what:
        hint = "YAML indents with spaces only: replace the tab with spaces"
    return Diagnostic(code="yaml-syntax", message=f"not valid YAML: {what}", hint=hint, span=span)


def _plain_syntax_error(text: str, filename: str) -> Diagnostic:
    return Diagnostic(
        code="yaml-syntax",
        message=f"not valid YAML: {text}",
        hint="save the file as UTF-8 text",
        span=Span(filename, 1, 1),
    )
