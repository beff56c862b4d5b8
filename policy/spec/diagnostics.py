"""Diagnostics: one located finding type shared by validation, checks and admission."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, get_args, get_origin

import orjson

from policy.kube.fields import Path, PathPart

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

Severity = Literal["error", "warning", "info"]

#: Every diagnostic code the spec loader and the checks can emit.  Codes are stable
#: identifiers (documented in docs/spec-reference.md); messages may improve freely.
Code = Literal[
    # reading the file
    "unreadable-file",
    "yaml-syntax",
    "duplicate-key",
    "yaml11-boolean",
    "yaml11-octal",
    "yaml11-sexagesimal",
    "not-a-mapping",
    "empty-document",
    "multiple-documents",
    # the model
    "unknown-field",
    "missing-field",
    "wrong-type",
    "invalid-value",
    "unsupported-api-version",
    "unsupported-kind",
    "replicas-or-sizing",
    "layout-or-groups",
    "sharing-modes-conflict",
    # semantic checks
    "unknown-gpu-model",
    "duplicate-class-name",
    "duplicate-tenant-name",
    "overlapping-node-classes",
    "shared-product-selector",
    "replicas-too-low",
    "sizing-exceeds-memory",
    "sizing-below-two-replicas",
    "mig-unsupported-gpu",
    "unknown-mig-profile",
    "mig-layout-does-not-fit",
    "mig-group-gpu-out-of-range",
    "mig-group-gpu-overlap",
    "mig-groups-incomplete",
    "mig-single-needs-one-profile",
    "mig-time-slicing-unknown-profile",
    "mps-replicas-above-client-cap",
    "mps-unsupported-version",
    "version-unsupported-feature",
    "unsupported-plugin-version",
    "unknown-plugin-version",
    "mig-profile-needs-plugin-release",
    "mig-profiles-share-resource",
    "mig-resource-renamed",
    "operator-image-set",
    "operator-mig-strategy-conflict",
    "operator-flags-ignored",
    "unknown-operator-version",
    "operator-plugin-version-mismatch",
    "reserved-class-name",
    "tenant-unknown-class",
    "tenant-mode-unavailable",
    "default-mode-unavailable",
    "tenant-overlap",
    "tenant-selector-too-complex",
    "memory-override-on-known-model",
    "hami-unsupported-version",
    "hami-setting-cluster-wide",
    "hami-resource-name-collision",
    "hami-webhook-scope-inexpressible",
    "vgpu-split-count-one",
    "vgpu-memory-overcommit",
    "mig-clients-namespace-split",
    "gpu-model-typo",
    "driver-too-old",
]

#: Codes of the workload inventory `gpupolicy plan` reads (policy/plan/inventory.py), beside the reading and model
#: codes above it shares with the spec (docs/plan.md explains each).
InventoryCode = Literal[
    "empty-inventory",
    "invalid-export",
    "incomplete-workload",
]

#: Admission notices: an object gpupolicy did not check, said so instead of passing it silently (docs/operations.md).
NoticeCode = Literal[
    "workload-not-checked",
    "cloud-vgpu-not-checked",
]


@dataclass(frozen=True, order=True)
class Span:
    """A position in a source file; line and column are 1-based."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class Remedy(Protocol):
    """What a finding's fix (policy/admission/fixes.py Fix) offers those who report it."""

    def describe(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...

    @property
    def quoted(self) -> dict[str, Any] | None:
        """to_dict() when every string in it survives quoting whole (quotable), else None."""

    def under(self, prefix: Path) -> Remedy: ...


@dataclass(frozen=True)
class Diagnostic:
    """One finding: what was found, where, and how to fix it."""

    code: str
    message: str
    path: Path = ()
    hint: str = ""
    severity: Severity = "error"
    span: Span | None = None
    fix: Remedy | None = None
    """Admission findings: the edits the hint stands for, verified to admit the object (policy/admission/fixes.py)."""

    def at(self, span: Span | None) -> Diagnostic:
        return replace(self, span=span)


class PolicyError(Exception):
    """Raised where a caller cannot go on (e.g. a spec that does not load)."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("; ".join(d.message for d in self.diagnostics) or "invalid policy")


MAX_QUOTED_CHARS = 320  # a value quoted back into a message: past any valid name, never a megabyte


def shorten(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """``text`` cut to ``limit`` characters, keeping its start and end and saying how much was left out: values
    from the input are quoted into messages, and the input may hold a megabyte in one field."""
    if len(text) <= limit:
        return text
    keep = max(limit - 30, 2)
    return f"{text[: keep - keep // 4]}…[{len(text) - keep} more characters]…{text[len(text) - keep // 4:]}"


MAX_LINE_CHARS = 4000  # one finding as text: a denial's status.message and a log line stay readable
_LONG_TOKEN = re.compile(rf"\S{{{MAX_QUOTED_CHARS + 1},}}")


def bounded(text: str) -> str:
    """A finding's text with every overlong run of non-blank characters (a value quoted from the input: no
    Kubernetes name or label is longer than 316 characters) shortened, and the whole capped."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text  # no run in it is overlong, and it is far under the cap
    return shorten(_LONG_TOKEN.sub(lambda m: shorten(m.group()), text), MAX_LINE_CHARS)


