"""NVIDIA's MIG manager in standalone trees: one DaemonSet per class whose nodes select a MIG config, with the
RBAC its code uses and nothing more (operator-migmanager notes A.2-A.5; mig-parted cmd/nvidia-mig-manager).

It watches the node's nvidia.com/mig.config label (set by the tree's label reconciler), applies that config from
the tree's mig-parted ConfigMap, pauses the GPU clients that step aside (compiler.objects.mig_client) and reports
in nvidia.com/mig.config.state. It never drains workloads (docs/operations.md).
"""

from __future__ import annotations

from compiler import objects, serialize
from compiler.objects import Obj
from policy.hardware import operator
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy

APP = "nvidia-mig-manager"
ACCOUNT = "gpupolicy-mig-manager"
CONFIG_DIR = "/mig-parted-config"
CLIENTS_DIR = "/gpu-clients"
CLIENTS_KEY = "clients.yaml"
# Host systemd services that hold the GPU, stopped around a reconfiguration (NVIDIA's example gpu-clients
# ConfigMap, mig-parted deployments/container/nvidia-mig-manager-example.yaml).
HOST_GPU_CLIENTS = ("dcgm-exporter", "nv_peer_mem", "nvidia-dcgm", "nvsm*")


def daemonset_name(node_class: str) -> str:
    """The MIG manager DaemonSet of a class."""
    return f"{APP}-{node_class}"


def render_mig_manager(resolved: ResolvedPolicy, mig_configmap: str) -> dict[str, Obj]:
    """File stem -> object: the shared RBAC and host-clients ConfigMap, and one DaemonSet per MIG-managed class."""
    policy = resolved.policy
    plugin = policy.spec.device_plugin
    managed = sorted((c for c in resolved.classes if c.mig_manager), key=lambda c: c.name)
    if not managed:
        return {}
    image = plugin.mig_manager.image or _shipped_image(resolved)
    clients = objects.config_map(
        "gpupolicy-mig-manager-gpu-clients",
        {CLIENTS_KEY: serialize.dump_yaml({"version": "v1", "systemd-services": list(HOST_GPU_CLIENTS)})
         .decode("utf-8")},
        namespace=plugin.namespace, labels=_labels(resolved))
    namespaces = sorted({clients_namespace(resolved, c) for c in managed})
    out: dict[str, Obj] = {"configmap-gpu-clients": clients, **_rbac(resolved, image, namespaces)}
    for node_class in managed:
        out[f"daemonset-{node_class.name}"] = _daemon_set(resolved, node_class, image, mig_configmap,
                                                          clients["metadata"]["name"])
    return out


def _shipped_image(resolved: ResolvedPolicy) -> str:
    """The k8s-mig-manager the GPU Operator shipped beside the targeted plugin release (operator.mig_manager_release
    cites each release's chart values). A release no operator shipped with a MIG manager (v0.12.0, v0.12.1) is
    refused before compiling unless migManager.image is set (policy.checks.versions.check_standalone_components)."""
    plugin = resolved.spec.device_plugin
    shipped = operator.mig_manager_release(plugin.version_tuple)
    assert shipped is not None, f"no MIG manager shipped with device plugin {plugin.version}"
    return shipped.mig_manager_image


def _image_version(image: str) -> tuple[int, ...]:
    """The mig-parted release of a MIG manager image from its tag (``v0.12.1-ubuntu20.04`` -> (0, 12, 1)); an
    image without a release tag counts as the newest release read (v0.15.0)."""
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    return operator.parse_version(tag) if tag[:1] == "v" and tag.count(".") >= 2 else (0, 15, 0)


def _labels(resolved: ResolvedPolicy) -> dict[str, str]:
    return objects.labels(resolved.policy, "mig-manager")


def _rbac(resolved: ResolvedPolicy, image: str, clients_namespaces: list[str]) -> dict[str, Obj]:
    """ClusterRole: nodes get/list/watch (its informer and label reads) and patch (state and pause labels; update
    only in v0.13.0, which wrote them with Update), pods list (v0.15.0: DaemonSet clients in every namespace).
    Role in each clients' namespace (clients_namespace): pods get/list/watch while reconfigure-mig.sh waits with
    ``kubectl wait --for=delete`` (up to v0.12), list only once the Go port polls with List (v0.13.0 on).

    No ``delete``: the only deletes are of the GPU Operator's validator pods (``-l app=nvidia-cuda-validator``,
    ``nvidia-device-plugin-validator``, ``nvidia-operator-validator``), which a standalone tree never runs. With
    no match ``kubectl delete -l`` only lists and the script ignores its status (mig-parted@v0.12.1:
    deployments/container/reconfigure-mig.sh:534-544, 636-640); the Go port deletes only the pods its List
    returned (mig-parted@v0.15.0: pkg/mig/reconfigure/reconfigure.go:626-644).
    No ConfigMap access: CONFIG_FILE is always set, so it never publishes a generated config."""
    namespace = resolved.spec.device_plugin.namespace
    version = _image_version(image)
    node_verbs = ["get", "list", "patch", "watch"] + (["update"] if version == (0, 13, 0) else [])
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": sorted(node_verbs)}]
    if version >= (0, 15, 0):
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
    pod_verbs = ["list"] if version >= (0, 13, 0) else ["get", "list", "watch"]
    labels = _labels(resolved)
    subject = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}]
    out: dict[str, Obj] = {
        "serviceaccount": {"apiVersion": "v1", "kind": "ServiceAccount",
                           "metadata": objects.metadata(ACCOUNT, namespace=namespace, labels=labels)},
        "clusterrole": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": objects.metadata(ACCOUNT, labels=labels), "rules": rules},
        "clusterrolebinding": {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                               "metadata": objects.metadata(ACCOUNT, labels=labels),
                               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                           "name": ACCOUNT}, "subjects": subject},
    }
    for where in clients_namespaces:
        suffix = "" if where == namespace else f"-{where}"
        out[f"role{suffix}"] = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                "metadata": objects.metadata(ACCOUNT, namespace=where, labels=labels),
                                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": pod_verbs}]}
        out[f"rolebinding{suffix}"] = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": objects.metadata(ACCOUNT, namespace=where, labels=labels),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
            "subjects": subject}
    return out


