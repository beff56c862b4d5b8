"""Generated ClusterGPUPolicy specs for the benchmarks: N node classes, disjoint selectors, mixed modes."""

# Deterministic (no randomness): the same N always gives the same bytes, so runs compare. Class i gets
# one of four sharing modes in turn (exclusive, time-slicing, MPS, MIG mixed), a GPU model that supports
# that mode, and a nodeSelector {node-pool: pool-<i>, node.kubernetes.io/instance-type: <type>}: every
# pair is disjoint by node-pool, which is what a well-formed fleet looks like (and what the overlap check
# must prove for all N*(N-1)/2 pairs). Three tenants split the classes, as a platform team would.

from __future__ import annotations

# (model, count, sharing block as YAML lines) by mode; models chosen to be valid for the mode.
_MODES: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("exclusive", "H100", 8, ("sharing: exclusive",)),
    ("time-slicing", "T4", 1, ("sharing:", "  timeSlicing: {replicas: 4}")),
    ("mps", "A100-SXM4-80GB", 4, ("sharing:", "  mps: {replicas: 4}")),
    ("mig", "NVIDIA-H100-80GB-HBM3", 8,
     ("sharing:", "  mig:", "    strategy: mixed", "    layout: {3g.40gb: 1, 2g.20gb: 1, 1g.10gb: 2}")),
)
_TENANTS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("prod", ("matchLabels: {gpu-tier: prod}",), ("mig", "exclusive")),
    ("research", ("matchLabels: {gpu-tier: research}",), ("exclusive", "mps", "time-slicing")),
    ("dev", ("matchExpressions:", "  - {key: gpu-tier, operator: In, values: [dev, sandbox]}"), ("time-slicing",)),
)
_INSTANCE_TYPES = ("p5.48xlarge", "g4dn.xlarge", "p4de.24xlarge", "p5e.48xlarge")


def class_name(i: int) -> str:
    return f"pool-{i:04d}"


def generate_spec(classes: int, *, tenants: bool = True, name: str = "bench") -> str:
    """A valid ClusterGPUPolicy YAML with ``classes`` node classes (modes cycle every four classes)."""
    lines = [
        "apiVersion: gpupolicy.dev/v1alpha1",
        "kind: ClusterGPUPolicy",
        "metadata:",
        f"  name: {name}",
        "spec:",
        '  kubernetesVersion: "1.31"',
        "  devicePlugin:",
        "    deploy: standalone",
        "    version: v0.17.1",
        "    namespace: nvidia-device-plugin",
        "  nodeClasses:",
    ]
    for i in range(classes):
        mode, model, count, sharing = _MODES[i % len(_MODES)]
        lines += [
            f"    - name: {class_name(i)}",
            f"      description: generated {mode} class {i}",
            "      nodeSelector:",
            f"        node-pool: {class_name(i)}",
            f"        node.kubernetes.io/instance-type: {_INSTANCE_TYPES[i % len(_INSTANCE_TYPES)]}",
            f"      nodes: {1 + i % 7}",
            f"      gpu: {{model: {model}, count: {count}}}",
            *(f"      {line}" for line in sharing),
        ]
    present = {_MODES[i % len(_MODES)][0] for i in range(classes)}
    chosen = []
    for tenant, selector, allow in _TENANTS if tenants else ():
        modes = [m for m in allow if m in present]  # a tenant allowed no mode any class offers is an error
        if modes:
            chosen += [f"    - name: {tenant}", "      namespaceSelector:", *(f"        {s}" for s in selector),
                       f"      allow: [{', '.join(modes)}]"]
    if chosen:
        lines += ["  tenants:", *chosen]
    default = [m for m in ("time-slicing", "mps") if m in present]  # likewise for namespaces of no tenant
    lines += [
        "  admission:",
        "    enforcement: enforce",
        f"    defaultAllow: [{', '.join(default)}]",
    ]
    return "\n".join(lines) + "\n"
