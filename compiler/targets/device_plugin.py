"""The NVIDIA device plugin: its config file per node class, and standalone, one DaemonSet per class to run it."""

from __future__ import annotations

from typing import Any

from compiler import objects, serialize
from compiler.objects import Obj
from policy.hardware import releases
from policy.hardware.labels import MPS_CAPABLE
from policy.resolved.resolve import GPU, ResolvedClass, ResolvedPolicy
from policy.spec.model import ClusterGPUPolicy, DevicePlugin

PLUGIN_APP = "nvidia-device-plugin"
MPS_APP = "mps-control-daemon"
CONFIG_DIR = "/etc/nvidia/device-plugin"
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
# The MPS root the Helm chart and the GPU Operator use (device-plugin.md §5.2, §7).
MPS_ROOT = "/run/nvidia/mps"

# Env every plugin container gets, as the Helm chart sets it (device-plugin.md §5.2).  Flags are NOT
# set through env: env beats the config file (§2), and the file must be the one source of truth.
BASE_ENV = (
    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
)
# The plugin is small: the seed's TKE DaemonSet ran with 100m/100Mi.  No CPU limit (throttling a
# node-critical pod helps no one); a memory limit with room for MIG nodes that list many devices.
def _resources() -> Obj:
    return {"limits": {"memory": "256Mi"}, "requests": {"cpu": "50m", "memory": "100Mi"}}


def plugin_daemonset_name(node_class: str) -> str:
    """The standalone plugin DaemonSet of a class (and the base name of its ConfigMap)."""
    return f"{PLUGIN_APP}-{node_class}"


def mps_daemonset_name(node_class: str) -> str:
    """The MPS control daemon DaemonSet of a class."""
    return f"{MPS_APP}-{node_class}"


def config_path(node_class: str) -> str:
    """Where a class's config file is mounted; --config-file points at this file, never at its directory."""
    return f"{CONFIG_DIR}/{node_class}.yaml"


# ----------------------------------------------------------------------- the config file (api/config/v1)


def render_config(plugin: DevicePlugin, node_class: ResolvedClass) -> Obj:
    """The v1 config file of one class, in the format the targeted plugin release reads (device-plugin.md §2)."""
    config: Obj = {"version": "v1", "flags": _flags(plugin, node_class)}
    sharing = _sharing(node_class)
    if sharing:
        config["sharing"] = sharing
    return config


def render_config_text(plugin: DevicePlugin, node_class: ResolvedClass) -> str:
    return serialize.dump_yaml(render_config(plugin, node_class)).decode("utf-8")


def _flags(plugin: DevicePlugin, node_class: ResolvedClass) -> Obj:
    flags: Obj = {"migStrategy": node_class.mig_strategy}
    if plugin.deploy == "gpu-operator":
        # The operator sets these through env, which beats the file (device-plugin.md §7): writing them
        # here would only mislead a reader.
        return flags
    spec_flags = plugin.flags
    flags["failOnInitError"] = spec_flags.fail_on_init_error
    flags["nvidiaDriverRoot"] = spec_flags.nvidia_driver_root
    flags["plugin"] = {
        "deviceIDStrategy": spec_flags.device_id_strategy,
        "deviceListStrategy": _device_list_strategy(plugin),
        "passDeviceSpecs": spec_flags.pass_device_specs,
    }
    if node_class.mps_daemon:
        flags["mpsRoot"] = MPS_ROOT  # MPS requires it ("using MPS requires --mps-root to be specified")
    return flags


def _device_list_strategy(plugin: DevicePlugin) -> Any:
    """deviceListStrategy as the targeted release parses it (policy/hardware/releases.py): one string up to v0.13.0 (the
    checks refuse several there), a list only in v0.14.0, either from v0.14.1 on (then as the spec wrote it)."""
    strategy = plugin.flags.device_list_strategy
    strategies = list(plugin.flags.device_list_strategies)
    list_format = releases.behaviour(plugin.version).list_format
    if list_format == "list":
        return strategies
    if list_format == "string":
        return strategies[0]
    return strategy if isinstance(strategy, str) else strategies


