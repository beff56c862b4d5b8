"""Node classes and their selectors: names, GPU models, classes that could match one node, labels that change."""

from __future__ import annotations

from collections.abc import Iterator

from policy.checks.common import class_path, classes_of
from policy.hardware import catalog
from policy.hardware.labels import GFD_MUTABLE
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import NodeClass


def check_unique_names(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for field, code, items in (
        ("nodeClasses", "duplicate-class-name", policy.spec.node_classes),
        ("tenants", "duplicate-tenant-name", policy.spec.tenants),
    ):
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            if item.name in first:
                yield Diagnostic(code, f"{field} {item.name!r} is defined twice (first at index {first[item.name]})",
                                 ("spec", field, i, "name"), "give every entry its own name")
            first.setdefault(item.name, i)


def check_gpu_models(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in classes_of(policy):
        model = catalog.lookup(nc.gpu.model)
        if model is None and nc.gpu.memory is None:
            near = catalog.suggest(nc.gpu.model)
            ambiguous = nc.gpu.model.lower() in catalog.family_names() and len(near) > 1
            if ambiguous:
                hint = f"name the variant: one of {', '.join(near)}"
            else:
                hint = f"did you mean {near[0]!r}?" if near else "use the node's nvidia.com/gpu.product label"
            what = "is ambiguous" if ambiguous else "is not in the catalog"
            yield Diagnostic("unknown-gpu-model", f"GPU model {nc.gpu.model!r} {what}",
                             class_path(i, "gpu", "model"),
                             hint + " (or state gpu.memory for a model the catalog lacks; MIG is then unavailable)")
        elif model is None and (near := catalog.misspelt(nc.gpu.model)) is not None:
            yield Diagnostic("gpu-model-typo", f"GPU model {nc.gpu.model!r} is not in the catalog, but one typo away "
                             f"from {near!r}, so gpu.memory is used and MIG is unavailable",
                             class_path(i, "gpu", "model"),
                             f"did you mean {near!r}? If the nodes' nvidia.com/gpu.product label really is "
                             f"{nc.gpu.model!r}, ignore this", severity="warning")
        elif model is not None and nc.gpu.memory is not None and int(nc.gpu.memory) > model.memory_mib:
            yield Diagnostic("memory-override-on-known-model",
                             f"gpu.memory {int(nc.gpu.memory)} MiB is more than a {model.product} has "
                             f"({model.memory_mib} MiB)", class_path(i, "gpu", "memory"),
                             "use the node's nvidia.com/gpu.memory label value, in MiB", severity="warning")


def check_overlapping_classes(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    classes = policy.spec.node_classes
    for j, i in overlapping_pairs([nc.name for nc in classes], [nc.node_selector for nc in classes]):
        a, b = classes[i], classes[j]
        yield Diagnostic(
            "overlapping-node-classes",
            f"node classes {a.name!r} and {b.name!r} can select the same node: a node carrying both "
            "label sets would run two device plugins that register the same resources",
            class_path(j, "nodeSelector"),
            f"make the selectors disjoint: give both a key with different values (e.g. "
            f"node.kubernetes.io/instance-type), as {a.name!r} has {_fmt(a.node_selector)}",
        )


def overlapping_pairs(names: list[str], node_selectors: list[dict[str, str]]) -> Iterator[tuple[int, int]]:
    """(j, i) for every i < j whose equality selectors share no key with different values, and whose
    names differ (a duplicate name is check_unique_names' finding), ordered by j, then i.

    The same pairs as testing selectors.conflicting_key on all n(n-1)/2 pairs, without the quadratic
    Python loop: class i conflicts with class j exactly when i has some key of j's selector but not
    j's value for it, so with one bitset (an int, bit i for class i) per key and per key=value seen so
    far, j's conflicting classes are an OR over j's few labels of ``has_key & ~has_value``. A 1,000-class
    fleet takes milliseconds instead of a second (docs/performance.md).
    """
    has_key: dict[str, int] = {}
    has_value: dict[tuple[str, str], int] = {}
    has_name: dict[str, int] = {}
    for j, (name, selector) in enumerate(zip(names, node_selectors, strict=True)):
        excluded = has_name.get(name, 0)
        for key, value in selector.items():
            excluded |= has_key.get(key, 0) & ~has_value.get((key, value), 0)
        overlapping = ((1 << j) - 1) & ~excluded
        while overlapping:
            lowest = overlapping & -overlapping
            yield j, lowest.bit_length() - 1
            overlapping ^= lowest
        bit = 1 << j
        has_name[name] = has_name.get(name, 0) | bit
        for key, value in selector.items():
            has_key[key] = has_key.get(key, 0) | bit
            has_value[(key, value)] = has_value.get((key, value), 0) | bit


def _fmt(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _rewritten_labels(nc: NodeClass) -> tuple[str, ...]:
    """GFD labels this class's own config changes.  Under MIG mixed the full-GPU labels come from a labeler
    without sharing, so only replicas (to 0) and the sharing strategy move (internal/lm/mig-strategy.go)."""
    if nc.sharing.mode in ("exclusive", "vgpu"):  # HAMi's plugin does not feed GFD: its labels stay unshared
        return ()
    if nc.mig_strategy == "mixed":
        return ("nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy")
    return GFD_MUTABLE


def check_mutable_selector_labels(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in classes_of(policy):
        rewritten = _rewritten_labels(nc)
        for key in sorted(nc.node_selector):
            if key in rewritten:
                yield Diagnostic(
                    "shared-product-selector",
                    f"class {nc.name!r} selects nodes by {key}, which GPU Feature Discovery rewrites once "
                    f"{nc.sharing.mode} is configured (e.g. Tesla-T4 becomes Tesla-T4-SHARED)",
                    class_path(i, "nodeSelector", key),
                    "select by a label sharing does not change: node.kubernetes.io/instance-type or a node-pool label",
                )

# mig-parted config names the compiler itself emits for every cluster.
RESERVED_CLASS_NAMES = frozenset({"all-disabled", "all-enabled"})


def check_reserved_names(resolved: ResolvedPolicy) -> Iterator[Diagnostic]:
    policy = resolved.policy
    for i, nc in classes_of(policy):
        if nc.name in RESERVED_CLASS_NAMES:
            yield Diagnostic("reserved-class-name", f"class name {nc.name!r} is reserved: the compiled mig-parted "
                             "config already defines it for nodes whose MIG mode is off", class_path(i, "name"),
                             "rename the class, e.g. after the node pool it selects")
