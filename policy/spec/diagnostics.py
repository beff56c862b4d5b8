"""Diagnostics: one located finding type shared by validation, checks and admission."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, Union, get_args, get_origin

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
    "tenant-label-keys",
    "tenant-label-unguarded",
    "tenancy-gitops-unnamed",
    "tenancy-manager-too-broad",
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
    "dra-kubernetes-too-old",
    "dra-unknown-driver-version",
    "dra-gate-needs-release",
    "dra-kubernetes-gate-off",
    "dra-gates-exclusive",
    "dra-gate-turned-off",
    "dra-unsupported-sharing",
    "dra-consumable-shares-driver-wide",
    "dra-classes-indistinguishable",
    "dra-tenant-namespaces-unnamed",
]

#: Codes of the workload inventory `gpupolicy plan` reads (policy/plan/inventory.py), beside the reading and model
#: codes above it shares with the spec (docs/plan.md explains each).
InventoryCode = Literal[
    "empty-inventory",
    "invalid-export",
    "incomplete-workload",
]

#: Admission notices: an object gpupolicy did not check, said so instead of passing it silently, and a Namespace
#: whose tenant labels someone other than a tenancy manager set (docs/operations.md).
NoticeCode = Literal[
    "workload-not-checked",
    "cloud-vgpu-not-checked",
    "unknown-gpu-annotation",
    "tenant-label-set-by-non-manager",
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
    """True when `bounded` surely leaves every string in JSON-like ``data`` whole: none of them, key or value, is
    longer than MAX_QUOTED_CHARS, and `bounded` returns such a string as it is. Told from the data's JSON: a string
    without escapes is its opening quote and a run of bytes without one, at least as long as the string, so a JSON
    with no backslash and no such run longer than MAX_QUOTED_CHARS holds no longer string. A quick answer for what
    is nearly always so (a fix's paths and names); False sends ``quotable`` the long way."""
    try:
        text = orjson.dumps(data)
    except orjson.JSONEncodeError:
        return False
    return b"\\" not in text and _LONG_RUN.search(text) is None


# Anchored at a quote so that each run between quotes is scanned once (linear in the JSON).
_LONG_RUN = re.compile(rb'"[^"]{%d,}' % (MAX_QUOTED_CHARS + 1))


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


def from_validation_error(err: ValidationError, data: Any, root: type[BaseModel],
                          texts: Mapping[Path, str] | None = None) -> tuple[Diagnostic, ...]:
    """Convert every pydantic error into a Diagnostic whose path is spelled like the user's keys.

    ``texts`` (the source text of the document's plain non-string scalars, by path) lets a hint quote a value as
    it was written: ``1.30``, which YAML read as the number 1.3.
    """
    out: list[Diagnostic] = []
    seen: set[Path] = set()
    for item in err.errors(include_url=False):
        path, was_union = _input_path(item["loc"], data)
        if item["type"] == "too_short" and _spurious_too_short(item):
            continue
        if was_union and path in seen:
            continue  # one message per place: the other union branches say the same thing
        seen.add(path)
        out.append(_convert(item, path, data, root, texts or {}))
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


def _convert(item: Any, path: Path, data: Any, root: type[BaseModel], texts: Mapping[Path, str]) -> Diagnostic:
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
        corrected = corrected_line(root, path, given, texts.get(path))
        if corrected is not None:
            hint = f"write {corrected}"
        elif kind == "string_type" and isinstance(given, int | float | bool):
            hint = "quote it, so YAML reads it as text (1.30 unquoted is the number 1.3, on is true)"
        elif expected == "a mapping" and (fields := _fields_at(root, path)):
            hint = f"write it as a mapping of its fields: {', '.join(fields)}"
        else:
            hint = f"write it as {expected}"
        return Diagnostic("wrong-type", f"{where} must be {expected} (got {type(given).__name__} "
                          f"{shorten(repr(given))})", path, hint)
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
    # `X | None` is a types.UnionType, `Optional[X]` a typing.Union: both are walked into.
    return [m for arg in get_args(tp) for m in _models_in(arg)] if get_origin(tp) in (Union, None, Annotated,
                                                                                        types.UnionType) else []


def _is_container(tp: Any) -> bool:
    return get_origin(tp) in (tuple, list, dict)


def _item_types(tp: Any) -> list[Any]:
    origin = get_origin(tp)
    if origin in (tuple, list):
        return [a for a in get_args(tp) if a is not Ellipsis]
    if origin is dict:
        return list(get_args(tp))[1:]
    return [t for arg in get_args(tp) for t in _item_types(arg)]


# ---------------------------------------------------------------------------------------------------------------
# Corrected lines: a wrong-type value rewritten from the user's own values into the type the field takes
# ---------------------------------------------------------------------------------------------------------------

#: Item keys that name what a list item is about, in a list the user wrote where a mapping belongs
#: (`layout: [{profile: 1g.10gb, count: 7}]`, `nodeSelector: [{key: pool, value: t4}]`).
_NAMING_KEYS = ("profile", "name", "key", "label", "resource")
_PLAIN = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+ -]*")  # what YAML's flow context reads as plain text
_PAIR = re.compile(r"\s*([^=:,\s][^=:,]*?)\s*(?:=|:\s)\s*([^,]*?)\s*")
#: How many models deep a value may be wrapped (`timeSlicing: 4621Mi` -> {sizing: {memoryPerReplica: 4621Mi}}).
#: Only the outermost rewrite may leave required fields as <field> or convert a scalar (a quoted "1" to 1): deeper
#: down, a guess on a guess (`spec: 4` as a class's node count) says nothing the user meant.
_MAX_DEPTH = 2


