"""Tenancy: the namespace labels the tenants' selectors read, who may set them, and who did.

A tenant is a namespaceSelector, so whoever may set the labels it reads chooses a namespace's tenant. Every key a
selector reads but ``kubernetes.io/metadata.name`` (which the API server sets to the namespace's name and keeps
there) is *guarded*: the tree's ValidatingAdmissionPolicy (compiler/targets/tenancy_guard.py) lets only the
managers add, change or remove it. The managers are ``system:masters`` (who may delete the guard anyway), the
GitOps tool's controller the spec names, and the users, groups and service accounts it lists. The checks
(policy/checks/tenancy.py), the compiler, REPORT.md and ``gpupolicy admit`` all read the one `Tenancy` built here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from policy.kube import identities, managed_fields, selectors
from policy.kube.fields import Path
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import VAP_MINOR, GitOpsTool, Spec

#: The guard's ValidatingAdmissionPolicy and binding (compiler/targets/tenancy_guard.py), as REPORT.md, validate and
#: docs/security.md name it.
GUARD_NAME = "gpupolicy-tenant-labels.gpupolicy.dev"

ManagerKind = Literal["user", "group", "service account"]


@dataclass(frozen=True)
class GitOpsController:
    """The identity a GitOps tool's standard install applies objects with."""

    namespace: str
    service_account: str
    field_managers: tuple[str, ...]
    """What managedFields record its writes as."""

    @property
    def username(self) -> str:
        return identities.service_account_username(self.namespace, self.service_account)


#: The controllers that apply a tree, as their standard installs run them. Argo CD writes as argocd-controller with
#: server-side apply and in its diffs (argo-cd common.ArgoCDSSAManager), and some writes as the controller's own
#: user agent, argocd-application-controller (argoproj/argo-cd#20815); Flux's kustomize-controller applies
#: server-side as kustomize-controller, always.
GITOPS: Mapping[GitOpsTool, GitOpsController] = {
    "argocd": GitOpsController("argocd", "argocd-application-controller",
                               ("argocd-application-controller", "argocd-controller")),
    "flux": GitOpsController("flux-system", "kustomize-controller", ("kustomize-controller",)),
}


@dataclass(frozen=True)
class LabelRead:
    """One place a tenant's selector reads a label key."""

    tenant: str
    path: Path
    """The key in the spec: matchLabels.<key>, or matchExpressions[i].key."""


@dataclass(frozen=True)
class TenantLabel:
    """A label key some tenant's selector reads, and every place one does."""

    key: str
    reads: tuple[LabelRead, ...]

    @property
    def tenants(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.tenant for r in self.reads))

    @property
    def immutable(self) -> bool:
        """Set by the API server on every namespace from its name (Kubernetes 1.21+), and reset to it on every
        write: no one can move a namespace between tenants by it."""
        return self.key == selectors.NAMESPACE_NAME_LABEL


@dataclass(frozen=True)
class Manager:
    """One identity that may set the guarded labels, as request.userInfo carries it."""

    kind: ManagerKind
    name: str
    """The username (a service account's system:serviceaccount:... form) or group."""
    shown: str
    """As people write it: a service account as namespace/name."""


