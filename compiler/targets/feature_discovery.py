"""GPU Feature Discovery in standalone trees: one DaemonSet per class, reading that class's config, so the
sharing labels it writes (replicas, -SHARED, sharing-strategy, mps.capable) are the class's
(device-plugin.md §6; operator-migmanager notes B.2-B.5).

File mode on every release: GFD writes /etc/kubernetes/node-feature-discovery/features.d/gfd and Node Feature
Discovery's worker publishes it. No API access at all (no token, no RBAC), where the NodeFeature mode would need
nodefeatures create/update and the NFD master's NodeFeature API; USE_NODE_FEATURE_API is set explicitly because
v0.19 flipped its default (k8s-device-plugin CHANGELOG v0.19.0).
"""

from __future__ import annotations

from compiler import objects
from compiler.objects import Obj
from compiler.targets import device_plugin
from policy.hardware import releases
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy

APP = "gpu-feature-discovery"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"


def daemonset_name(node_class: str) -> str:
    """The GPU Feature Discovery DaemonSet of a class."""
    return f"{APP}-{node_class}"


def render_feature_discovery(resolved: ResolvedPolicy, config_maps: dict[str, str]) -> dict[str, Obj]:
    """File stem -> DaemonSet per class (config_maps: class -> its device-plugin ConfigMap's name)."""
    return {f"daemonset-{nc.name}": _daemon_set(resolved, nc, config_maps[nc.name])
            for nc in sorted(resolved.classes, key=lambda nc: nc.name) if nc.name in config_maps}


def _image(resolved: ResolvedPolicy) -> tuple[str, list[str]]:
    """GFD ships in the plugin's image from v0.15.0; before, its own image: the one the targeted release's Helm
    chart deploys (policy.hardware.releases.feature_discovery, which cites each release's chart). A release
    shipped with none (v0.12.0) is refused before compiling (policy.checks.versions.check_standalone_components)."""
    plugin = resolved.spec.device_plugin
    shipped = releases.feature_discovery(resolved.plugin_release)
    if shipped.in_plugin_image:
        return plugin.effective_image, ["gpu-feature-discovery"]
    assert shipped.image is not None, f"{plugin.version}: {shipped.missing}"
    # GFD before v0.15 is the image's entrypoint (gfd@v0.6.0..v0.8.2: deployments/container/Dockerfile.ubi8
    # ENTRYPOINT ["/usr/bin/gpu-feature-discovery"]), so no command; it reads --config-file from v0.6.0 on
    # (gfd@v0.6.0: cmd/gpu-feature-discovery/main.go, flag config-file).
    return shipped.image, []


def _daemon_set(resolved: ResolvedPolicy, node_class: ResolvedClass, config_map: str) -> Obj:
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    image, command = _image(resolved)
    env = list(device_plugin.BASE_ENV)  # no MIG_STRATEGY: env beats the class's config file (device-plugin.md §2)
    if plugin.version_tuple >= (0, 15, 0):
        env.append({"name": "USE_NODE_FEATURE_API", "value": "false"})
    container: Obj = {
        "name": "gpu-feature-discovery",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": [f"--config-file={device_plugin.config_path(node_class.name)}"],
        "env": sorted(env, key=lambda e: e["name"]),
        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "20m", "memory": "64Mi"}},
        # The chart's default (gfd.securityContext privileged): NVML needs the device nodes.
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "features-d", "mountPath": FEATURES_DIR},
            {"name": "host-sys", "mountPath": "/sys", "readOnly": True},
            {"name": "config", "mountPath": device_plugin.CONFIG_DIR, "readOnly": True},
        ],
    }
    if command:
        container["command"] = command
    volumes = [objects.host_path_volume("features-d", FEATURES_DIR, "DirectoryOrCreate"),
               objects.host_path_volume("host-sys", "/sys", "Directory"),
               objects.config_file_volume("config", config_map, node_class.name, f"{node_class.name}.yaml")]
    extra: Obj = {}
    template: dict[str, str] = {"app": APP}
    if node_class.mig_manager:
        affinity, template = objects.mig_client("gpu-feature-discovery")
        extra["affinity"] = affinity
    pod_spec = {
        "automountServiceAccountToken": False,
        "containers": [container],
        "nodeSelector": dict(node_class.node_selector),
        "priorityClassName": plugin.priority_class_name,
        "tolerations": objects.class_tolerations(plugin.tolerations, node_class),
        "volumes": volumes,
        **extra,
    }
    return objects.daemon_set(daemonset_name(node_class.name), namespace=plugin.namespace,
                              labels=objects.labels(policy, "gpu-feature-discovery"),
                              selector=objects.selector_labels(APP, node_class.name), pod_spec=pod_spec,
                              template_labels=template)
