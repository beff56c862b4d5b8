"""Admission reviews: wire types, parsing, the admit-or-skip decision and the response; no Flask, no I/O."""

# This module is the webhook's pure core (like Flask's sansio layer): it turns request bytes into a Review,
# a Review plus an evaluator into a Verdict, and a Verdict into the response document. It reads no file, no
# clock and no global state, so every branch is tested without a socket (tests/webhook/test_review.py).

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, Protocol, TypedDict, cast, get_args

import orjson

from policy.admission import budget
from policy.spec.diagnostics import bounded, format_path

__all__ = [
    "API_VERSIONS",
    "MAX_WARNINGS_TOTAL_CHARS",
    "MAX_WARNING_CHARS",
    "AdmissionReviewOut",
    "Cause",
    "Evaluator",
    "MalformedReview",
    "Operation",
    "Review",
    "Verdict",
    "build_response",
    "decide",
    "fit_warnings",
    "internal_error",
    "json_bytes",
    "parse_review",
    "status_document",
]

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
OPERATIONS: tuple[Operation, ...] = get_args(Operation)
V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
#: Versions we answer in kind (webhook.md §0: v1, plus v1beta1 from older API servers and tools).
API_VERSIONS = (V1, V1BETA1)

# The API server truncates a warning over 256 characters and drops every warning once all of them pass
# 4096 characters; it asks for 120 or fewer each (webhook.md §1.2).
MAX_WARNING_CHARS = 120
MAX_WARNINGS_TOTAL_CHARS = 4096
_WARNING_PREFIX = re.compile(r"^\s*warning:\s*", re.IGNORECASE)

#: metav1.Status reasons for the HTTP errors we answer (k8s.io/apimachinery StatusReason).
STATUS_REASONS = {
    400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 408: "Timeout", 413: "RequestEntityTooLarge",
    414: "RequestURITooLong", 415: "UnsupportedMediaType", 422: "Invalid", 431: "RequestHeaderFieldsTooLarge",
    500: "InternalError", 503: "ServiceUnavailable",
}

#: At most this many JSON values (objects, arrays, strings, numbers, ...) in one body, checked before
#: json.loads builds them. Parsed, a value costs 30-190 bytes: 3 MiB of `{},` would be a million dicts and
#: 72 MiB. At this cap the costliest shapes measured (tracemalloc: one-key objects, distinct keys) peak at
#: 19-23 MiB. Real reviews hold about one value per 20 bytes: a 15 KB review ~700, the 3 MiB the API
#: server sends at most ~160,000.
MAX_JSON_VALUES = 200_000
#: Bodies up to this size are parsed without counting: even at the worst inflation they stay under 2 MiB.
UNCOUNTED_BYTES = 64 * 1024
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # "unrolled": one tight loop per run of plain bytes

# orjson builds the same values as json.loads in half the time (a review's parse was a sixth of its cost,
# docs/performance.md), except where the two differ, and there json.loads decides, so that every body gets
# the value or the error it got before (tests/webhook/test_review.py compares them on generated documents):
# * orjson refuses what json.loads reads beyond RFC 8259 (NaN, Infinity, numbers past a float's range, lone
#   surrogates, UTF-16 and UTF-32, a byte order mark): every body orjson refuses is parsed again by json.loads;
# * orjson reads an integer outside 64 bits as a float: a body with 19 digits in a row anywhere goes to
#   json.loads (an integer of 18 digits or fewer fits in 64 bits, whatever its sign);
# * json.loads refuses a document nested deeper than the recursion limit allows where it is called (about
#   950 in the server), orjson one deeper than 1,024: a body with 900 or more opening brackets goes to
#   json.loads (with fewer it cannot nest that deep).
# Bodies past 64 KiB (real reviews are 5-20 KB) all go to json.loads: looking at them would copy them.
#: bytes.translate table: digits to "1", opening brackets to "[", any other byte to "0".
_ORJSON_GUARD = bytes(0x31 if 0x30 <= b <= 0x39 else 0x5B if b in b"[{" else 0x30 for b in range(256))
_LONG_INTEGER = b"1" * 19
_ORJSON_MAX_OPENINGS = 900

