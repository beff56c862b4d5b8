"""The compiler: a pure function from a checked policy to the files of its Kustomize tree."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compiler.tree import Tree
    from policy.model import ClusterGPUPolicy

__all__ = ["compile_policy"]


def compile_policy(policy: ClusterGPUPolicy) -> Tree:
    """The whole output tree of one cluster (relative path -> bytes); same policy, same bytes.

    Assumes the policy passed `policy.load` without errors.  Reads no file and writes none; the CLI's
    writer puts the tree on disk.  Imported lazily so `gpupolicy --help` stays free of PyYAML/pydantic.
    """
    from compiler import tree

    return tree.build_tree(policy)
