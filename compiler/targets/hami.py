"""Project-HAMi: per vgpu class a device-plugin DaemonSet with its own config, and the values of HAMi's Helm chart.

Why per-class DaemonSets. HAMi keys per-node settings by exact node name (config.json ``nodeconfig[].name`` is
compared with NODE_NAME, plugin/server.go readFromConfigFile), which a GitOps tree cannot know for autoscaled
pools. But every per-class setting (deviceSplitCount, deviceMemoryScaling, deviceCoreScaling, libCudaLogLevel,
disableCoreLimit) is read by the device plugin alone, from the file its ``--config-file`` names; the scheduler
reads each GPU's figures from the node annotation that plugin writes (pkg/device/nvidia/device.go GetNodeDevices).
So one DaemonSet per class, selected by the class's own labels and mounting its own copy of device-config.yaml,
gives each class its settings with no node names, beside one scheduler. The copies differ only in those
plugin-side keys: the resource names and every other scheduler-side key are written from spec.hami into each.

Why HAMi's chart for the rest. The scheduler (a kube-scheduler matching the cluster's version, the extender, the
webhook and its certificates) is HAMi's supported install and nothing in it is per class. gpupolicy writes a
values file for that chart (``hami-values.yaml``): HAMi's own device plugin off (it would run one config on
every GPU node), the resource names, the scheduler name, the scheduler's device-config and, in mixed fleets, the
webhook's namespaceSelector (policy.resolved.vgpu_scope). `compile --check` covers that file like every other.

config.json. Each class's ConfigMap also carries ``config.json`` with an empty ``nodeconfig``: the plugin then
registers its GPUs in hami-core mode (a missing file registers no mode at all). gpupolicy offers no HAMi dynamic
MIG (``operatingmode: mig``): MIG classes use mig-parted layouts and NVIDIA's plugin.
"""

from __future__ import annotations

import json

from compiler import objects, serialize
from compiler.objects import Obj
from compiler.targets import namespaces
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy
from policy.resolved.vgpu_scope import hami_scope
from policy.spec.model import ClusterGPUPolicy, Hami
from policy.vgpu import hami

PLUGIN_APP = "hami-device-plugin"
ACCOUNT = "gpupolicy-hami-device-plugin"
CONFIG_DIR = "/config"  # the plugin reads config.json from /config/config.json (plugin/server.go ConfigFilePath)
DEVICE_CONFIG_KEY = "device-config.yaml"
NODE_CONFIG_KEY = "config.json"
#: Helm values for HAMi's release, at the top of the tree beside gpu-operator-values.yaml: not a Kubernetes object.
VALUES_PATH = "hami-values.yaml"
HOOK_PATH = "/usr/local"  # charts/hami values global.gpuHookPath: HAMi-core's library lands in <hook>/vgpu
LIB_PATH = f"{HOOK_PATH}/vgpu"
MONITOR_PORT = 9394  # vGPUmonitor's metrics (charts/hami daemonsetnvidia.yaml)
#: HAMi's chart defaults for the plugin-only keys (charts/hami values.yaml:347-349, 492), written into the
#: scheduler's copy so that file still loads in a plugin: the plugin dereferences these without a nil check.
_PLUGIN_DEFAULTS = {"deviceSplitCount": 10, "deviceMemoryScaling": 1.0, "deviceCoreScaling": 1.0,
                    "libCudaLogLevel": "1"}
_SCHEDULER_COPY_NOTE = (
    "# The scheduler's copy, written by gpupolicy. deviceSplitCount, deviceMemoryScaling, deviceCoreScaling and\n"
    "# libCudaLogLevel are read by the device plugin only; each vgpu class's plugin reads its own copy (hami/ in\n"
    "# the compiled tree). They are HAMi's chart defaults here.\n"
)
# The plugin's ClusterRole, as HAMi's chart grants it (charts/hami templates/device-plugin/monitorrole.yaml): it
# patches node annotations, reads and annotates the pods it allocates for, and records events.
_RULES = (
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "patch", "update", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list", "update"]},
)


# ----------------------------------------------------------------------- device-config.yaml and config.json