def quotable(data: Any) -> Any:
    """JSON-like ``data`` (a fix's edits and patch) when `bounded` leaves every string in it whole, else None: a
    value cut short would make a patch that edits another path. Only an object the API server refuses (a
    container name of a megabyte) holds such a string; its findings still say what is wrong."""
    return data if _no_long_string(data) or _whole(data) else None


def _whole(data: Any) -> bool:
    if isinstance(data, str):
        return bounded(data) == data
    if isinstance(data, Mapping):
        return all(_whole(k) and _whole(v) for k, v in data.items())
    if isinstance(data, list | tuple):
        return all(_whole(v) for v in data)
    return True


def _no_long_string(data: Any) -> bool:
    """True when `bounded` surely leaves every string in JSON-like ``data`` whole: its JSON is within the line
    cap and holds no run of more than MAX_QUOTED_CHARS non-blank bytes. Each string's JSON is at least as long as
    the string, and a run of non-blank characters in it stays one in its JSON (escapes and UTF-8 bytes are
    non-blank too), so what is true of the JSON is true of every string. A quick answer for what is nearly
    always so (a fix's paths and names); False sends ``quotable`` the long way."""
    try:
        text = orjson.dumps(data)
    except orjson.JSONEncodeError:
        return False
    return len(text) <= MAX_LINE_CHARS and _LONG_RUN.search(text) is None


_LONG_RUN = re.compile(rb"\S{%d,}" % (MAX_QUOTED_CHARS + 1))


def format_path(path: Path) -> str:
    """Render a location tuple the way users read it: ``spec.nodeClasses[0].gpu.model``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in part or "/" in part:
            out += f'["{part}"]'
        else:
            out += f".{part}" if out else part
    return out


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)


def did_you_mean(word: str, choices: Iterable[str], limit: int = 1) -> tuple[str, ...]:
    """Closest spellings of ``word`` among ``choices``, case-insensitively."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=limit, cutoff=0.6)
    return tuple(by_lower[c] for c in close)


def sort_key(d: Diagnostic) -> tuple[str, int, int, str]:
    if d.span is None:
        return ("", 0, 0, d.code)
    return (d.span.file, d.span.line, d.span.column, d.code)


_WRONG_TYPE = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
}
_CUSTOM_CODES = {"replicas-or-sizing", "layout-or-groups", "sharing-modes-conflict", "wrong-type", "invalid-value"}


def from_validation_error(err: ValidationError, data: Any, root: type[BaseModel]) -> tuple[Diagnostic, ...]:
    """Convert every pydantic error into a Diagnostic whose path is spelled like the user's keys."""
    out: list[Diagnostic] = []
    seen: set[Path] = set()
    for item in err.errors(include_url=False):
        path, was_union = _input_path(item["loc"], data)
        if item["type"] == "too_short" and _spurious_too_short(item):
            continue
        if was_union and path in seen:
            continue  # one message per place: the other union branches say the same thing
        seen.add(path)
        out.append(_convert(item, path, data, root))
    return tuple(out)


def _spurious_too_short(item: Any) -> bool:
    # pydantic re-reports a non-empty tuple whose items failed as "too short after validation"
    given = item.get("input")
    return isinstance(given, list | tuple | dict) and len(given) >= int((item.get("ctx") or {}).get("min_length", 1))


def _input_path(loc: tuple[Any, ...], data: Any) -> tuple[Path, bool]:
    """Keep only the loc parts that exist in the input; the rest are union branch tags."""
    path: list[PathPart] = []
    dropped = False
    current = data
    for part in loc:
        if _has_child(current, part):
            current = current[part]
            path.append(part)
        elif isinstance(current, dict) and not isinstance(part, int) and _looks_like_key(part):
            path.append(part)  # a missing key: it belongs in the path
            current = None
        else:
            dropped = True
    return tuple(path), dropped


def _has_child(current: Any, part: Any) -> bool:
    if isinstance(current, dict):
        return part in current
    return isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current)


def _looks_like_key(part: str) -> bool:
    return "[" not in part and "(" not in part and part not in {"str", "int", "bool", "float"}


