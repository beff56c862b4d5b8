"""NVIDIA's DRA driver: the chart's values, one DeviceClass per DRA class and variant, templates and quotas per tenant.

What the tree holds (docs/dra.md; the model is policy/resolved/dra.py):
- ``dra-values.yaml`` beside the tree (not an object): values for the driver's chart
  (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/values.yaml at v0.4.1):
  ``gpuResourcesEnabledOverride: true`` (templates/validation.yaml refuses to render the GPU plugin without it),
  the compute-domain plugin off, ``featureGates`` for what the classes share, ``consumableShares`` (v0.5.0) for
  time-sliced classes, and ``kubeletPlugin.affinity`` on the DRA classes' node selectors only, so the kubelet plugin
  and the device plugin never serve one node (the chart's default affinity takes every NVIDIA node). The chart's
  own DeviceClasses (gpu.nvidia.com, mig.nvidia.com) stay installed; claim admission denies them to tenants.
- ``dra/``: the DeviceClasses (cluster-scoped, resource.k8s.io/v1), and per namespace a tenant's selector names a
  ResourceClaimTemplate for every DeviceClass the tenant may use and one ResourceQuota holding every DeviceClass
  of the pool: the devices of the pool for the classes it may use, 0 for the others (the API server's quota then
  refuses a claim on a forbidden class even where the webhook is down).
"""

from __future__ import annotations

from compiler import objects, serialize
from compiler.objects import Obj
from policy.hardware import dra as facts
from policy.kube import selectors
from policy.resolved import dra
from policy.resolved.resolve import ResolvedPolicy
from policy.spec.model import ClusterGPUPolicy

COMPONENT = "dra"
VALUES_PATH = "dra-values.yaml"
API_VERSION = "resource.k8s.io/v1"
QUOTA_NAME = "gpupolicy-dra"
#: The chart's release name: its objects are named after it (templates/_helpers.tpl).
RELEASE = "dra-driver-nvidia-gpu"


def render_dra(resolved: ResolvedPolicy) -> dict[str, Obj]:
    """File stem -> object for dra/: DeviceClasses, then templates and quotas per tenant namespace."""
    classes = dra.device_classes(resolved)
    out: dict[str, Obj] = {f"deviceclass-{dc.name}": device_class(resolved, dc) for dc in classes}
    by_name = {dc.name: dc for dc in classes}
    for namespace, allowed in dra.namespace_classes(dra.tenants(resolved, classes)).items():
        for name in allowed:
            dc = by_name[name]
            out[f"resourceclaimtemplate-{namespace}-{dc.template_name}"] = claim_template(resolved, dc, namespace)
        out[f"resourcequota-{namespace}-{QUOTA_NAME}"] = quota(resolved, classes, allowed, namespace)
    return dict(sorted(out.items()))


def device_class(resolved: ResolvedPolicy, dc: dra.DraDeviceClass) -> Obj:
    """A DeviceClass (types.go v0.34.10 DeviceClassSpec: selectors, config, extendedResourceName)."""
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in dc.selectors]}
    if dc.parameters is not None:
        spec["config"] = [{"opaque": {"driver": facts.DRIVER, "parameters": dc.parameters}}]
    if dc.extended_resource_name is not None:
        spec["extendedResourceName"] = dc.extended_resource_name
    labels = objects.labels(resolved.policy, COMPONENT, **{objects.NODE_CLASS_LABEL: dc.node_class})
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": objects.metadata(dc.name, labels=labels),
            "spec": spec}


def claim_template(resolved: ResolvedPolicy, dc: dra.DraDeviceClass, namespace: str) -> Obj:
    """One device of the class per claim (types.go ExactDeviceRequest: deviceClassName, allocationMode, count);
    no config of its own, so the class's sharing config is the one the driver applies."""
    labels = objects.labels(resolved.policy, COMPONENT, **{objects.NODE_CLASS_LABEL: dc.node_class})
    request = {"name": dra.REQUEST, "exactly": {"deviceClassName": dc.name, "allocationMode": "ExactCount",
                                                "count": 1}}
    return {"apiVersion": API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": objects.metadata(dc.template_name, namespace=namespace, labels=labels),
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def quota(resolved: ResolvedPolicy, classes: tuple[dra.DraDeviceClass, ...], allowed: tuple[str, ...],
          namespace: str) -> Obj:
    """Devices per DeviceClass a namespace may hold in claims (kubernetes.io/docs/concepts/policy/resource-quotas,
    "Quota for DRA resource claims"): the pool's devices of an allowed class (its node count unknown: no limit, so
    not listed), 0 for a class the tenant may not use."""
    hard: dict[str, str] = {}
    for dc in classes:
        if dc.name not in allowed:
            hard[dc.quota_resource] = "0"
        elif dc.total_devices is not None:
            hard[dc.quota_resource] = str(dc.total_devices)
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": objects.metadata(QUOTA_NAME, namespace=namespace,
                                         labels=objects.labels(resolved.policy, COMPONENT)),
            "spec": {"hard": dict(sorted(hard.items()))}}


def render_values(resolved: ResolvedPolicy) -> Obj:
    """Values for the driver's chart (values.yaml at the targeted release)."""
    values: Obj = {
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
        "featureGates": dra.enabled_gates(resolved),
        "kubeletPlugin": {"affinity": kubelet_plugin_affinity(resolved),
                          "tolerations": _tolerations(resolved)},
    }
    if (shares := dra.consumable_shares(resolved)) is not None:
        values["consumableShares"] = str(shares)  # the chart passes it to CONSUMABLE_SHARES (v0.5.0)
    return values