@dataclass(frozen=True)
class Tenancy:
    """Who can move a namespace between tenants under one spec."""

    labels: tuple[TenantLabel, ...]
    """Every key a tenant's selector reads, in the order the tenants first read them."""
    managers: tuple[Manager, ...]
    field_managers: tuple[str, ...]
    """The managers' writes as managedFields name them (the GitOps tool's, then the spec's)."""
    tenants: tuple[tuple[str, tuple[selectors.Requirement, ...]], ...]
    """Each tenant's selector, in spec order, for working out which tenants a namespace's labels select."""
    enforced: bool
    """Admission enforces tenants at all (admission.enabled)."""
    guard_possible: bool
    """The cluster has ValidatingAdmissionPolicy (Kubernetes 1.30+)."""
    git_ops: GitOpsTool | None

    @property
    def guarded(self) -> tuple[str, ...]:
        """The keys the guard protects: every key a tenant reads but the immutable one."""
        return tuple(label.key for label in self.labels if not label.immutable) if self.enforced else ()

    @property
    def guard(self) -> bool:
        """The tree holds the guard: tenants read a mutable key, admission is on and the API server has VAP."""
        return bool(self.guarded) and self.guard_possible

    @property
    def users(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.managers if m.kind != "group")

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.managers if m.kind == "group")

    def describe_managers(self) -> str:
        """``groups system:masters, platform-admins; service account argocd/argocd-application-controller``: one
        phrase per kind, in the order kinds first appear."""
        by_kind: dict[str, list[str]] = {}
        for manager in self.managers:
            by_kind.setdefault(manager.kind, []).append(manager.shown)
        return "; ".join(f"{kind}{'s' if len(names) > 1 else ''} {', '.join(names)}"
                         for kind, names in by_kind.items())

    def selected_by(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        """The tenants whose selectors match a namespace with these labels (engine.tenants_for's reading)."""
        return tuple(name for name, requirements in self.tenants if selectors.matches(requirements, labels))


def tenancy(spec: Spec) -> Tenancy:
    """The tenancy facts of a checked spec."""
    reads: dict[str, list[LabelRead]] = {}
    for t, tenant in enumerate(spec.tenants):
        selector = tenant.namespace_selector
        base: Path = ("spec", "tenants", t, "namespaceSelector")
        for key in selector.match_labels:
            reads.setdefault(key, []).append(LabelRead(tenant.name, (*base, "matchLabels", key)))
        for e, expression in enumerate(selector.match_expressions):
            reads.setdefault(expression.key, []).append(
                LabelRead(tenant.name, (*base, "matchExpressions", e, "key")))
    settings = spec.admission.tenancy
    controller = GITOPS.get(settings.git_ops) if settings.git_ops is not None else None
    managers = [Manager("group", identities.MASTERS, identities.MASTERS)]
    if controller is not None:
        managers.append(Manager("service account", controller.username,
                                f"{controller.namespace}/{controller.service_account}"))
    listed = settings.managers
    managers += [Manager("service account", identities.service_account_username(sa.namespace, sa.name),
                         f"{sa.namespace}/{sa.name}") for sa in listed.service_accounts]
    managers += [Manager("user", user, user) for user in listed.users]
    managers += [Manager("group", group, group) for group in listed.groups]
    unique = tuple({(m.kind == "group", m.name): m for m in managers}.values())
    field_managers = (*(controller.field_managers if controller else ()), *listed.field_managers)
    return Tenancy(
        labels=tuple(TenantLabel(key, tuple(found)) for key, found in reads.items()),
        managers=unique,
        field_managers=tuple(dict.fromkeys(field_managers)),
        tenants=tuple((t.name, t.namespace_selector.requirements()) for t in spec.tenants),
        enforced=spec.admission.enabled,
        guard_possible=spec.vap_available,
        git_ops=settings.git_ops,
    )


def guard_missing_reason(spec: Spec) -> str:
    """Why the tree can hold no guard for a spec whose tenants read a mutable key (the one gate there is)."""
    return (f"the guard is a ValidatingAdmissionPolicy, which needs Kubernetes 1.{VAP_MINOR} (kubernetesVersion is "
            f"{spec.kubernetes_version})")


# ---------------------------------------------------------------- who set a namespace's tenant labels


def namespace_label_findings(facts: Tenancy, namespace: Mapping[str, Any]) -> Iterator[Diagnostic]:
    """Every guarded label of a Namespace object that its managedFields say a field manager other than the
    managers' set (paths inside the object; nothing where it carries no managedFields, which `kubectl get` leaves
    out unless given --show-managed-fields)."""
    metadata = namespace.get("metadata")
    if not facts.guarded or not isinstance(metadata, Mapping):
        return
    labels = metadata.get("labels")
    owners = managed_fields.label_owners(metadata)
    if not isinstance(labels, Mapping) or owners is None:
        return
    name = metadata.get("name") if isinstance(metadata.get("name"), str) else "?"
    text_labels = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
    # As the API server has it (and a trimmed manifest may not): the namespace's name under its label.
    selected = facts.selected_by({**text_labels, selectors.NAMESPACE_NAME_LABEL: name})
    where = ("no tenant (admission.defaultAllow)" if not selected else f"tenant {selected[0]}" if len(selected) == 1
             else f"tenants {', '.join(selected)} together")
    known = ", ".join(facts.field_managers) or "none: name the GitOps tool (admission.tenancy.gitOps) or list them"
    for key in facts.guarded:
        if key not in text_labels:
            continue
        others = [manager for manager in owners.get(key, ()) if manager not in facts.field_managers]
        if not others:
            continue
        names = ", ".join(others)
        yield Diagnostic(
            "tenant-label-set-by-non-manager",
            f"Namespace {name}: its label {key}={text_labels[key]}, which puts it in {where}, was set by field "
            f"manager {names} (metadata.managedFields), none of the tenancy managers' ({known}); whoever wrote it "
            "chose this namespace's tenant",
            ("metadata", "labels", key),
            f"check that {name} belongs in {where}: if it does, have a manager remove the label and let the GitOps "
            f"tool set it again, so that managedFields name only the tool; if a manager writes as {names}, add it "
            "to admission.tenancy.managers.fieldManagers",
            severity="warning")