class _Missing:
    """A required field the corrected line cannot fill from the user's values: written <field>."""

    def __init__(self, name: str) -> None:
        self.name = name


def corrected_line(root: type[BaseModel], path: Path, given: Any, text: str | None = None) -> str | None:
    """The line a wrong-type value should have been, made from what the user wrote (``layout: {1g.10gb: 7}`` for
    ``layout: [{profile: 1g.10gb, count: 7}]``), or None where no value of the right type can be made from it.

    A rewrite is offered only if the field's own type accepts its shape: pydantic validates it and no type error
    (nor a missing or unknown field) remains at its top or one level below; a required field it cannot fill is
    written ``<field>``. Problems deeper inside, the user's own, are reported once the shape is right.
    """
    annotations = _annotations_at(root, path)
    if not annotations:
        return None
    found = _corrected(annotations, given, text, _MAX_DEPTH)
    if found is None:
        return None
    key = path[-1] if path else None
    line = f"{_flow_key(key)}: {_flow(found)}" if isinstance(key, str) else (
        f"- {_flow(found)}" if isinstance(key, int) else _flow(found))
    return shorten(line)


def _corrected(annotations: Sequence[Any], given: Any, text: str | None, depth: int) -> Any:
    """The first candidate that fits; else, at the outermost level only, the first that fits but for <field>s."""
    partial = None
    for candidate in _candidates(annotations, given, text, depth):
        verdict = _verdict(annotations, candidate)
        if verdict == "fits":
            return candidate
        if verdict == "partial" and partial is None and depth == _MAX_DEPTH:
            partial = candidate
    return partial


def _verdict(annotations: Sequence[Any], candidate: Any) -> Literal["fits", "partial", "no"]:
    """Whether a candidate has the field's shape: fits, or fits once required fields (written <field>) are given."""
    from pydantic import TypeAdapter, ValidationError

    best: Literal["fits", "partial", "no"] = "no"
    for annotation in annotations:
        try:
            TypeAdapter(annotation).validate_python(_without_missing(candidate))
        except ValidationError as err:
            shallow = [e for e in err.errors(include_url=False) if len(_input_path(e["loc"], candidate)[0]) <= 1]
            if not any(_misshapen(e) for e in shallow):
                return "fits"  # only the user's own values are wrong now (a count above 7, a bad name)
            if all(e["type"] == "missing" for e in shallow) and _holds_missing(candidate):
                best = "partial"
            continue
        except (TypeError, ValueError):
            continue  # an annotation pydantic cannot build an adapter for here: no suggestion from it
        return "fits"
    return best


