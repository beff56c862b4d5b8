"""The validate pipeline: YAML text to a checked ClusterGPUPolicy with located diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import ValidationError

from policy import checks
from policy.resolved.resolve import ResolvedPolicy, resolve
from policy.spec.diagnostics import Diagnostic, PolicyError, Span, from_validation_error, has_errors, sort_key
from policy.spec.model import ClusterGPUPolicy
from policy.spec.source import Document, parse_documents


@dataclass(frozen=True)
class LoadResult:
    """A loaded document: the policy when it is valid, and every finding, located."""

    filename: str
    policy: ClusterGPUPolicy | None
    diagnostics: tuple[Diagnostic, ...]
    document_index: int = 0
    start: Span | None = None
    """Where the document begins."""
    resolved: ResolvedPolicy | None = None
    """The policy's classes resolved once, for every later consumer (None when the model did not validate)."""
    notes: tuple[Diagnostic, ...] = ()
    """What a reviewer of the spec reads beside the findings (checks.NOTES, located): `validate` prints them."""

    @property
    def ok(self) -> bool:
        return self.policy is not None and not has_errors(self.diagnostics)


def load_policies(text: str, *, filename: str) -> tuple[LoadResult, ...]:
    """Load every document of a file (a file may hold several clusters)."""
    documents = list(parse_documents(text, filename=filename))
    if not documents:
        empty = Diagnostic(
            code="empty-document",
            message="the file holds no YAML document",
            hint="start from examples/clusters/tke-l20-t4/cluster.yaml",
            span=Span(filename, 1, 1),
        )
        return (LoadResult(filename, None, (empty,)),)
    return tuple(_load_document(doc) for doc in documents)


def load_policy(text: str, *, filename: str) -> LoadResult:
    """Load a file that must hold exactly one cluster's policy."""
    results = load_policies(text, filename=filename)
    if len(results) == 1:
        return results[0]
    refused = Diagnostic(
        code="multiple-documents",
        message=f"the file holds {len(results)} YAML documents; one cluster's policy is compiled at a time",
        hint="put each cluster in its own file (gpupolicy validate checks files with several documents)",
        span=results[1].start or Span(filename, 1, 1),
    )
    return LoadResult(filename, None, (*results[0].diagnostics, refused))


def _load_document(doc: Document) -> LoadResult:
    result = _validate_document(doc)
    return replace(result, start=doc.source.values.get(()))


def _validate_document(doc: Document) -> LoadResult:
    filename = doc.source.file
    found = list(doc.diagnostics)
    if doc.data is None and found:
        return LoadResult(filename, None, tuple(found), doc.index)
    if not isinstance(doc.data, dict):
        hint = "a policy starts with apiVersion: gpupolicy.dev/v1alpha1 and kind: ClusterGPUPolicy"
        if isinstance(doc.data, list) and len(doc.data) == 1 and isinstance(doc.data[0], dict) and doc.data[0]:
            # `- apiVersion: ...`: the whole policy indented under one list item.
            hint = ("the document is a list holding one mapping: remove the '- ' before its first key (and the "
                    "indentation under it), so the document starts with " + (
                        "apiVersion:" if "apiVersion" in doc.data[0] else f"{next(iter(doc.data[0]))}:"))
        found.append(
            Diagnostic(
                code="not-a-mapping",
                message=f"the document is a {type(doc.data).__name__}, not a mapping",
                hint=hint,
                span=doc.source.span(()),
            )
        )
        return LoadResult(filename, None, tuple(found), doc.index)
    try:
        policy = ClusterGPUPolicy.model_validate(doc.data)
    except ValidationError as err:
        # An unquoted `on` already got a yaml11-boolean finding; its wrong-type twin would only repeat it.
        explained = {d.path for d in found if d.code.startswith("yaml11-")}
        for d in from_validation_error(err, doc.data, ClusterGPUPolicy, doc.source.texts):
            if d.path not in explained:
                found.append(d.at(doc.source.span(d.path, key=d.code == "unknown-field")))
        return LoadResult(filename, None, _sorted(found), doc.index)
    resolved = resolve(policy)
    for d in checks.run(resolved):
        found.append(d.at(doc.source.span(d.path, key=d.code in checks.KEY_LOCATED)))
    notes = [d.at(doc.source.span(d.path, key=d.code in checks.KEY_LOCATED)) for d in checks.notes(resolved)]
    return LoadResult(filename, policy, _sorted(found), doc.index, resolved=resolved, notes=_sorted(notes))


def _sorted(found: list[Diagnostic]) -> tuple[Diagnostic, ...]:
    return tuple(sorted(found, key=sort_key))


def load_policy_or_raise(text: str, *, filename: str) -> ClusterGPUPolicy:
    """The policy of a file, or PolicyError carrying every error found."""
    result = load_policy(text, filename=filename)
    if not result.ok or result.policy is None:
        raise PolicyError([d for d in result.diagnostics if d.severity == "error"])
    return result.policy
