"""Who a request comes from, as the API server names it in ``request.userInfo`` (authentication, not RBAC)."""

from __future__ import annotations

#: The group whose members bypass RBAC (the bootstrap cluster-admin credentials): admission still judges them.
MASTERS = "system:masters"

#: Groups the authenticators add to every request of their kind, so naming one names everyone of that kind
#: (k8s.io/apiserver pkg/authentication/user/user.go AllAuthenticated, AllUnauthenticated; serviceaccount
#: AllServiceAccountsGroup), and the user of anonymous requests (user.Anonymous).
EVERYONE_GROUPS: dict[str, str] = {
    "system:authenticated": "every authenticated user and service account",
    "system:unauthenticated": "every anonymous request",
    "system:serviceaccounts": "every service account of every namespace",
}
ANONYMOUS_USER = "system:anonymous"

_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def service_account_username(namespace: str, name: str) -> str:
    """The username the API server gives a service account's requests (k8s.io/apiserver pkg/authentication/
    serviceaccount MakeUsername): ``system:serviceaccount:<namespace>:<name>``."""
    return f"{_SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"