#: Errors that say a candidate still has the wrong shape (not merely a value of the user's that is wrong).
_MISSHAPEN = frozenset({*_WRONG_TYPE, "extra_forbidden", "missing", "replicas-or-sizing", "layout-or-groups",
                        "sharing-modes-conflict"})


def _misshapen(error: Any) -> bool:
    # A mapping or list where a choice of words belongs is a shape error too, whatever pydantic calls it.
    return error["type"] in _MISSHAPEN or (error["type"] == "literal_error"
                                           and isinstance(error.get("input"), dict | list))


def _candidates(annotations: Sequence[Any], given: Any, text: str | None, depth: int) -> Iterator[Any]:
    """Values of other types made from `given`, most literal first."""
    for annotation in annotations:
        shape = _shape(annotation)
        outermost = depth == _MAX_DEPTH  # scalar conversions are for the value itself only (see _MAX_DEPTH)
        if shape == "mapping":
            yield from _as_mapping(given)
        elif shape == "list":
            yield from _as_list(annotation, given, text, depth)
        elif shape == "model" and depth > 0:
            yield from _as_model(annotation, given, text, depth)
        elif shape == "int" and outermost:
            yield from _as_int(given)
        elif shape == "float" and outermost:
            yield from _as_float(given)
        elif shape == "bool" and outermost:
            yield from _as_bool(given)
        elif shape == "str" and outermost:
            yield from _as_str(given, text)


def _as_mapping(given: Any) -> Iterator[Any]:
    if isinstance(given, list) and given:
        if all(isinstance(i, dict) and len(i) == 1 for i in given):  # [{1g.10gb: 7}, {2g.20gb: 1}]
            keys = [next(iter(i)) for i in given]
            if len(set(keys)) == len(keys):
                yield {k: v for i in given for k, v in i.items()}
        if all(isinstance(i, dict) and len(i) == 2 for i in given):  # [{profile: 1g.10gb, count: 7}]
            pairs = [_named_pair(i) for i in given]
            if all(p is not None for p in pairs) and len({p[0] for p in pairs if p}) == len(pairs):
                yield dict(p for p in pairs if p)
        if all(isinstance(i, str) for i in given):
            pairs = [_pair(i) for i in given]
            if all(p is not None for p in pairs):  # [pool=t4, zone=a], [1g.10gb=7]
                yield from _pairs_as_mapping([p for p in pairs if p])
            else:  # [1g.10gb, 1g.10gb, 3g.40gb]: a count per name
                counts: dict[str, int] = {}
                for name in given:
                    counts[name] = counts.get(name, 0) + 1
                yield counts
        if all(isinstance(i, dict) for i in given):  # [{model: T4}, {count: 1}]: the items' keys side by side
            merged = {k: v for i in given for k, v in i.items()}
            if len(merged) == sum(len(i) for i in given):
                yield merged
    if isinstance(given, str):
        pairs = [_pair(part) for part in given.split(",")]
        if all(p is not None for p in pairs):  # "pool=t4,zone=a", as kubectl -l writes it
            yield from _pairs_as_mapping([p for p in pairs if p])


def _pairs_as_mapping(pairs: list[tuple[str, str]]) -> Iterator[Any]:
    """The pairs as a mapping: values as written, then with whole numbers as numbers (1g.10gb=7)."""
    if len({k for k, _ in pairs}) != len(pairs):
        return
    yield dict(pairs)
    if any(re.fullmatch(r"\d+", v) for _, v in pairs):
        yield {k: int(v) if re.fullmatch(r"\d+", v) else v for k, v in pairs}