def _convert(item: Any, path: Path, data: Any, root: type[BaseModel]) -> Diagnostic:
    kind = item["type"]
    ctx = item.get("ctx") or {}
    given = value_at(data, path)
    where = format_path(path) or "the document"
    if kind == "extra_forbidden":
        allowed = _fields_at(root, path[:-1])
        near = did_you_mean(str(path[-1]), allowed)
        hint = f"did you mean {near[0]!r}?" if near else f"allowed here: {', '.join(sorted(allowed))}"
        return Diagnostic("unknown-field", f"unknown field {path[-1]!r} in {format_path(path[:-1]) or 'the document'}",
                          path, hint)
    if kind == "missing":
        return Diagnostic("missing-field", f"{where} is required", path, f"add {path[-1]!r} here")
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        code = {"apiVersion": "unsupported-api-version", "kind": "unsupported-kind"}.get(str(path[-1]) if path else "",
                                                                                          "invalid-value")
        choices = [c.strip().strip("'") for c in expected.replace(" or ", ",").split(",") if c.strip()]
        near = did_you_mean(str(given), choices) if isinstance(given, str) else ()
        hint = f"did you mean {near[0]!r}?" if near else f"use one of: {expected}"
        return Diagnostic(code, f"{where} must be one of {expected} (got {given!r})", path, hint)
    if kind in _WRONG_TYPE:
        expected = _WRONG_TYPE[kind]
        hint = f"write it as {expected}"
        if isinstance(given, str) and kind.startswith("int"):
            hint = f"remove the quotes: {given}"
        elif kind == "string_type" and isinstance(given, int | float | bool):
            hint = "quote it, so YAML reads it as text (1.30 unquoted is the number 1.3, on is true)"
        return Diagnostic("wrong-type", f"{where} must be {expected} (got {type(given).__name__} {given!r})",
                          path, hint)
    if kind in _CUSTOM_CODES:
        return Diagnostic(kind, f"{where}: {item['msg']}", path, ctx.get("hint") or _custom_hint(kind))
    return Diagnostic("invalid-value", f"{where}: {_lower_first(item['msg'])} (got {given!r})", path,
                      _constraint_hint(kind, ctx, given))


def _custom_hint(kind: str) -> str:
    return {
        "replicas-or-sizing": "write replicas: N, or sizing: {memoryPerReplica: ..., reserve: ...}",
        "layout-or-groups": "write layout: {profile: count} for all GPUs, or groups: [{gpus: [...], layout: ...}]",
        "sharing-modes-conflict": "split the nodes into two classes, one per sharing mode",
    }.get(kind, "")


_DNS_LABEL_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


def _constraint_hint(kind: str, ctx: dict[str, Any], given: Any = None) -> str:
    if kind == "string_pattern_mismatch":
        return _pattern_hint(str(ctx.get("pattern")), given)
    if kind in {"greater_than_equal", "greater_than"}:
        return f"use a value of at least {ctx.get('ge', ctx.get('gt'))}"
    if kind in {"less_than_equal", "less_than"}:
        return f"use a value of at most {ctx.get('le', ctx.get('lt'))}"
    if kind in {"too_short", "string_too_short"}:
        return "it must not be empty"
    return ""


def _pattern_hint(pattern: str, given: Any) -> str:
    """A corrected value where the mistake is a common one, else the pattern itself."""
    text = str(given)
    if pattern == _DNS_LABEL_PATTERN:
        fixed = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
        return f"use lowercase letters, digits and '-': did you mean {fixed!r}?" if fixed else \
            "use lowercase letters, digits and '-'"
    if pattern.startswith("^v") and re.fullmatch(r"\d+\.\d+\.\d+", text):
        return f"release tags start with v: did you mean 'v{text}'?"
    return f"it must match {pattern}"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def value_at(data: Any, path: Path) -> Any:
    """The value at ``path`` into parsed JSON or YAML (mapping keys, list indices), or None where there is none."""
    for part in path:
        if isinstance(data, Mapping):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            return None
    return data


def _fields_at(root: type[BaseModel], path: Path) -> tuple[str, ...]:
    """Aliases accepted at ``path`` (by walking model field annotations), for did-you-mean."""
    candidates: list[Any] = [root]
    for part in path:
        nxt: list[Any] = []
        for tp in candidates:
            for model in _models_in(tp):
                for name, info in model.model_fields.items():
                    if part in (info.alias, name):
                        nxt.append(info.annotation)
            if isinstance(part, int) or _is_container(tp):
                nxt.extend(_item_types(tp))
        candidates = nxt
    return tuple(sorted({info.alias or name for tp in candidates for m in _models_in(tp)
                         for name, info in m.model_fields.items()}))


def _models_in(tp: Any) -> list[type[BaseModel]]:
    from pydantic import BaseModel

    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for arg in get_args(tp) for m in _models_in(arg)] if get_origin(tp) in (Union, None) or \
        str(get_origin(tp)) in {"typing.Annotated", "types.UnionType"} else []


def _is_container(tp: Any) -> bool:
    return get_origin(tp) in (tuple, list, dict)


def _item_types(tp: Any) -> list[Any]:
    origin = get_origin(tp)
    if origin in (tuple, list):
        return [a for a in get_args(tp) if a is not Ellipsis]
    if origin is dict:
        return list(get_args(tp))[1:]
    return [t for arg in get_args(tp) for t in _item_types(arg)]