def _scheduler_keys(settings: Hami) -> Obj:
    """The cluster-wide keys of the nvidia block (pkg/device/nvidia/device.go NvidiaConfig): the same in every
    copy, since the scheduler and each plugin must agree on the names."""
    names = settings.resource_names
    return {
        "resourceCountName": names.count,
        "resourceMemoryName": names.memory,
        "resourceMemoryPercentageName": names.memory_percentage,
        "resourceCoreName": names.cores,
        "resourcePriorityName": names.priority,
        "defaultMemory": int(settings.default_memory) if settings.default_memory is not None else 0,
        "defaultCores": settings.default_cores,
        "defaultGPUNum": settings.default_gpu_num,
        "memoryFactor": settings.memory_factor,
        "gpuCorePolicy": settings.core_policy,
        "overwriteEnv": False,
    }


def render_device_config(settings: Hami, node_class: ResolvedClass | None) -> Obj:
    """The device-config document of one vgpu class's plugin, or the scheduler's (``node_class`` None).

    Only the nvidia section: the chart's ``device-config.content`` replaces the whole file, and a vendor section
    left out initialises that vendor with empty resource names, which its webhook and filter then never match
    (their MutateAdmission look up only those names; pkg/device/*/device.go).
    """
    block = _scheduler_keys(settings)
    if node_class is None:
        block.update(_PLUGIN_DEFAULTS)
    else:
        vgpu = node_class.vgpu
        assert vgpu is not None, "only vgpu classes run HAMi's device plugin"
        block.update({
            "deviceSplitCount": vgpu.split_count,
            "deviceMemoryScaling": float(vgpu.memory_scaling),
            "deviceCoreScaling": float(vgpu.core_scaling),
            "libCudaLogLevel": _PLUGIN_DEFAULTS["libCudaLogLevel"],
            "disableCoreLimit": vgpu.disable_core_limit,
        })
    return {"nvidia": block}


def render_node_config() -> Obj:
    """config.json: no per-node entry, so every node of the class registers in hami-core mode (server.go:130,156)."""
    return {"nodeconfig": []}


def _device_config_text(settings: Hami, node_class: ResolvedClass | None) -> str:
    return serialize.dump_yaml(render_device_config(settings, node_class)).decode("utf-8")


# ----------------------------------------------------------------------- the hami/ component


def daemonset_name(node_class: str) -> str:
    """HAMi's device-plugin DaemonSet of a vgpu class."""
    return f"{PLUGIN_APP}-{node_class}"


def render_hami(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> object: the plugin's account and RBAC, and per vgpu class a content-named ConfigMap and a
    DaemonSet (each class's objects depend on that class alone)."""
    policy = resolved.policy
    out: dict[str, Obj] = {
        f"serviceaccount-{ACCOUNT}": _service_account(policy),
        f"clusterrole-{ACCOUNT}": _cluster_role(policy),
        f"clusterrolebinding-{ACCOUNT}": _cluster_role_binding(policy),
    }
    for node_class in resolved.vgpu_classes:
        config_map = _class_config_map(policy, node_class)
        out[f"configmap-{node_class.name}"] = config_map
        out[f"daemonset-{node_class.name}"] = _daemon_set(policy, node_class, config_map["metadata"]["name"])
    return out


def _labels(policy: ClusterGPUPolicy, **extra: str) -> dict[str, str]:
    return objects.labels(policy, PLUGIN_APP, **extra)


def _service_account(policy: ClusterGPUPolicy) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": objects.metadata(ACCOUNT, namespace=policy.spec.hami.namespace, labels=_labels(policy))}


def _cluster_role(policy: ClusterGPUPolicy) -> Obj:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": objects.metadata(ACCOUNT, labels=_labels(policy)), "rules": [dict(r) for r in _RULES]}


def _cluster_role_binding(policy: ClusterGPUPolicy) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": objects.metadata(ACCOUNT, labels=_labels(policy)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": policy.spec.hami.namespace}],
    }


def _class_config_map(policy: ClusterGPUPolicy, node_class: ResolvedClass) -> Obj:
    data = {
        DEVICE_CONFIG_KEY: _device_config_text(policy.spec.hami, node_class),
        NODE_CONFIG_KEY: json.dumps(render_node_config(), sort_keys=True) + "\n",
    }
    return objects.config_map(f"{PLUGIN_APP}-{node_class.name}", data, namespace=policy.spec.hami.namespace,
                              labels=_labels(policy, **{objects.NODE_CLASS_LABEL: node_class.name}))


