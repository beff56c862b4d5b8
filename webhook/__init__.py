"""The gpupolicy admission webhook: a thin Flask shell around the policy engine."""

# create_app is re-exported lazily (as pydantic does in its __init__): importing any webhook module must
# not import prometheus_client, because serve.py has to set PROMETHEUS_MULTIPROC_DIR before that import.

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.app import create_app as create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from webhook.app import create_app

        return create_app
    raise AttributeError(f"module 'webhook' has no attribute {name!r}")
