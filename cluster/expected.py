"""What the compiled tree says must run in the cluster: the node agents' DaemonSets (device plugins, MPS daemons,
HAMi's plugin, GPU Feature Discovery, the MIG manager), the node-label reconciler's Deployment, and the ConfigMaps
they mount."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from cluster import facts
from cluster.resources import ConfigMap, DaemonSet, Deployment, configmap_from, daemonset_from, deployment_from
from compiler.objects import NODE_CLASS_LABEL
from compiler.targets.hami import VALUES_PATH

# Components of the tree that configure GPU nodes: their agents, the MIG manager and the label reconciler that
# drive them, and the ConfigMaps all of them read; admission/ is the webhook's business, not a node's.
_NODE_COMPONENTS = ("device-plugin/", "feature-discovery/", "hami/", "mig/", "mig-manager/", "node-labels/")


@dataclass(frozen=True)
class ExpectedDaemonSet:
    """A DaemonSet of the tree, parsed like a live one, plus the class it serves."""

    node_class: str
    daemonset: DaemonSet

    @property
    def is_plugin(self) -> bool:
        """The device plugin itself (not the MPS control daemon that runs beside it)."""
        return facts.is_device_plugin(self.daemonset)


@dataclass(frozen=True)
class ExpectedDeviceClass:
    """A DeviceClass of the tree's dra/: the class it serves and the CEL selectors that pick its devices."""

    name: str
    node_class: str
    selectors: tuple[str, ...]


@dataclass(frozen=True)
class Expected:
    daemonsets: tuple[ExpectedDaemonSet, ...]
    configmaps: tuple[ConfigMap, ...]
    hami_device_config: str | None = None
    """The device-config.yaml HAMi's scheduler must run with (the tree's hami-values.yaml), if vgpu is used."""
    deployments: tuple[Deployment, ...] = ()
    """Cluster-wide controllers of the tree (the node-label reconciler)."""
    device_classes: tuple[ExpectedDeviceClass, ...] = ()
    """The DRA pool's DeviceClasses, as compiled."""

    @property
    def namespaces(self) -> tuple[str, ...]:
        found = ({d.daemonset.namespace for d in self.daemonsets} | {c.namespace for c in self.configmaps}
                 | {d.namespace for d in self.deployments})
        return tuple(sorted(found))


def from_tree(tree: Mapping[str, bytes]) -> Expected:
    """The node-side objects of a compiled tree (``compile_policy``'s output): the single source of truth for
    names, content-hashed ConfigMap names, images and selectors."""
    daemonsets, configmaps, deployments, device_classes = [], [], [], []
    for path in sorted(tree):
        if path.startswith("dra/deviceclass-") and path.endswith(".yaml"):
            device_classes.append(_device_class(yaml.safe_load(tree[path])))
            continue
        if not path.startswith(_NODE_COMPONENTS) or not path.endswith(".yaml"):
            continue
        obj = yaml.safe_load(tree[path])
        if not isinstance(obj, Mapping):
            continue
        if obj.get("kind") == "DaemonSet":
            parsed = daemonset_from(obj)
            node_class = parsed.selector.get(NODE_CLASS_LABEL) or parsed.labels.get(NODE_CLASS_LABEL, "")
            daemonsets.append(ExpectedDaemonSet(node_class, parsed))
        elif obj.get("kind") == "ConfigMap":
            configmaps.append(configmap_from(obj))
        elif obj.get("kind") == "Deployment":
            deployments.append(deployment_from(obj))
    return Expected(tuple(daemonsets), tuple(configmaps), _hami_device_config(tree), tuple(deployments),
                    tuple(device_classes))


def _device_class(obj: Mapping[str, object]) -> ExpectedDeviceClass:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    assert isinstance(meta, Mapping) and isinstance(spec, Mapping), "the compiler writes DeviceClasses whole"
    expressions = tuple(str((s.get("cel") or {}).get("expression", "")) for s in spec.get("selectors") or ())
    return ExpectedDeviceClass(str(meta.get("name", "")), str((meta.get("labels") or {}).get(NODE_CLASS_LABEL, "")),
                               expressions)


def _hami_device_config(tree: Mapping[str, bytes]) -> str | None:
    if VALUES_PATH not in tree:
        return None
    values = yaml.safe_load(tree[VALUES_PATH])
    content = (values.get("device-config") or {}).get("content") if isinstance(values, Mapping) else None
    return content if isinstance(content, str) else None
