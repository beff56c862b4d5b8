"""The mig-parted `version: v1` document: one named MIG layout per MIG class, plus all-disabled."""

from __future__ import annotations

from compiler import objects, serialize
from compiler.objects import Obj
from policy.hardware.labels import MIG_ALL_DISABLED
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy

CONFIG_KEY = "config.yaml"  # the key mig-manager reads from a custom ConfigMap (mig.md §5)
CONFIG_MAP = "gpupolicy-mig-parted-config"


def render_mig_parted(resolved: ResolvedPolicy) -> Obj:
    """The mig-parted config: entries apply in order and a GPU matched twice ends with the last one
    (mig.md §4), so every group of a class names disjoint GPUs."""
    configs: dict[str, list[Obj]] = {MIG_ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for node_class in resolved.mig_classes:
        assert node_class.name != MIG_ALL_DISABLED, "a MIG class named all-disabled would replace the default"
        configs[node_class.name] = _entries(node_class)
    return {"version": "v1", "mig-configs": configs}


def _entries(node_class: ResolvedClass) -> list[Obj]:
    mig = node_class.spec.sharing.mig
    assert mig is not None
    if mig.layout is not None:
        groups: list[tuple[object, dict[str, int]]] = [("all", dict(mig.layout))]
    else:
        assert mig.groups is not None
        groups = [(g.gpus if g.gpus == "all" else list(g.gpus), dict(g.layout)) for g in mig.groups]
    entries = []
    for devices, layout in groups:
        # No device-filter: a class's nodes hold one GPU model, and a filter naming the wrong board's PCI id
        # (an H100 PCIe node in a class written "H100") makes mig-parted skip every GPU silently (mig.md §4).
        # mig-manager's own generated configs filter only on mixed-model nodes, for the same reason.
        entries.append({"devices": devices, "mig-enabled": True, "mig-devices": dict(sorted(layout.items()))})
    if node_class.whole_gpus:
        # `nvidia-mig-parted assert` passes only when every GPU of the node matches an entry
        # (mp@v0.15.0:cmd/nvidia-mig-parted/assert/config.go:50-94); otherwise mig-manager re-applies the layout
        # and pauses the node's GPU clients on every reconcile. GPUs no group names get MIG off, in their own
        # entry, so the lists stay disjoint and no later entry overrides an earlier one.
        entries.append({"devices": list(node_class.whole_gpus), "mig-enabled": False})
    return entries


def render_config_map(resolved: ResolvedPolicy) -> Obj:
    """The content-named ConfigMap mig-manager mounts (key config.yaml), next to the plugin it serves."""
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    namespace = plugin.operator.namespace if plugin.deploy == "gpu-operator" else plugin.namespace
    text = serialize.dump_yaml(render_mig_parted(resolved)).decode("utf-8")
    return objects.config_map(CONFIG_MAP, {CONFIG_KEY: text}, namespace=namespace,
                              labels=objects.labels(policy, "mig"))