def _named_pair(item: dict[Any, Any]) -> tuple[Any, Any] | None:
    """(name, value) of a two-key item whose naming key is known: {profile: 1g.10gb, count: 7} -> (1g.10gb, 7)."""
    named = next((k for k in _NAMING_KEYS if isinstance(item.get(k), str)), None)
    if named is None:
        return None
    other = next(k for k in item if k != named)
    return item[named], item[other]


def _pair(text: str) -> tuple[str, str] | None:
    match = _PAIR.fullmatch(text)
    return (match[1], match[2]) if match else None


def _as_list(annotation: Any, given: Any, text: str | None, depth: int) -> Iterator[Any]:
    if isinstance(given, str) and "," in given:  # "mig, exclusive"
        yield [part.strip() for part in given.split(",") if part.strip()]
    if isinstance(given, dict) and given and all(isinstance(v, dict) and "name" not in v for v in given.values()):
        yield [{"name": k, **v} for k, v in given.items()]  # nodeClasses: {t4: {...}}: one item per name
    if not isinstance(given, list):
        yield [given]
        items = _branches([a for a in get_args(_unannotated(annotation)) if a is not Ellipsis])
        if depth > 0 and (item := _corrected(items, given, text, depth - 1)) is not None:
            yield [item]  # taints: dedicated=train:NoSchedule -> [{key: dedicated, ...}]


def _unannotated(annotation: Any) -> Any:
    return _unannotated(get_args(annotation)[0]) if get_origin(annotation) is Annotated else annotation


def _as_int(given: Any) -> Iterator[Any]:
    if isinstance(given, str) and re.fullmatch(r"\s*[-+]?\d+\s*", given):
        yield int(given)
    if isinstance(given, float) and given.is_integer():
        yield int(given)


def _as_float(given: Any) -> Iterator[Any]:
    if isinstance(given, str):
        try:
            yield float(given)
        except ValueError:
            return


def _as_bool(given: Any) -> Iterator[Any]:
    if isinstance(given, str) and given.strip().lower() in {"true", "false", "yes", "no", "on", "off"}:
        yield given.strip().lower() in {"true", "yes", "on"}


def _as_str(given: Any, text: str | None) -> Iterator[Any]:
    if isinstance(given, bool):
        yield text if text is not None else ("true" if given else "false")
    elif isinstance(given, int | float):
        yield text if text is not None else str(given)


def _as_model(model: Any, given: Any, text: str | None, depth: int) -> Iterator[Any]:
    """A scalar or list written where a mapping of fields belongs: each field it could be (`timeSlicing: 4` ->
    {replicas: 4}, `admission: false` -> {enabled: false}), with the other required fields as <field>."""
    from pydantic import BaseModel

    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return
    if isinstance(given, list):
        yield from _as_mapping(given)
        if len(given) == 1 and isinstance(given[0], dict):
            yield given[0]
        return
    if isinstance(given, dict):
        return
    fields = {info.alias or name: info for name, info in model.model_fields.items()}
    if isinstance(given, str) and {"key", "value", "effect"} <= set(fields):
        yield from _as_taint(given)
    # A field that takes the value as it is comes first (`gpu: 4` is a count, not a model named "4"), then one that
    # takes a rewrite of it (`timeSlicing: 4621Mi` is a sizing).
    as_is = {alias: given for alias, info in fields.items() if _accepts(info.annotation, given)}
    made = {alias: value for alias, info in fields.items()
            if (value := _corrected(_branches([info.annotation]), given, text, depth - 1)) is not None} \
        if not as_is else {}
    alias = _meant(fields, as_is or made)
    if alias is not None:
        value = (as_is or made)[alias]
        # The fields in the model's order, the other required ones written <field>.
        yield {other: value if other == alias else _Missing(other) for other, info in fields.items()
               if other == alias or info.is_required()}


def _meant(fields: Mapping[str, Any], takers: Mapping[str, Any]) -> str | None:
    """Which field a lone value was meant for, where that is no guess: the only required field that takes it (a
    GPU's model, a sizing's memoryPerReplica), else the model's first field, which names what the block is
    (replicas, splitCount, enabled, source), else the only field that takes it when no other is required."""
    required = [a for a in takers if fields[a].is_required()]
    if len(required) == 1:
        return required[0]
    first = next(iter(fields), None)
    if first in takers:
        return first
    if len(takers) == 1 and not any(info.is_required() for info in fields.values()):
        return next(iter(takers))
    return None