#: Per-rule outcomes, as counted in metrics and written in request logs.
Outcome = Literal["allow", "deny", "warn", "audit", "skip", "error"]
_OUTCOME_BY_SEVERITY: dict[str, Outcome] = {"error": "deny", "warning": "warn", "info": "audit"}
NO_RULE = "none"
INTERNAL_ERROR_RULE = "internal-error"
BUDGET_RULE = "review-budget-exceeded"


# --- wire types (admission.k8s.io/v1 types.go; v1beta1 has the same shape) ----------------------------


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class StatusCause(TypedDict):
    """metav1.StatusCause: ``reason`` is a machine-readable cause type, ``field`` the path at fault."""

    reason: str
    message: str
    field: str


class StatusDetails(TypedDict):
    kind: str
    name: str
    causes: list[StatusCause]


class ResponseStatus(TypedDict):
    """The metav1.Status of a denial; the API server ignores it when allowed is true, and otherwise passes it to
    the client whole (apiserver admission/plugin/webhook/errors ToStatusErr), details included."""

    code: int
    reason: str
    message: str
    details: NotRequired[StatusDetails]


class ResponsePayload(TypedDict):
    uid: str
    allowed: bool
    status: NotRequired[ResponseStatus]
    warnings: NotRequired[list[str]]
    auditAnnotations: NotRequired[dict[str, str]]


class AdmissionReviewOut(TypedDict):
    apiVersion: str
    kind: Literal["AdmissionReview"]
    response: ResponsePayload


class Cause(TypedDict):
    """One reason a review is malformed, shaped like metav1.StatusCause."""

    field: str
    message: str


# --- parsing -------------------------------------------------------------------------------------------


class MalformedReview(Exception):
    """The body is not a usable AdmissionReview: a bad *call*, answered with HTTP 400 or 422, never 500.

    code 400 means the body is not JSON at all; 422 means it is JSON but not a valid AdmissionReview
    (the Kubernetes API's own split between BadRequest and Invalid). Every cause found is listed.
    """

    def __init__(self, causes: Sequence[Cause], *, code: Literal[400, 413, 422] = 422) -> None:
        self.causes = tuple(causes)
        self.code = code
        super().__init__("; ".join(f"{c['field']}: {c['message']}" if c["field"] else c["message"]
                                   for c in self.causes))


@dataclass(frozen=True)
class Review:
    """The parts of an AdmissionReview request the webhook reads; object contents pass through untouched."""

    api_version: str
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Operation
    sub_resource: str = ""
    namespace: str = ""
    name: str = ""
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    dry_run: bool = False
    username: str = ""

    @property
    def object_name(self) -> str:
        """The object's name, or its generateName (as `prefix-*`) for a CREATE that has none yet."""
        if self.name:
            return self.name
        metadata = (self.object or {}).get("metadata")
        if isinstance(metadata, Mapping):
            name, prefix = metadata.get("name"), metadata.get("generateName")
            if isinstance(name, str) and name:
                return name
            if isinstance(prefix, str) and prefix:
                return f"{prefix}*"
        return ""

    @property
    def object_key(self) -> str:
        """`namespace/name`, or the name alone for a cluster-scoped object (or a review without namespace)."""
        key = f"{self.namespace}/{self.object_name}" if self.namespace else self.object_name
        return key or "<unnamed>"

    @property
    def object_ref(self) -> str:
        """`Kind namespace/name` as people write it in kubectl output and logs."""
        return f"{self.kind['kind']} {self.object_key}"