def _field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def _daemon_set(policy: ClusterGPUPolicy, node_class: ResolvedClass, config_map: str) -> Obj:
    """HAMi's chart DaemonSet (charts/hami templates/device-plugin/daemonsetnvidia.yaml) for one class: its
    nodeSelector, its config, the same containers, mounts and privileges."""
    settings = policy.spec.hami
    image = settings.effective_image
    plugin = {
        "name": "device-plugin",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # vgpu-init.sh copies HAMi-core (libvgpu.so) to the host, where the plugin mounts it into vGPU containers.
        "lifecycle": {"postStart": {"exec": {"command": ["/bin/sh", "-c",
                                                         f"/k8s-vgpu/bin/vgpu-init.sh {LIB_PATH}/"]}}},
        # The split, scaling and core-limit flags the chart also passes are never read in v2.10.0
        # (cmd/device-plugin/nvidia/vgpucfg.go): the config file is the one source of them.
        "command": ["nvidia-device-plugin", f"--config-file={CONFIG_DIR}/{DEVICE_CONFIG_KEY}", "--mig-strategy=none"],
        "env": [
            {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"},
            {"name": "HOOK_PATH", "value": HOOK_PATH},
            _field_env("NODE_NAME", "spec.nodeName"),
            {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"},
        ],
        "securityContext": {"allowPrivilegeEscalation": True, "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]},
                            "privileged": True},
        # Requests only: HAMi publishes no sizing, and a memory limit could OOM-kill a node agent.
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}},
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "lib", "mountPath": LIB_PATH},
            {"name": "usrbin", "mountPath": "/usrbin"},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "hosttmp", "mountPath": "/tmp"},
            {"name": "cdi-root", "mountPath": "/var/run/cdi"},
        ],
    }
    monitor = {
        "name": "vgpu-monitor",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # vGPUmonitor also drives corePolicy default: it switches a container's SM limit on while the GPU is
        # contended (cmd/vGPUmonitor/feedback.go).
        "command": ["vGPUmonitor"],
        "env": [
            {"name": "HAMI_RESYNC_INTERVAL", "value": "5m"},
            {"name": "HOOK_PATH", "value": LIB_PATH},
            _field_env("NODE_NAME", "spec.nodeName"),
            {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        ],
        "ports": [{"name": "metrics", "containerPort": MONITOR_PORT, "protocol": "TCP"}],
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"add": ["SYS_ADMIN"], "drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "volumeMounts": [
            {"name": "ctrs", "mountPath": f"{LIB_PATH}/containers"},
            {"name": "dockers", "mountPath": "/run/docker"},
            {"name": "containerds", "mountPath": "/run/containerd"},
            {"name": "sysinfo", "mountPath": "/sysinfo"},
            {"name": "hostvar", "mountPath": "/hostvar"},
            {"name": "hosttmp", "mountPath": "/tmp"},
        ],
    }
    volumes = [
        objects.host_path_volume("ctrs", f"{LIB_PATH}/containers"),
        objects.host_path_volume("hosttmp", "/tmp"),
        objects.host_path_volume("dockers", "/run/docker"),
        objects.host_path_volume("containerds", "/run/containerd"),
        objects.host_path_volume("device-plugin", "/var/lib/kubelet/device-plugins"),
        objects.host_path_volume("lib", LIB_PATH),
        objects.host_path_volume("cdi-root", "/var/run/cdi", "DirectoryOrCreate"),
        objects.host_path_volume("usrbin", "/usr/bin"),
        objects.host_path_volume("sysinfo", "/sys"),
        objects.host_path_volume("hostvar", "/var"),
        # Both files as files of one directory, never subPath mounts: those never see a ConfigMap change, and the
        # content-named ConfigMap rolls the DaemonSet on every change anyway.
        {"name": "config", "configMap": {"name": config_map, "items": [
            {"key": DEVICE_CONFIG_KEY, "path": DEVICE_CONFIG_KEY}, {"key": NODE_CONFIG_KEY, "path": NODE_CONFIG_KEY}]}},
    ]
    extra: Obj = {}
    template = dict([hami.WEBHOOK_IGNORE])  # HAMi's webhook skips these pods (its chart labels its plugin so)
    if node_class.mig_manager:
        # The class's GPUs are MIG-capable and the tree's MIG manager keeps them at all-disabled: hami-core mode
        # needs whole GPUs (with --mig-strategy=none a MIG-enabled GPU is advertised whole, rm/device_map.go
        # buildGPUDeviceMap), and gpupolicy never turns on HAMi's own MIG mode (config.json names no node, so no
        # operatingmode: mig). So the plugin and vGPUmonitor, which both hold the GPUs through NVML, step aside
        # while it changes the mode and are waited for like NVIDIA's plugin: same pause affinity, the app label
        # it waits on, and its clients' namespace set to HAMi's (compiler.targets.mig_manager).
        affinity, app = objects.mig_client("device-plugin")
        extra["affinity"] = affinity
        template.update(app)
    pod_spec = {
        **extra,
        "containers": [plugin, monitor],
        "hostPID": True,  # vGPUmonitor reads the processes of the containers it accounts for
        "nodeSelector": dict(node_class.node_selector),
        "priorityClassName": settings.priority_class_name,
        "serviceAccountName": ACCOUNT,
        "tolerations": objects.class_tolerations(settings.tolerations, node_class),
        "volumes": volumes,
    }
    return objects.daemon_set(
        daemonset_name(node_class.name),
        namespace=settings.namespace,
        labels=_labels(policy),
        selector=objects.selector_labels(PLUGIN_APP, node_class.name),
        pod_spec=pod_spec,
        template_labels=template,
    )