def _sharing(node_class: ResolvedClass) -> Obj:
    sharing = node_class.spec.sharing
    if sharing.time_slicing is not None:
        return {"timeSlicing": _replicated(sharing.time_slicing.rename_by_default,
                                           node_class.offers[0].fail_requests_greater_than_one,
                                           [(GPU, node_class.replicas)])}
    if sharing.mps is not None:
        # The offer says what the plugin enforces: v0.15 to v0.19 force failRequestsGreaterThanOne=true for MPS.
        return {"mps": _replicated(sharing.mps.rename_by_default, node_class.offers[0].fail_requests_greater_than_one,
                                   [(GPU, node_class.replicas)])}
    if sharing.mig is not None:
        resources = [
            (offer.resource, offer.replicas)
            for offer in node_class.offers
            if offer.replicas >= 2  # the plugin rejects replicas < 2 ("number of replicas must be >= 2")
        ]
        if resources:
            return {"timeSlicing": _replicated(False, sharing.mig.fail_requests_greater_than_one, resources)}
    return {}


def _replicated(rename_by_default: bool, fail_above_one: bool, resources: list[tuple[str, int]]) -> Obj:
    return {
        "failRequestsGreaterThanOne": fail_above_one,
        "renameByDefault": rename_by_default,
        "resources": [{"name": name, "replicas": replicas} for name, replicas in sorted(resources)],
    }


# ----------------------------------------------------------------------- standalone: per-class DaemonSets