def clients_namespace(resolved: ResolvedPolicy, node_class: ResolvedClass) -> str:
    """Where the MIG manager of a class waits for the class's GPU clients: the namespace of the device plugin that
    serves it (HAMi's for a vgpu class, whose GFD then lives there too: policy.checks.vgpu)."""
    if node_class.vgpu is not None:
        return resolved.spec.hami.namespace
    return resolved.spec.device_plugin.namespace


def _env(resolved: ResolvedPolicy, node_class: ResolvedClass) -> list[Obj]:
    plugin = resolved.spec.device_plugin
    field = {"valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}
    values = {
        "CONFIG_FILE": f"{CONFIG_DIR}/config.yaml",
        # It waits for pods labelled app=nvidia-device-plugin-daemonset / gpu-feature-discovery on its node in this
        # one namespace (mig-parted@v0.12.1: deployments/container/reconfigure-mig.sh:506-532, -p from
        # cmd/nvidia-mig-manager/main.go:214-215,389): the class's plugin, MPS daemon and GFD live there.
        "DEFAULT_GPU_CLIENTS_NAMESPACE": clients_namespace(resolved, node_class),
        "GPU_CLIENTS_FILE": f"{CLIENTS_DIR}/{CLIENTS_KEY}",
        "HOST_KUBELET_SYSTEMD_SERVICE": "kubelet.service",
        "HOST_MIG_MANAGER_STATE_FILE": "/etc/systemd/system/nvidia-mig-manager.service.d/override.conf",
        "HOST_NVIDIA_DIR": "/usr/local/nvidia",
        "HOST_ROOT_MOUNT": "/host",
        # Standalone trees run on a driver installed on the host: stop its host clients around a change.
        "WITH_SHUTDOWN_HOST_GPU_CLIENTS": "true",
        "WITH_REBOOT": "true" if plugin.mig_manager.with_reboot else "false",
    }
    return [{"name": "NODE_NAME", **field}, *({"name": k, "value": v} for k, v in sorted(values.items()))]


def _daemon_set(resolved: ResolvedPolicy, node_class: ResolvedClass, image: str, mig_configmap: str,
                clients_configmap: str) -> Obj:
    plugin = resolved.spec.device_plugin
    container = {
        "name": "nvidia-mig-manager",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": sorted(_env(resolved, node_class), key=lambda e: e["name"]),
        "resources": {"limits": {"memory": "256Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
        # Privileged with the host's root: it runs nvidia-mig-parted chrooted on the host and stops systemd
        # services over the host's D-Bus (mig-parted cmd/nvidia-mig-manager/main.go).
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "host-root", "mountPath": "/host", "mountPropagation": "HostToContainer"},
            {"name": "host-sys", "mountPath": "/sys"},
            {"name": "gpu-clients", "mountPath": CLIENTS_DIR, "readOnly": True},
            {"name": "mig-parted-config", "mountPath": CONFIG_DIR, "readOnly": True},
        ],
    }
    pod_spec = {
        "serviceAccountName": ACCOUNT,
        "hostPID": True,
        "hostIPC": True,
        "containers": [container],
        # Its own node selector only: it must never select on a label it pauses (gpu.deploy.*).
        "nodeSelector": dict(node_class.node_selector),
        "priorityClassName": plugin.priority_class_name,
        "tolerations": objects.class_tolerations(plugin.tolerations, node_class),
        "volumes": [
            objects.host_path_volume("host-root", "/", "Directory"),
            objects.host_path_volume("host-sys", "/sys", "Directory"),
            {"name": "gpu-clients", "configMap": {"name": clients_configmap}},
            {"name": "mig-parted-config", "configMap": {"name": mig_configmap}},
        ],
    }
    return objects.daemon_set(
        daemonset_name(node_class.name), namespace=plugin.namespace, labels=_labels(resolved),
        selector=objects.selector_labels(APP, node_class.name), pod_spec=pod_spec,
        template_labels={"app": APP},
    )