# ----------------------------------------------------------------------- hami-values.yaml


def render_values(resolved: ResolvedPolicy) -> Obj:
    """The values gpupolicy owns in HAMi's chart (charts/hami/values.yaml); give yours in an earlier -f file."""
    settings = resolved.spec.hami
    names = settings.resource_names
    values: Obj = {
        "device-config": {"content": _SCHEDULER_COPY_NOTE + _device_config_text(settings, None)},
        "devicePlugin": {"enabled": False},
        "global": {"imageTag": settings.version},
        "resourceName": names.count,
        "resourceMem": names.memory,
        "resourceMemPercentage": names.memory_percentage,
        "resourceCores": names.cores,
        "resourcePriority": names.priority,
        "schedulerName": settings.scheduler_name,
    }
    webhook = _webhook_values(resolved)
    if webhook:
        values["scheduler"] = {"admissionWebhook": webhook}
    return values


def _webhook_values(resolved: ResolvedPolicy) -> Obj:
    scope = hami_scope(resolved)
    webhook: Obj = {}
    if scope.scoped:
        expressions = [objects.selector_expression(r) for r in scope.requirements]
        webhook["namespaceSelector"] = {"matchExpressions": expressions}
    if scope.excluded_namespaces:
        webhook["whitelistNamespaces"] = sorted(scope.excluded_namespaces)
    return webhook


def values_header(settings: Hami) -> str:
    """The comment above the values: how to apply them, for a new install and an existing one."""
    return (
        "# Generated by `gpupolicy compile` from the cluster spec: do not edit, edit the spec and recompile.\n"
        f"# Values for HAMi's Helm chart {settings.chart_version} (repository {hami.CHART_REPOSITORY}): the\n"
        "# scheduler, its extender and its webhook. HAMi's own device plugin is off; the hami/ DaemonSets of this\n"
        "# tree run it per node class. Flux installs the chart with these values from flux/ of this tree, Argo CD\n"
        "# from a multi-source Application naming this file in helm.valueFiles (docs/ci-and-gitops.md). Without\n"
        "# GitOps (your own values, if any, in an earlier -f):\n"
        f"#   {install_command(settings)}\n"
    )


def install_command(settings: Hami) -> str:
    """The helm command that installs or upgrades HAMi's release with the tree's values; it creates the release's
    namespace when the cluster does not have it from the start (the tree's Namespace then adds its labels)."""
    create = "" if settings.namespace in namespaces.BUILT_IN else " --create-namespace"
    return (f"helm upgrade --install {settings.release_name} hami-charts/hami --version {settings.chart_version} "
            f"--namespace {settings.namespace}{create} -f {VALUES_PATH}")


def render_values_text(resolved: ResolvedPolicy) -> bytes:
    return values_header(resolved.spec.hami).encode("utf-8") + serialize.dump_yaml(render_values(resolved))