def render_standalone(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> object: per class one ConfigMap (content-named) and one plugin DaemonSet, plus the MPS
    control daemon of MPS classes.  vgpu classes run HAMi's plugin instead (compiler.targets.hami); their config
    is written only where GPU Feature Discovery runs, which reads it (no sharing: HAMi's is not GFD's business).
    Each class's objects depend on that class alone, so changing one class leaves every other class's DaemonSet
    byte-identical."""
    policy = resolved.policy
    out: dict[str, Obj] = {}
    for node_class in sorted(resolved.classes, key=lambda nc: nc.name):
        if node_class.dra or (node_class.vgpu is not None and not policy.spec.device_plugin.labels_nodes):
            continue  # NVIDIA's DRA driver serves DRA classes (compiler.targets.dra)
        config_map = _class_config_map(policy, node_class)
        name = config_map["metadata"]["name"]
        out[f"configmap-{node_class.name}"] = config_map
        if node_class.vgpu is not None:
            continue
        out[f"daemonset-{node_class.name}"] = _plugin_daemon_set(policy, node_class, name)
        if node_class.mps_daemon:
            out[f"daemonset-mps-control-daemon-{node_class.name}"] = _mps_daemon_set(policy, node_class, name)
    return out


def _class_config_map(policy: ClusterGPUPolicy, node_class: ResolvedClass) -> Obj:
    plugin = policy.spec.device_plugin
    return objects.config_map(
        plugin_daemonset_name(node_class.name),
        {node_class.name: render_config_text(plugin, node_class)},
        namespace=plugin.namespace,
        labels=objects.labels(policy, "device-plugin", **{objects.NODE_CLASS_LABEL: node_class.name}),
    )


def _config_volume(node_class: ResolvedClass, config_map_name: str) -> Obj:
    return objects.config_file_volume("config", config_map_name, node_class.name, f"{node_class.name}.yaml")


def _config_mount() -> Obj:
    return {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}


def _plugin_daemon_set(policy: ClusterGPUPolicy, node_class: ResolvedClass, config_map_name: str) -> Obj:
    plugin = policy.spec.device_plugin
    mps = node_class.mps_daemon
    mounts = [{"name": "device-plugins", "mountPath": KUBELET_DEVICE_PLUGINS}, _config_mount()]
    volumes = [objects.host_path_volume("device-plugins", KUBELET_DEVICE_PLUGINS, "Directory"),
               _config_volume(node_class, config_map_name)]
    env = list(BASE_ENV)
    if node_class.mig_strategy != "none":
        env.append({"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"})  # Helm: unless every strategy is none
    if mps:
        env.append({"name": "MPS_ROOT", "value": MPS_ROOT})
        # The plugin health-checks the MPS daemon through its shm and pipe dirs (Helm chart template).
        mounts += [{"name": "mps-root", "mountPath": "/mps"}, {"name": "mps-shm", "mountPath": "/dev/shm"}]
        volumes += _mps_volumes()
    if any(s.startswith("cdi") for s in plugin.flags.device_list_strategies):
        # CDI strategies write specs to /var/run/cdi and read the driver at /driver-root (Helm chart).
        mounts += [{"name": "cdi-root", "mountPath": "/var/run/cdi"},
                   {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}]
        volumes += [objects.host_path_volume("cdi-root", "/var/run/cdi", "DirectoryOrCreate"),
                    objects.host_path_volume("driver-root", plugin.flags.nvidia_driver_root, "Directory")]
    container = {
        "name": "nvidia-device-plugin-ctr",
        "image": plugin.effective_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["nvidia-device-plugin"],
        "args": [f"--config-file={config_path(node_class.name)}"],
        "env": sorted(env, key=lambda e: e["name"]),
        "resources": _resources(),
        "securityContext": _plugin_security_context(node_class),
        "volumeMounts": mounts,
    }
    affinity, app = _mig_client(node_class, "device-plugin")
    return objects.daemon_set(
        plugin_daemonset_name(node_class.name),
        namespace=plugin.namespace,
        labels=objects.labels(policy, "device-plugin"),
        selector=objects.selector_labels(PLUGIN_APP, node_class.name),
        pod_spec=_pod_spec(plugin, node_class, dict(node_class.node_selector), [container], volumes, **affinity),
        template_labels=app,
    )


def _mig_client(node_class: ResolvedClass, component: str) -> tuple[Obj, dict[str, str]]:
    """Pod-spec fields and template labels that make a class's GPU client step aside for the tree's MIG manager."""
    if not node_class.mig_manager:
        return {}, {}
    affinity, app = objects.mig_client(component)
    return {"affinity": affinity}, app


def _plugin_security_context(node_class: ResolvedClass) -> Obj:
    if node_class.mig_strategy != "none":
        # MIG needs SYS_ADMIN to read the MIG capability files; the Helm chart adds it exactly when some
        # config may use a MIG strategy other than none (templates/_helpers.tpl requiresCapSysAdmin).
        return {"capabilities": {"add": ["SYS_ADMIN"]}}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_spec(plugin: DevicePlugin, node_class: ResolvedClass, node_selector: dict[str, str], containers: list[Obj],
              volumes: list[Obj], **extra: Any) -> Obj:
    return {
        "automountServiceAccountToken": False,  # neither the plugin nor the MPS daemon calls the API
        "containers": containers,
        "nodeSelector": node_selector,
        "priorityClassName": plugin.priority_class_name,
        "tolerations": objects.class_tolerations(plugin.tolerations, node_class),
        "volumes": volumes,
        **extra,
    }


def _mps_volumes() -> list[Obj]:
    return [objects.host_path_volume("mps-root", MPS_ROOT, "DirectoryOrCreate"),
            objects.host_path_volume("mps-shm", f"{MPS_ROOT}/shm")]


def _mps_daemon_set(policy: ClusterGPUPolicy, node_class: ResolvedClass, config_map_name: str) -> Obj:
    """The MPS control daemon of one class (Helm chart daemonset-mps-control-daemon.yml, v0.15+): it starts
    nvidia-cuda-mps-control per GPU with the class's replicas, so it reads the same config file."""
    plugin = policy.spec.device_plugin
    image = plugin.effective_image
    mount_shm = {
        "name": "mps-control-daemon-mounts",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mps-control-daemon", "mount-shm"],
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}],
    }
    daemon = {
        "name": "mps-control-daemon-ctr",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mps-control-daemon"],
        "args": [f"--config-file={config_path(node_class.name)}"],
        "env": sorted([*BASE_ENV, {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                                     "fieldPath": "spec.nodeName"}}}],
                      key=lambda e: e["name"]),
        "resources": _resources(),
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "mps-root", "mountPath": "/mps"}, {"name": "mps-shm", "mountPath": "/dev/shm"},
                         _config_mount()],
    }
    # GFD (or a person) labels nodes nvidia.com/mps.capable=true once MPS is configured; the daemon waits
    # for it, as in the Helm chart.
    selector = {**node_class.node_selector, MPS_CAPABLE: "true"}
    volumes = [*_mps_volumes(), _config_volume(node_class, config_map_name)]
    # The daemon pauses with the plugin it serves, and carries the plugin's app label: the MIG manager waits for
    # no MPS label of its own (mig-parted@v0.12.1: deployments/container/reconfigure-mig.sh:506-532), and an
    # nvidia-cuda-mps-control still running would hold the GPUs whose MIG mode it changes.
    affinity, app = _mig_client(node_class, "device-plugin")
    return objects.daemon_set(
        mps_daemonset_name(node_class.name),
        namespace=plugin.namespace,
        labels=objects.labels(policy, "mps-control-daemon"),
        selector=objects.selector_labels(MPS_APP, node_class.name),
        pod_spec=_pod_spec(plugin, node_class, selector, [daemon], volumes, hostPID=True, initContainers=[mount_shm],
                           **affinity),
        template_labels=app,
    )