def kubelet_plugin_affinity(resolved: ResolvedPolicy) -> Obj:
    """One nodeSelectorTerm per DRA class (terms are ORed): the plugin runs on the DRA classes' nodes and nowhere
    else; the classes' selectors never overlap the device-plugin classes' (check overlapping-node-classes).

    On a class the tree's MIG manager partitions, the term also waits for it (objects.mig_manager_has_run): the
    plugin lists the MIG devices once, when it starts, and publishes them again only on a health event
    (k8s-dra-driver-gpu@v0.4.0 cmd/gpu-kubelet-plugin/driver.go publishResources, nvlib.go
    enumerateAllPossibleDevices), so it must start after a partition, and again after every re-partition, or its
    ResourceSlices keep offering MIG devices that no longer exist."""
    terms = [{"matchExpressions": [*(objects.selector_expression(r)
                                     for r in selectors.requirements_from(rc.node_selector, [])),
                                   *([objects.mig_manager_has_run()] if rc.mig_manager else [])]}
             for rc in resolved.dra_classes]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def _tolerations(resolved: ResolvedPolicy) -> list[Obj]:
    """The chart's default toleration (nvidia.com/gpu:NoSchedule) plus every DRA class's taints."""
    base = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    taints = sorted({(t.key, t.value, t.effect) for rc in resolved.dra_classes for t in rc.taints})
    extra = [{"key": k, "operator": "Equal", "value": v, "effect": e} if v else
             {"key": k, "operator": "Exists", "effect": e} for k, v, e in taints if (k, e) != ("nvidia.com/gpu",
                                                                                             "NoSchedule")]
    return base + extra


def install_command(resolved: ResolvedPolicy) -> str:
    settings = resolved.spec.dra
    return (f"helm upgrade --install {RELEASE} {facts.CHART} --version {settings.version.lstrip('v')} "
            f"--namespace {settings.namespace} --create-namespace -f {VALUES_PATH}")


def render_values_text(resolved: ResolvedPolicy) -> bytes:
    header = (
        "# Generated by `gpupolicy compile` from the cluster spec: do not edit, edit the spec and recompile.\n"
        f"# Values for NVIDIA's DRA driver chart {resolved.spec.dra.version} (docs/dra.md): the GPU kubelet plugin on\n"
        "# the DRA classes' nodes only, with the feature gates their sharing needs. The DeviceClasses, templates\n"
        "# and quotas are in dra/ of this tree. The namespace runs privileged pods (label it\n"
        "# pod-security.kubernetes.io/enforce=privileged). Without GitOps:\n"
        f"#   {install_command(resolved)}\n"
    )
    return header.encode("utf-8") + serialize.dump_yaml(render_values(resolved))



# ---------------------------------------------------------------- the webhook's claim entries

#: What claim admission is sent (policy/admission/claims.py): templates and claims on CREATE, a claim's status on
#: UPDATE (the scheduler reserving it for one more pod), and pods naming claims on CREATE. resource.k8s.io/v1
#: resource names (types.go v0.34.10); matchPolicy Equivalent also sends v1beta1 and v1beta2 objects, converted.
CLAIM_RULES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("resource.k8s.io", ("resourceclaimtemplates", "resourceclaims"), ("CREATE",)),
    ("resource.k8s.io", ("resourceclaims/status",), ("UPDATE",)),
    ("", ("pods",), ("CREATE",)),
)
#: The resource entries' condition (compiler/targets/admission_webhook.py): the claims entries send no pod it sends.
ASKS_CONDITION = "requests-nvidia-resources"
#: Pods reach these entries only when they name claims and no resource entry takes them.
CLAIM_CONDITIONS: tuple[tuple[str, str], ...] = (
    ("claims-or-pods-naming-claims",
     "request.resource.resource != 'pods' || (has(object.spec) && has(object.spec.resourceClaims))"),
)


def claim_webhooks(policy: ClusterGPUPolicy, entries: list[Obj]) -> list[Obj]:
    """Beside each webhook entry (default and per tenant: the same namespaces and path), one for the DRA objects;
    none without a DRA pool."""
    if not any(nc.allocation == "dra" for nc in policy.spec.node_classes):
        return []
    rules = [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(operations),
              "resources": list(resources), "scope": "Namespaced"} for group, resources, operations in CLAIM_RULES]
    conditions = [{"name": n, "expression": e} for n, e in CLAIM_CONDITIONS]
    return [{**entry, "name": f"claims.{entry['name']}", "rules": rules,
             "matchConditions": conditions + _not_sent_by(entry)} for entry in entries]


def _not_sent_by(entry: Obj) -> list[Obj]:
    """A pod that names claims and also asks for nvidia.com/* (or a KAI fraction) reaches ``entry`` already, and
    the engine judges its claims there too: sent once, not once per entry. The entry's own condition, negated for
    pods, so the two cannot drift apart."""
    asks = next(c["expression"] for c in entry["matchConditions"] if c["name"] == ASKS_CONDITION)
    return [{"name": "pod-not-sent-by-the-resource-entry",
             "expression": f"request.resource.resource != 'pods' || !({asks})"}]

