"""Tenancy: who may set the namespace labels the tenants' selectors read, and so move a namespace between tenants.

The checks warn where no guard holds a key a tenant reads (so anyone who may update a namespace picks its tenant),
where the guard would lock the GitOps tool out of its own namespaces, and refuse managers that name everyone.
`tenant_label_keys` is no finding but what a reviewer reads: the keys and who may set them (validate's notes).
"""

from __future__ import annotations

from collections.abc import Iterator

from policy.kube import identities, selectors
from policy.resolved import tenancy as facts_of
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import VAP_MINOR

_MANAGERS = ("spec", "admission", "tenancy", "managers")


def check_tenancy(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    spec = resolved.spec
    yield from _too_broad(resolved)
    facts = facts_of.tenancy(spec)
    if not facts.guarded:
        return
    if not facts.guard_possible:
        reason = facts_of.guard_missing_reason(spec)
        for label in facts.labels:
            if label.immutable:
                continue
            for read in label.reads:
                yield Diagnostic(
                    "tenant-label-unguarded",
                    f"tenant {read.tenant!r} selects namespaces by the label {label.key}, which anyone who may "
                    f"update a namespace can add, change or remove, and so move it into or out of the tenant; "
                    f"the tree holds no guard for it: {reason}",
                    read.path,
                    f"set kubernetesVersion to 1.{VAP_MINOR} or newer where the cluster runs it, or select the "
                    f"tenant's namespaces by name (matchExpressions: [{{key: {selectors.NAMESPACE_NAME_LABEL}, "
                    "operator: In, values: [...]}]), which the API server sets and no one can change",
                    severity="warning")
        return
    listed = spec.admission.tenancy.managers
    if facts.git_ops is None and not (listed.users or listed.groups or listed.service_accounts):
        yield Diagnostic(
            "tenancy-gitops-unnamed",
            f"the tree guards the {_labels(facts.guarded)}: only group {identities.MASTERS} may add, change or "
            "remove a guarded label, so a GitOps tool applying namespaces with it would be denied",
            ("spec", "admission", "tenancy"),
            "name the tool that applies namespaces (admission.tenancy.gitOps: argocd or flux, whose controller "
            "becomes a manager), write gitOps: none if people label namespaces by hand, or list who may in "
            "admission.tenancy.managers",
            severity="warning")


def _too_broad(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """A manager every request of a kind has: the guard would then hold no one back."""
    listed = resolved.spec.admission.tenancy.managers
    fix = ("name the GitOps tool's service account (admission.tenancy.gitOps) or the platform team's own group "
           "instead")
    for i, group in enumerate(listed.groups):
        if group in identities.EVERYONE_GROUPS:
            yield Diagnostic("tenancy-manager-too-broad",
                             f"group {group} is {identities.EVERYONE_GROUPS[group]}: as a tenancy manager it would let "
                             "them all move namespaces between tenants", (*_MANAGERS, "groups", i), fix)
    for i, user in enumerate(listed.users):
        if user == identities.ANONYMOUS_USER:
            yield Diagnostic("tenancy-manager-too-broad",
                             f"user {user} is every anonymous request: as a tenancy manager it would let anyone "
                             "who reaches the API server move namespaces between tenants", (*_MANAGERS, "users", i),
                             fix)


def tenant_label_keys(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    """The label keys the tenants' selectors read and who may set each (an info: validate prints it, REPORT.md
    says the same), or nothing for a spec without tenants."""
    facts = facts_of.tenancy(resolved.spec)
    if not facts.labels:
        return
    text = "tenants select namespaces by " + ", ".join(f"{label.key} ({_tenants(label.tenants)})"
                                                       for label in facts.labels)
    if any(label.immutable for label in facts.labels):
        text += (f"; the API server sets {selectors.NAMESPACE_NAME_LABEL} to each namespace's name, so it needs no "
                 "guard, but whoever may create namespaces may create one of a name a tenant lists")
    mutable = tuple(label.key for label in facts.labels if not label.immutable)
    if mutable and facts.guard:
        text += (f"; the ValidatingAdmissionPolicy {facts_of.GUARD_NAME} lets only these managers add, change or "
                 f"remove {', '.join(mutable)}: {facts.describe_managers()}")
    elif mutable and facts.enforced:
        text += (f"; nothing stops whoever may update a namespace from setting {', '.join(mutable)} "
                 "(tenant-label-unguarded)")
    elif mutable:
        text += "; admission is off, so no tenant is enforced"
    yield Diagnostic("tenant-label-keys", text, ("spec", "tenants"),
                     "REPORT.md lists who may move a namespace between tenants; docs/security.md says what the guard "
                     "covers and what it does not", severity="info")


def _labels(keys: tuple[str, ...]) -> str:
    return f"tenant label{'s' if len(keys) > 1 else ''} {', '.join(keys)}"


def _tenants(names: tuple[str, ...]) -> str:
    return f"tenant{'s' if len(names) > 1 else ''} {', '.join(names)}"