def _as_taint(text: str) -> Iterator[Any]:
    """kubectl's taint syntax, key[=value]:Effect, as the mapping a spec writes."""
    match = re.fullmatch(r"\s*([^=:\s]+)(?:=([^:\s]*))?:(\w+)\s*", text)
    if match:
        yield {"key": match[1], **({"value": match[2]} if match[2] else {}), "effect": match[3]}


def _accepts(annotation: Any, given: Any) -> bool:
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(annotation).validate_python(given)
    except (ValidationError, TypeError, ValueError):
        return False
    return True


def _shape(annotation: Any) -> str:
    """What kind of value a (non-union) annotation takes, as far as rewriting goes."""
    from pydantic import BaseModel

    origin = get_origin(annotation)
    if origin is Annotated:
        return _shape(get_args(annotation)[0])
    if origin in (dict, Mapping):
        return "mapping"
    if origin in (tuple, list):
        return "list"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model"
    if annotation is bool:
        return "bool"
    if annotation is int:
        return "int"
    if annotation is float:
        return "float"
    if annotation is str:
        return "str"
    return "other"


def _annotations_at(root: type[BaseModel], path: Path) -> list[Any]:
    """The annotations the value at `path` may take (every branch of a union), by walking the model."""
    candidates: list[Any] = [root]
    for part in path:
        nxt: list[Any] = []
        for tp in _branches(candidates):
            for model in _models_in(tp):
                for name, info in model.model_fields.items():
                    if part in (info.alias, name):
                        nxt.append(info.annotation)
            origin = get_origin(tp)
            if origin in (tuple, list) and isinstance(part, int):
                nxt.extend(a for a in get_args(tp) if a is not Ellipsis)
            elif origin is dict and not isinstance(part, int):
                nxt.extend(get_args(tp)[1:])
        candidates = nxt
    return _branches(candidates)


def _branches(annotations: Sequence[Any]) -> list[Any]:
    """Every non-union annotation among `annotations` (Optional's None dropped), each once, in order."""
    out: list[Any] = []
    for tp in annotations:
        origin = get_origin(tp)
        if origin is Union or origin is types.UnionType:
            out.extend(_branches([a for a in get_args(tp) if a is not type(None)]))
        elif origin is Annotated:
            inner = get_args(tp)[0]
            out.extend(_branches([inner]) if get_origin(inner) in (Union, types.UnionType) else [tp])
        elif tp is not type(None) and tp not in out:
            out.append(tp)
    return out


def _without_missing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_missing(v) for k, v in value.items() if not isinstance(v, _Missing)}
    if isinstance(value, list):
        return [_without_missing(v) for v in value]
    return value


def _holds_missing(value: Any) -> bool:
    if isinstance(value, _Missing):
        return True
    if isinstance(value, dict):
        return any(_holds_missing(v) for v in value.values())
    return isinstance(value, list) and any(_holds_missing(v) for v in value)


def _flow(value: Any) -> str:
    """A value as YAML flow text, the way a spec writes it inline: {1g.10gb: 7}, [mig, exclusive], "1.30"."""
    if isinstance(value, _Missing):
        return f"<{value.name}>"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flow_key(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    return _flow_str(str(value))


def _flow_key(key: Any) -> str:
    return _flow(key) if not isinstance(key, str) else _flow_str(key)


def _flow_str(text: str) -> str:
    """Plain where YAML reads the plain text back as this string (not 1.30, true, on, 010 or null), else quoted."""
    import yaml

    if _PLAIN.fullmatch(text) and not text.endswith(" "):
        try:
            if yaml.safe_load(text) == text:
                return text
        except yaml.YAMLError:
            pass
    return orjson.dumps(text).decode("utf-8")