def parse_review(body: bytes | str) -> Review:
    """Parse a request body into a Review.

    Raises MalformedReview (code 400) when the body is not UTF-8 JSON, and (code 422) listing every
    problem when it is JSON but not an admission.k8s.io/v1 or v1beta1 AdmissionReview request.
    """
    _check_value_count(body)
    try:
        data = _loads(body)
    except ValueError as err:
        # JSONDecodeError and UnicodeDecodeError are ValueErrors, and so is the refusal of an integer
        # literal longer than sys.get_int_max_str_digits() (4300): all mean the body is not usable JSON.
        raise MalformedReview([Cause(field="", message=f"the body is not JSON: {err}")], code=400) from None
    except RecursionError:  # a pathologically nested document: still the client's fault
        raise MalformedReview([Cause(field="", message="the body nests too deeply")], code=400) from None
    if not isinstance(data, dict):
        raise MalformedReview([Cause(field="", message=f"expected an AdmissionReview object, got {_type(data)}")])
    return _parse_document(data)


def _loads(body: bytes | str) -> Any:
    """json.loads(body): its value, or its exception; through orjson where that gives the same (see above)."""
    if isinstance(body, bytes) and len(body) <= UNCOUNTED_BYTES:  # larger ones: no copy made to look at them
        shape = body.translate(_ORJSON_GUARD)
        if _LONG_INTEGER not in shape and shape.count(b"[") < _ORJSON_MAX_OPENINGS:
            try:
                return orjson.loads(body)
            except orjson.JSONDecodeError:
                pass  # json.loads reads it, or refuses it with its own message
    return json.loads(body)


def _check_value_count(body: bytes | str) -> None:
    """Refuse (413) a body of more than MAX_JSON_VALUES values before json.loads materialises them.

    Counted from the bytes (_structural); commas and brackets inside strings would count too, so when the
    raw count is high the strings are blanked out and the count is made again.
    """
    if len(body) <= UNCOUNTED_BYTES:
        return
    data = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
    if _structural(data) <= MAX_JSON_VALUES:
        return
    values = _structural(_JSON_STRING.sub(b'""', data))
    if values > MAX_JSON_VALUES:
        raise MalformedReview([Cause(field="", message=f"the body holds about {values:,} JSON values, more than "
                                                       f"the {MAX_JSON_VALUES:,} an AdmissionReview may hold")],
                              code=413)


def _structural(data: bytes) -> int:
    # Every value but the outermost is an element of a container: one per comma, plus one per non-empty
    # container. Empty ones written with a space inside (`{ }`) count one too many, which is on the safe side.
    containers = data.count(b"{") + data.count(b"[") - data.count(b"{}") - data.count(b"[]")
    return data.count(b",") + containers + 1


def _parse_document(data: dict[str, Any]) -> Review:
    causes: list[Cause] = []
    fields = _Fields(causes)
    api_version = data.get("apiVersion")
    if api_version not in API_VERSIONS:
        causes.append(Cause(field="apiVersion",
                            message=f"expected one of {', '.join(API_VERSIONS)}, got {_shown(api_version)}"))
    if data.get("kind") != "AdmissionReview":
        causes.append(Cause(field="kind", message=f"expected AdmissionReview, got {_shown(data.get('kind'))}"))
    request = data.get("request")
    if not isinstance(request, dict):
        causes.append(Cause(field="request", message=f"expected an object, got {_type(request)}"))
        raise MalformedReview(causes)
    uid = fields.string(request, "uid", required=True)
    kind = fields.group_version(request, "kind", "kind")
    resource = fields.group_version(request, "resource", "resource")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        causes.append(Cause(field="request.operation",
                            message=f"expected one of {', '.join(OPERATIONS)}, got {_shown(operation)}"))
    sub_resource = fields.string(request, "subResource")
    namespace = fields.string(request, "namespace")
    name = fields.string(request, "name")
    obj = fields.mapping(request, "object")
    old_obj = fields.mapping(request, "oldObject")
    dry_run = request.get("dryRun", False)
    if dry_run is None:
        dry_run = False
    if not isinstance(dry_run, bool):
        causes.append(Cause(field="request.dryRun", message=f"expected a boolean, got {_type(dry_run)}"))
    user_info = request.get("userInfo")
    username = ""
    if isinstance(user_info, dict) and isinstance(user_info.get("username"), str):
        username = user_info["username"]
    if operation in ("CREATE", "UPDATE") and obj is None and "request.object" not in fields.bad:
        causes.append(Cause(field="request.object", message=f"a {operation} review must carry the object"))
    if causes:
        raise MalformedReview(causes)
    return Review(
        api_version=cast(str, api_version),
        uid=uid,
        kind=cast(GroupVersionKind, kind),
        resource=cast(GroupVersionResource, resource),
        operation=cast(Operation, operation),
        sub_resource=sub_resource,
        namespace=namespace,
        name=name,
        object=obj,
        old_object=old_obj,
        dry_run=bool(dry_run),
        username=username,
    )


