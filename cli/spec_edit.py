"""Edit a spec file's text in place: replace node classes' ``sharing`` and add a section, keeping the rest as the
user wrote it (comments, key order, quoting, ``46068Mi``).

A ``plan --draft`` is read back by people (the TODOs `cluster discover` writes are the point of its draft), so
it goes through a round-trip YAML parser (ruamel.yaml) instead of a load and a re-serialisation, which would drop
every comment and re-sort the keys.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

__all__ = ["edit_spec"]

# The block styles specs are written in: the project's (`- ` two columns in under its key) and the flush one.
_STYLES = ((2, 4, 2), (2, 2, 0))


def edit_spec(text: str, sharing: Mapping[int, Any], sections: Mapping[str, Any] | None = None) -> str:
    """``text`` with ``spec.nodeClasses[i].sharing`` set to ``sharing[i]`` and each of ``sections`` added to
    ``spec`` where it has none (after ``devicePlugin``).  Everything else comes out as it went in."""
    yaml = _yaml(text)
    data = yaml.load(text)
    spec = data["spec"]
    classes = spec["nodeClasses"]
    for index, value in sorted(sharing.items()):
        _replace(classes[index], "sharing", value)
    for key, value in (sections or {}).items():
        if key not in spec:
            keys = list(spec)
            at = keys.index("devicePlugin") + 1 if "devicePlugin" in keys else len(keys)
            spec.insert(at, key, _plain(value))
    return _dump(yaml, data)


def _yaml(text: str) -> YAML:
    """A round-trip parser indenting as ``text`` does (the first style that reproduces it, else the project's)."""
    for style in _STYLES:
        yaml = _make(style)
        if _dump(yaml, yaml.load(text)) == text:
            return yaml
    return _make(_STYLES[0])


def _make(style: tuple[int, int, int]) -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long line the user wrote on one
    mapping, sequence, offset = style
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _dump(yaml: YAML, data: Any) -> str:
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _replace(mapping: CommentedMap, key: str, value: Any) -> None:
    """Set ``mapping[key]``, moving the comment that follows the old value (ruamel keeps the comment lines after a
    block on the block's last scalar: e.g. the next class's heading) to the end of the new value."""
    if key in mapping and _data(mapping[key]) == _data(value):
        return  # already so: keep it as written, comments and all
    new = _plain(value)
    tail = _pop_tail(mapping, key) if key in mapping else None
    if key in mapping:
        mapping[key] = new
    else:
        mapping.insert(len(mapping), key, new)
    if tail is not None:
        holder, last = _last_scalar(mapping, key)
        holder.ca.items[last] = tail


def _last_scalar(holder: Any, key: Any) -> tuple[Any, Any]:
    """Where the comment after the value ``holder[key]`` is kept: the innermost last entry of a block."""
    value = holder[key]
    if isinstance(value, CommentedMap) and len(value):
        return _last_scalar(value, list(value)[-1])
    if isinstance(value, CommentedSeq) and len(value):
        return _last_scalar(value, len(value) - 1)
    return holder, key


def _pop_tail(holder: Any, key: Any) -> list[Any] | None:
    """Take the comment after the value ``holder[key]``, without its end-of-line part: that one described the
    value being replaced."""
    where, last = _last_scalar(holder, key)
    entry = where.ca.items.pop(last, None)
    token = entry[2] if entry is not None and len(entry) > 2 else None
    if token is None:
        return None
    text = token.value
    if not text.startswith("\n"):
        text = text.partition("\n")[2]
        if not text.strip():
            return None
        token.value = "\n" + text if not text.startswith("\n") else text
    return entry


def _data(value: Any) -> Any:
    """Round-trip nodes as plain data, to compare."""
    if isinstance(value, Mapping):
        return {str(k): _data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_data(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """Plain data as round-trip nodes in block style (a bare dict would be written in flow style)."""
    if isinstance(value, Mapping):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _plain(v)
        return out
    if isinstance(value, list | tuple):
        return CommentedSeq(_plain(v) for v in value)
    return value
