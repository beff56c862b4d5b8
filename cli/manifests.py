"""Application manifests as `admit` and `plan` read them: files or directories, List kinds unwrapped, Namespace
labels collected, and ``NS=k=v`` namespace-label flags."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cli.reporters import Report
    from policy.spec.diagnostics import Path
    from policy.spec.source import Document

MANIFEST_SUFFIXES = (".yaml", ".yml")


def parse_namespace_flags(values: list[str]) -> dict[str, dict[str, str]] | str:
    """``NS=k=v,k2=v2`` flags to labels per namespace, or the usage error."""
    out: dict[str, dict[str, str]] = {}
    for value in values:
        ns, eq, rest = value.partition("=")
        if not eq or not ns:
            return f"--namespace-labels {value!r}: write NS=key=value[,key=value...]"
        labels = out.setdefault(ns, {})
        for pair in filter(None, rest.split(",")):
            key, eq, label = pair.partition("=")
            if not eq or not key:
                return f"--namespace-labels {value!r}: {pair!r} is not key=value"
            labels[key] = label
    return out


def read_manifests(paths: list[str], report: Report) -> Iterator[Document]:
    from cli.inputs import read_text
    from policy.spec.diagnostics import Diagnostic
    from policy.spec.source import parse_documents

    for path in expand(paths):
        report.files += 1
        text = read_text(path)
        if isinstance(text, Diagnostic):
            report.extend([text])
            continue
        for doc in parse_documents(text, filename=path):
            if doc.data is None:
                # Only unreadable YAML stops a document; YAML 1.1 notes and duplicate keys are the
                # application's business, not the GPU policy's.
                report.extend(doc.diagnostics)
                continue
            yield doc


def read_recorded(paths: list[str]) -> list[Any] | None:
    """The data of every YAML or JSON document of recorded objects (kubectl get -o yaml output), Lists not yet
    unwrapped; None after printing to standard error what made a file unreadable (every file is read first)."""
    import sys

    from cli.inputs import read_text
    from cli.reporters import Report, render_text
    from policy.spec.diagnostics import Diagnostic
    from policy.spec.source import parse_documents

    documents: list[Any] = []
    problems: list[Diagnostic] = []
    for path in paths:
        text = read_text(path)
        if isinstance(text, Diagnostic):
            problems.append(text)
            continue
        for doc in parse_documents(text, filename=path):
            if doc.data is None:
                problems.extend(d for d in doc.diagnostics if d.severity == "error")
            else:
                documents.append(doc.data)
    if problems:
        sys.stderr.write(render_text(Report(diagnostics=problems, files=len(paths))))
        return None
    return documents


def expand(paths: list[str]) -> Iterator[str]:
    from pathlib import Path

    for path in paths:
        if path != "-" and Path(path).is_dir():
            found = (p for p in Path(path).rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
            yield from (str(p) for p in sorted(found))
        else:
            yield path


def objects(data: Any, prefix: Path = ()) -> Iterator[tuple[dict[str, Any], Path]]:
    """Every object of a document, with ``List`` kinds (kubectl get -o yaml) unwrapped."""
    if not isinstance(data, dict):
        return
    items = data.get("items")
    if isinstance(data.get("kind"), str) and data["kind"].endswith("List") and isinstance(items, list):
        for i, item in enumerate(items):
            yield from objects(item, (*prefix, "items", i))
        return
    yield data, prefix


def namespace_objects(documents: list[Document]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for doc in documents:
        for obj, _ in objects(doc.data):
            metadata = obj.get("metadata")
            if obj.get("kind") != "Namespace" or not isinstance(metadata, dict):
                continue
            name, labels = metadata.get("name"), metadata.get("labels")
            if isinstance(name, str):
                out.setdefault(name, {}).update(
                    {k: v for k, v in (labels or {}).items() if isinstance(k, str) and isinstance(v, str)}
                    if isinstance(labels, dict) else {})
    return out