@dataclass
class _Fields:
    """Typed field readers that record a Cause instead of raising, so one pass reports every problem."""

    causes: list[Cause]
    bad: set[str] = field(default_factory=set)

    def _fail(self, path: str, message: str) -> None:
        self.bad.add(path)
        self.causes.append(Cause(field=path, message=message))

    def string(self, request: dict[str, Any], key: str, *, required: bool = False) -> str:
        value = request.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            self._fail(f"request.{key}", f"expected a non-empty string, got {_type(value)}" if required
                       else f"expected a string, got {_type(value)}")
            return ""
        return value

    def mapping(self, request: dict[str, Any], key: str) -> Mapping[str, Any] | None:
        value = request.get(key)
        if value is None or isinstance(value, dict):
            return value
        self._fail(f"request.{key}", f"expected an object or null, got {_type(value)}")
        return None

    def group_version(self, request: dict[str, Any], key: str, last: str) -> dict[str, str]:
        value = request.get(key)
        if not isinstance(value, dict):
            self._fail(f"request.{key}", f"expected an object with group, version and {last}, got {_type(value)}")
            return {}
        out: dict[str, str] = {}
        for part in ("group", "version", last):
            item = value.get(part, "" if part == "group" else None)
            if not isinstance(item, str) or (part == last and not item):
                self._fail(f"request.{key}.{part}", f"expected a {'non-empty ' if part == last else ''}string,"
                                                    f" got {_type(item)}")
                continue
            out[part] = item
        return out


# Values we did not expect are quoted back to the client and into the log, so they are cut short: the
# body may hold a 3 MiB string or a list nested 900 deep (reprlib stops at a depth, never recursing on).
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 40, 40
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 3


def _shown(value: object) -> str:
    """A short repr of a value from the request, for messages."""
    return _REPR.repr(value)


def _type(value: object) -> str:
    if value is None:
        return "null"
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number"}
    return names.get(type(value), type(value).__name__)


# --- deciding ------------------------------------------------------------------------------------------


class RemedyLike(Protocol):
    @property
    def quoted(self) -> Mapping[str, Any] | None: ...


