"""Who last set an object's labels, as its ``metadata.managedFields`` record it (server-side apply's field
ownership, kept for every write since Kubernetes 1.18, whether by apply or by update).

An entry names a field manager, not a user: a server-side apply's ``fieldManager``, else the writer's user agent up to
its first ``/`` (``kubectl-label``, ``kubectl-client-side-apply``, a controller's binary name). Label keys appear in
``fieldsV1`` as ``f:<key>`` under ``f:metadata`` / ``f:labels`` (k8s.io/apimachinery pkg/apis/meta/v1 types.go
ManagedFieldsEntry; sigs.k8s.io/structured-merge-diff fieldpath serialization).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def label_owners(metadata: Mapping[str, Any]) -> dict[str, tuple[str, ...]] | None:
    """Label key -> the field managers of the entries that own it, in entry order; None where the object carries
    no managedFields (``kubectl get`` leaves them out unless given ``--show-managed-fields``), so that "nobody is
    recorded" and "nothing is known" stay apart."""
    entries = metadata.get("managedFields")
    if not isinstance(entries, list):
        return None
    owners: dict[str, list[str]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        fields = entry.get("fieldsV1")
        meta = fields.get("f:metadata") if isinstance(fields, Mapping) else None
        labels = meta.get("f:labels") if isinstance(meta, Mapping) else None
        manager = entry.get("manager")
        if not isinstance(labels, Mapping) or not isinstance(manager, str):
            continue
        for key in labels:
            if isinstance(key, str) and key.startswith("f:"):
                owners.setdefault(key.removeprefix("f:"), []).append(manager)
    return {key: tuple(dict.fromkeys(found)) for key, found in owners.items()}
