"""The compiler: a pure function from a checked policy to the files of its Kustomize tree."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.tree import Tree
    from policy.resolved.resolve import ResolvedPolicy
    from policy.spec.model import ClusterGPUPolicy

__all__ = ["compile_policy"]


def compile_policy(policy: ClusterGPUPolicy | ResolvedPolicy) -> Tree:
    """The whole output tree of one cluster (relative path -> bytes); same policy, same bytes.

    Assumes the policy passed `policy.load` without errors; pass the load's resolved policy to reuse it.
    Reads no file and writes none; the CLI's writer puts the tree on disk.  Imported lazily so
    `gpupolicy --help` stays free of PyYAML/pydantic.
    """
    from compiler import tree
    from policy.resolved.resolve import ResolvedPolicy, resolve

    return tree.build_tree(policy if isinstance(policy, ResolvedPolicy) else resolve(policy))
