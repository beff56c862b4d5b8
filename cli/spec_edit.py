"""Edit a spec file's text in place: replace node classes' ``sharing`` and add a section, leaving every other line
byte for byte as the user wrote it (comments, indentation, spacing, quoting, ``46068Mi``, ``---``, line endings).

A ``plan --draft`` is read back by people (the TODOs `cluster discover` writes are the point of its draft), so it
is a splice, not a re-serialisation: the YAML composer says where each ``sharing`` value starts and ends, and only
those lines are rewritten. The composer is the one that loaded and validated the spec, so a spec `validate`
accepts is a spec this can edit (a second, stricter parser refused tabs before comments that PyYAML allows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from policy.spec.source import compose_document

__all__ = ["edit_spec"]

_INDENT = 2


@dataclass(frozen=True)
class _Edit:
    """Replace ``lines[first:last]`` (``last`` excluded) with ``new``; ``first == last`` inserts."""

    first: int
    last: int
    new: list[str]


def edit_spec(text: str, sharing: Mapping[int, Any], sections: Mapping[str, Any] | None = None) -> str:
    """``text`` with ``spec.nodeClasses[i].sharing`` set to ``sharing[i]`` and each of ``sections`` added to
    ``spec`` where it has none (after ``devicePlugin``).  Every other line comes out as it went in."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").split("\n")
    root = compose_document("\n".join(lines))
    spec = _value(root, "spec")
    classes = _value(spec, "nodeClasses")
    assert isinstance(spec, yaml.MappingNode) and isinstance(classes, yaml.SequenceNode)
    edits = [edit for index, value in sorted(sharing.items())
             if (edit := _sharing_edit(lines, classes.value[index], value)) is not None]
    for key, value in (sections or {}).items():
        if _entry(spec, key) is None:
            edits.append(_section_edit(spec, key, value))
    for edit in sorted(edits, key=lambda e: e.first, reverse=True):
        lines[edit.first:edit.last] = edit.new
    return newline.join(lines)


def _sharing_edit(lines: list[str], node_class: yaml.Node, value: Any) -> _Edit | None:
    assert isinstance(node_class, yaml.MappingNode)
    found = _entry(node_class, "sharing")
    if found is None:
        return _insert_after(node_class, "sharing", value)
    key, old = found
    if _construct(old) == value:
        return None  # already so: keep it as written, comments and all
    line, column = key.start_mark.line, key.start_mark.column
    end = _end_line(old)
    # The key's line keeps what stands before the key (`- ` of a sequence item); what followed the old value on its
    # last line (an end-of-line comment) described the old value and goes with it.
    block = _dump_entry("sharing", value, column)
    block[0] = lines[line][:column] + block[0][column:]
    return _Edit(line, end + 1, block)


def _section_edit(spec: yaml.MappingNode, key: str, value: Any) -> _Edit:
    after = _entry(spec, "devicePlugin")
    return _insert_after(spec, key, value, after[1] if after else None)


def _insert_after(mapping: yaml.MappingNode, key: str, value: Any, after: yaml.Node | None = None) -> _Edit:
    """``key: value`` as a new entry of ``mapping`` after ``after`` (default: its last entry)."""
    column = mapping.value[0][0].start_mark.column
    line = _end_line(after if after is not None else mapping.value[-1][1]) + 1
    return _Edit(line, line, _dump_entry(key, value, column))


def _dump_entry(key: str, value: Any, column: int) -> list[str]:
    text = yaml.safe_dump({key: value}, default_flow_style=False, sort_keys=False, width=4096, indent=_INDENT)
    return [" " * column + line for line in text.rstrip("\n").split("\n")]


def _entry(mapping: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    if not isinstance(mapping, yaml.MappingNode):
        return None
    return next(((k, v) for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _value(mapping: yaml.Node, key: str) -> yaml.Node:
    found = _entry(mapping, key)
    if found is None:
        raise KeyError(key)
    return found[1]


def _end_line(node: yaml.Node) -> int:
    """The last line holding part of ``node``: a block collection ends where its last item does (its own end mark
    lies past the comments and blank lines that follow it)."""
    while isinstance(node, yaml.CollectionNode) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    mark = node.end_mark
    # A block scalar (`|`) ends at the start of the line after it.
    return mark.line - 1 if mark.column == 0 and mark.line > node.start_mark.line else mark.line


def _construct(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()