class DiagnosticLike(Protocol):
    @property
    def code(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def path(self) -> tuple[str | int, ...]: ...
    @property
    def fix(self) -> RemedyLike | None: ...


class DecisionLike(Protocol):
    """What the rule engine returns (policy/admission/engine.py `Decision`)."""

    @property
    def allowed(self) -> bool: ...
    @property
    def diagnostics(self) -> Sequence[DiagnosticLike]: ...
    @property
    def message(self) -> str: ...
    @property
    def warnings(self) -> Sequence[str]: ...
    @property
    def audit_annotations(self) -> Mapping[str, str]: ...


class Evaluator(Protocol):
    """The rule engine's call (policy/admission/engine.py `Engine.evaluate`)."""

    def evaluate(
        self,
        obj: Mapping[str, Any],
        *,
        tenants: Sequence[str] = (),
        operation: str = "CREATE",
        old_obj: Mapping[str, Any] | None = None,
        expired: budget.Expired = budget.never,
    ) -> DecisionLike: ...


@dataclass(frozen=True)
class Verdict:
    """The answer to one review, before it is put on the wire.

    `rules` pairs each rule that fired with its outcome (or `none` with allow/skip when none fired), for
    metrics and logs; `skipped` says why the engine was not consulted at all.
    """

    allowed: bool
    code: int = 200
    reason: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()
    audit_annotations: Mapping[str, str] = field(default_factory=dict)
    rules: tuple[tuple[str, Outcome], ...] = ((NO_RULE, "allow"),)
    skipped: str = ""
    causes: tuple[StatusCause, ...] = ()
    """Per denying finding its rule, path and message, and the verified fix as data (status.details.causes)."""


def decide(review: Review, evaluator: Evaluator, *, tenants: Sequence[str] = (),
           expired: budget.Expired = budget.never,
           nodes: Mapping[str, Mapping[str, str] | None] | None = None) -> Verdict:
    """Evaluate a review, or skip what a GPU policy never judges.

    Skipped, and allowed: DELETE and CONNECT (a webhook must never block deletes: Kyverno #4686) and every
    subresource (scale, status, ephemeralcontainers: none carries a pod template's GPU requests). A dryRun
    review is evaluated like any other, so `kubectl apply --dry-run=server` sees the real verdict. A review
    whose budget runs out (``expired``) is denied: see over_budget. ``nodes``: what the node cache knows of the
    node the object names (webhook/nodes.py), passed to the engine only when there is something to pass.
    """
    if review.operation in ("DELETE", "CONNECT"):
        return Verdict(allowed=True, rules=((NO_RULE, "skip"),), skipped=f"operation {review.operation}")
    if review.sub_resource:
        return Verdict(allowed=True, rules=((NO_RULE, "skip"),), skipped=f"subresource {review.sub_resource}")
    assert review.object is not None  # parse_review guarantees it for CREATE and UPDATE
    extra = {"nodes": nodes} if nodes is not None else {}
    try:
        decision = evaluator.evaluate(
            review.object, tenants=tuple(tenants), operation=review.operation, old_obj=review.old_object,
            expired=expired, **extra,
        )
    except budget.OverBudget as over:
        return over_budget(review, over.step)
    rules = tuple(dict.fromkeys(
        (d.code, _OUTCOME_BY_SEVERITY.get(d.severity, "audit")) for d in decision.diagnostics
    ))
    warnings = fit_warnings(decision.warnings)
    audit = {str(k): str(v) for k, v in decision.audit_annotations.items()}
    if decision.allowed:
        return Verdict(allowed=True, warnings=warnings, audit_annotations=audit,
                       rules=rules or ((NO_RULE, "allow"),))
    denied_by = [rule for rule, outcome in rules if outcome == "deny"]
    message = decision.message or f"{review.object_ref} is denied by gpupolicy rule(s) {', '.join(denied_by)}"
    return Verdict(allowed=False, code=403, reason="Forbidden", message=message, warnings=warnings,
                   audit_annotations=audit, rules=rules or ((NO_RULE, "deny"),), causes=_causes(decision))


#: The cause type of a finding's fix: its message is the fix as compact JSON (edits, jsonPatch, namespace).
FIX_CAUSE = "gpupolicy.dev/fix"


def _causes(decision: DecisionLike) -> tuple[StatusCause, ...]:
    """One cause per denying finding (reason = rule id, field = path into the object), each followed by its fix
    when it has one, so clients can apply the fix without parsing the message (docs/operations.md)."""
    out: list[StatusCause] = []
    for d in decision.diagnostics:
        if d.severity != "error":
            continue
        where = bounded(format_path(d.path))  # both quote the object: a name may be a megabyte
        out.append(StatusCause(reason=d.code, message=bounded(d.message), field=where))
        if d.fix is not None and (data := d.fix.quoted) is not None:
            out.append(StatusCause(reason=FIX_CAUSE, message=json_bytes(data, sort_keys=True).decode(), field=where))
    return tuple(out)


def answer_bytes(answer: Any) -> bytes:
    """An answer's body as the webhook sends it, on the fast path and through Flask alike: compact JSON, a newline."""
    return json_bytes(answer) + b"\n"


def json_bytes(data: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON, as json.dumps writes it with separators (",", ":") but UTF-8 unescaped: orjson, several times
    faster, and json.dumps for what orjson does not write (an integer past 64 bits, a key that is not a string)."""
    try:
        return orjson.dumps(data, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except orjson.JSONEncodeError:
        return json.dumps(data, sort_keys=sort_keys, separators=(",", ":")).encode()


def internal_error(review: Review, incident: str) -> Verdict:
    """Fail closed on a bug: a denial with code 500 InternalError, answered with HTTP 200.

    An HTTP 500 would hand the verdict to the webhook's failurePolicy, and under Ignore a GPU pod the
    policy never saw would slip through; HAMi's `admission.Errored(500, ...)` shows how that reads to
    users (webhook.md §1.2, §3.3). Denying with status code 500 keeps the object out whatever the
    failurePolicy, and kubectl shows it as an internal error, not as a policy violation.
    """
    return Verdict(
        allowed=False, code=500, reason="InternalError",
        message=(f"gpupolicy could not evaluate {review.object_ref} (internal error {incident}); "
                 "the request was refused to be safe: retry, and report the incident id if it persists"),
        rules=((INTERNAL_ERROR_RULE, "error"),),
    )


def over_budget(review: Review, step: str) -> Verdict:
    """Fail closed on an object the engine could not judge in time: a denial, never an allow.

    Answered well before the API server's timeoutSeconds, so the denial is what the user sees under any
    failurePolicy (an unanswered call would be admitted unchecked under Ignore). The engine is linear in the
    object, so only an object far larger than any real workload gets here; it is counted under its own rule."""
    return Verdict(
        allowed=False, code=403, reason="Forbidden",
        message=(f"gpupolicy could not decide {review.object_ref} within its review budget (the time ran out while "
                 f"{step}), so it is "
                 "refused rather than admitted unchecked; split it into smaller objects, or ask the platform team "
                 "to raise the webhook's --review-budget"),
        rules=((BUDGET_RULE, "deny"),),
    )


def fit_warnings(warnings: Sequence[str]) -> tuple[str, ...]:
    """Warnings as the API server wants them: unprefixed, deduplicated, ≤120 characters, ≤4096 in all."""
    out: list[str] = []
    total = 0
    for raw in warnings:
        text = " ".join(_WARNING_PREFIX.sub("", str(raw)).split())
        if not text or text in out:
            continue
        if len(text) > MAX_WARNING_CHARS:
            text = text[: MAX_WARNING_CHARS - 1].rstrip() + "…"
        if total + len(text) > MAX_WARNINGS_TOTAL_CHARS:
            break
        out.append(text)
        total += len(text)
    return tuple(out)


# --- responding ----------------------------------------------------------------------------------------


def status_document(code: int, message: str, *, causes: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A metav1.Status with the HTTP status code: the error body the API server and kubectl understand."""
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "code": code, "reason": STATUS_REASONS.get(code, "Unknown"), "message": message,
    }
    if causes:
        body["details"] = {"causes": [dict(cause) for cause in causes]}
    return body


def build_response(review: Review, verdict: Verdict) -> AdmissionReviewOut:
    """The AdmissionReview answer, in the apiVersion the request came in, echoing its uid."""
    response: ResponsePayload = {"uid": review.uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": verdict.code, "reason": verdict.reason, "message": verdict.message}
        if verdict.causes:
            response["status"]["details"] = {"kind": review.kind["kind"], "name": bounded(review.object_name),
                                             "causes": list(verdict.causes)}
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    if verdict.audit_annotations:
        response["auditAnnotations"] = dict(verdict.audit_annotations)
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}
