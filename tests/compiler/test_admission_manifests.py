"""The webhook's objects: valid Kubernetes, restricted Pod Security, HA, certificates, routing and fail-safe scope."""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# cel_k8s lives in tests/ (a test helper, not product code); pytest puts only this file's directory on the path.
import cel_k8s
import kubernetes_validate
import pytest
import yaml

from compiler.targets import admission_webhook
from compiler.targets.admission_webhook import MATCH_CONDITIONS
from policy.checks.tenants import tenant_requirements
from policy.kube import selectors
from policy.resolved import offers
from policy.resolved.resolve import resolve
from policy.spec.diagnostics import PolicyError
from policy.spec.model import ClusterGPUPolicy

Obj = dict[str, Any]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
CERT_MANAGER_KINDS = {"Certificate", "Issuer"}


def render_admission(policy: ClusterGPUPolicy) -> list[Obj]:
    return admission_webhook.render_admission(resolve(policy))


# ---------------------------------------------------------------- policies


def example_data(name: str) -> Obj:
    data: Obj = yaml.safe_load((EXAMPLES / name / "cluster.yaml").read_text(encoding="utf-8"))
    return data


def policy_from(data: Obj) -> ClusterGPUPolicy:
    return ClusterGPUPolicy.model_validate(data)


def policy_with(
    example: str = "mixed-fleet", *, version: str | None = None, **admission_fields: Any
) -> ClusterGPUPolicy:
    """An example cluster with admission settings replaced (camelCase keys, as in the YAML)."""
    data = example_data(example)
    data["spec"].setdefault("admission", {}).update(admission_fields)
    if version is not None:
        data["spec"]["kubernetesVersion"] = version
    return policy_from(data)


VARIANTS: dict[str, Callable[[], ClusterGPUPolicy]] = {
    "mixed-fleet, cert-manager, three tenants": policy_with,
    "tke, no tenants": lambda: policy_with("tke-l20-t4"),
    "h20 on kubernetes 1.28": lambda: policy_with("h20-mig", version="1.28"),
    "secret with a CA bundle": lambda: policy_with(
        certificates={"source": "secret", "secretName": "my-tls", "caBundle": "Y2EtYnVuZGxl"}),
    "secret without a CA bundle, Ignore, one replica": lambda: policy_with(
        certificates={"source": "secret"}, failurePolicy="Ignore", timeoutSeconds=10, replicas=1),
    "own namespace and exclusions": lambda: policy_with(
        namespace="gpu-admission", excludedNamespaces=["monitoring", "kube-system", "gpu-operator"]),
}


@pytest.fixture(scope="module")
def fleet() -> ClusterGPUPolicy:
    return policy_with()


def rendered(policy: ClusterGPUPolicy) -> dict[str, Obj]:
    """Objects by kind; every kind appears at most once except the cert-manager ones (checked apart)."""
    return {obj["kind"]: obj for obj in render_admission(policy) if obj["kind"] not in CERT_MANAGER_KINDS}


def pod_template_spec(policy: ClusterGPUPolicy) -> Obj:
    spec: Obj = rendered(policy)["Deployment"]["spec"]["template"]["spec"]
    return spec


def webhook_configuration(policy: ClusterGPUPolicy) -> Obj:
    return rendered(policy)["ValidatingWebhookConfiguration"]


# ---------------------------------------------------------------- valid Kubernetes, deterministic


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_core_object_passes_strict_schema_validation_at_the_specs_kubernetes_version(variant: str) -> None:
    policy = VARIANTS[variant]()
    core = [obj for obj in render_admission(policy) if obj["kind"] not in CERT_MANAGER_KINDS]
    assert {obj["kind"] for obj in core} == {
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy", "PodDisruptionBudget",
        "Service", "ServiceAccount", "ValidatingWebhookConfiguration",
    }
    for obj in core:
        kubernetes_validate.validate(obj, policy.spec.kubernetes_version, strict=True)


def test_rendering_is_deterministic_sorted_and_free_of_timestamps(fleet: ClusterGPUPolicy) -> None:
    first, second = render_admission(fleet), render_admission(copy.deepcopy(fleet))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    keys = [(obj["kind"], obj["metadata"]["name"]) for obj in first]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    text = json.dumps(first)
    assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text)
    assert "creationTimestamp" not in text


def test_reordering_tenants_in_the_spec_leaves_the_registration_unchanged() -> None:
    data = example_data("mixed-fleet")
    reordered = copy.deepcopy(data)
    reordered["spec"]["tenants"].reverse()
    assert webhook_configuration(policy_from(data)) == webhook_configuration(policy_from(reordered))


@pytest.mark.parametrize("variant", VARIANTS)
def test_only_the_webhook_configuration_and_node_reader_are_cluster_scoped_and_no_namespace_is_emitted(
        variant: str) -> None:
    policy = VARIANTS[variant]()
    for obj in render_admission(policy):
        if obj["kind"] in ("ValidatingWebhookConfiguration", "ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == policy.spec.admission.namespace
        assert obj["kind"] != "Namespace"


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_object_carries_a_private_key(variant: str) -> None:
    text = json.dumps(render_admission(VARIANTS[variant]()))
    assert "PRIVATE KEY" not in text and "BEGIN " not in text
    assert "tls.key" not in text


def test_a_disabled_admission_renders_nothing() -> None:
    assert render_admission(policy_with(enabled=False)) == []


def test_every_object_carries_the_standard_labels_and_the_users_labels(fleet: ClusterGPUPolicy) -> None:
    for obj in render_admission(fleet):
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gpupolicy"
        assert labels["gpupolicy.dev/cluster"] == "mixed-fleet"
        assert labels["team"] == "platform"


# ---------------------------------------------------------------- GitOps ordering


def wave(obj: Obj) -> int:
    return int(obj["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])


def test_sync_waves_put_config_first_then_support_then_the_deployment_then_the_registration(
    fleet: ClusterGPUPolicy,
) -> None:
    objs = render_admission(fleet)
    by_kind = {obj["kind"]: wave(obj) for obj in objs}
    support = {wave(obj) for obj in objs if obj["kind"] not in {"ConfigMap", "Deployment",
                                                               "ValidatingWebhookConfiguration"}}
    assert by_kind["ConfigMap"] < min(support)
    assert max(support) < by_kind["Deployment"] < by_kind["ValidatingWebhookConfiguration"]


def test_the_policy_configmap_is_content_named_and_never_pruned_mid_rollout(fleet: ClusterGPUPolicy) -> None:
    cm = rendered(fleet)["ConfigMap"]
    assert cm["data"] == {"admission-policy.json": offers.build_admission_policy(fleet).to_json()}
    assert re.fullmatch(r"gpupolicy-admission-policy-[0-9a-f]{10}", cm["metadata"]["name"])
    annotations = cm["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/sync-options"] == "Prune=false"
    assert annotations["kustomize.toolkit.fluxcd.io/prune"] == "disabled"


def test_a_policy_change_renames_the_configmap_and_rolls_the_pods() -> None:
    before, after = rendered(policy_with()), rendered(policy_with(enforcement="warn"))
    assert before["ConfigMap"]["metadata"]["name"] != after["ConfigMap"]["metadata"]["name"]
    volumes = {v["name"]: v for v in after["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["policy"]["configMap"]["name"] == after["ConfigMap"]["metadata"]["name"]
    assert before["Deployment"]["spec"]["template"] != after["Deployment"]["spec"]["template"]


# ---------------------------------------------------------------- Pod Security Standards

BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}


def containers_of(spec: Obj) -> Iterator[Obj]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field, [])


def baseline_violations(spec: Obj) -> list[str]:
    """Pod Security Standards "baseline" (kubernetes.io/docs/concepts/security/pod-security-standards)."""
    found = [f"{field} is set" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]
    pod_sc = spec.get("securityContext", {})
    found += [f"volume {v['name']} is a hostPath" for v in spec.get("volumes", []) if "hostPath" in v]
    found += [f"sysctl {s['name']} is unsafe" for s in pod_sc.get("sysctls", []) if s["name"] not in SAFE_SYSCTLS]
    for sc in (pod_sc, *(c.get("securityContext", {}) for c in containers_of(spec))):
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            found.append("seccomp is Unconfined")
        if sc.get("windowsOptions", {}).get("hostProcess"):
            found.append("a Windows host process")
        if {"user", "role"} & set(sc.get("seLinuxOptions", {})):
            found.append("SELinux user or role is set")
        if sc.get("appArmorProfile", {}).get("type") == "Unconfined":
            found.append("AppArmor is Unconfined")
    for c in containers_of(spec):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            found.append(f"{c['name']} is privileged")
        if set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPABILITIES:
            found.append(f"{c['name']} adds a capability beyond the baseline set")
        if sc.get("procMount", "Default") != "Default":
            found.append(f"{c['name']} unmasks /proc")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            found.append(f"{c['name']} uses a hostPort")
    return found


def restricted_violations(spec: Obj) -> list[str]:
    """Pod Security Standards "restricted": baseline plus the restricted controls."""
    found = baseline_violations(spec)
    pod_sc = spec.get("securityContext", {})
    found += [f"volume {v['name']} has a type restricted forbids" for v in spec.get("volumes", [])
              if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES]
    for c in containers_of(spec):
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{c['name']} may escalate privileges")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            found.append(f"{c['name']} may run as root")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.append(f"{c['name']} runs as UID 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{c['name']} has no RuntimeDefault or Localhost seccomp profile")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            found.append(f"{c['name']} does not drop ALL capabilities")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{c['name']} adds a capability other than NET_BIND_SERVICE")
    return found


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_webhook_pod_meets_pod_security_restricted_and_therefore_baseline(variant: str) -> None:
    spec = pod_template_spec(VARIANTS[variant]())
    assert baseline_violations(spec) == []
    assert restricted_violations(spec) == []


def test_the_pod_security_checks_catch_what_they_look_for() -> None:
    spec = copy.deepcopy(pod_template_spec(policy_with()))
    spec["hostNetwork"] = True
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    del spec["securityContext"]["seccompProfile"]
    sc = spec["containers"][0]["securityContext"]
    sc.update(allowPrivilegeEscalation=True, capabilities={"add": ["SYS_ADMIN"]})
    assert baseline_violations(spec) == [
        "hostNetwork is set", "volume host is a hostPath", "webhook adds a capability beyond the baseline set"]
    assert restricted_violations(spec)[3:] == [
        "volume host has a type restricted forbids", "webhook may escalate privileges",
        "webhook has no RuntimeDefault or Localhost seccomp profile", "webhook does not drop ALL capabilities",
        "webhook adds a capability other than NET_BIND_SERVICE",
    ]


def test_the_root_filesystem_is_read_only_with_memory_backed_scratch_space(fleet: ClusterGPUPolicy) -> None:
    spec = pod_template_spec(fleet)
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsUser"] == 65532
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    for path in ("/tmp", env["PROMETHEUS_MULTIPROC_DIR"]):
        assert "emptyDir" in volumes[mounts[path]]
    # The node cache's token reaches the webhook's pod only, not every pod that names the account.
    assert spec["automountServiceAccountToken"] is True
    assert rendered(fleet)["ServiceAccount"]["automountServiceAccountToken"] is False


def test_the_webhook_may_get_list_and_watch_nodes_and_nothing_else(fleet: ClusterGPUPolicy) -> None:
    objects = rendered(fleet)
    assert objects["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                                                "verbs": ["get", "list", "watch"]}]
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": objects["ClusterRole"]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": objects["ServiceAccount"]["metadata"]["name"],
                                    "namespace": objects["ServiceAccount"]["metadata"]["namespace"]}]
    env = {e["name"]: e["value"] for e in pod_template_spec(fleet)["containers"][0]["env"]}
    assert env["GPUPOLICY_NODE_CACHE"] == "true"


# ---------------------------------------------------------------- the Deployment, Service, PDB, NetworkPolicy


@pytest.mark.parametrize(("timeout", "budget"), [(1, "0.33"), (3, "1"), (10, "3.33"), (30, "10")])
def test_the_review_budget_is_a_third_of_the_api_servers_timeout(timeout: int, budget: str) -> None:
    from compiler.targets.admission_webhook import review_budget

    assert review_budget(timeout) == budget


def test_the_webhook_serves_the_mounted_policy_and_certificate_on_8443_and_metrics_on_9090(
    fleet: ClusterGPUPolicy,
) -> None:
    spec = pod_template_spec(fleet)
    container = spec["containers"][0]
    assert container["image"] == "ghcr.io/gpupolicy/gpupolicy-webhook:0.1.0"
    assert container["args"] == ["webhook", "serve", "--policy", "/etc/gpupolicy/policy/admission-policy.json",
                                 "--cert-dir", "/etc/gpupolicy/tls", "--port", "8443", "--metrics-port", "9090",
                                 "--review-budget", "1"]  # a third of the default timeoutSeconds: 3
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"},
                                  {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["policy"] == {"name": "policy", "mountPath": "/etc/gpupolicy/policy", "readOnly": True}
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/gpupolicy/tls", "readOnly": True}
    assert not any("subPath" in m for m in container["volumeMounts"])
    tls = {v["name"]: v for v in spec["volumes"]}["tls"]
    assert tls["secret"]["secretName"] == "gpupolicy-webhook-tls"


def test_probes_go_over_https_to_healthz_and_readyz(fleet: ClusterGPUPolicy) -> None:
    container = pod_template_spec(fleet)["containers"][0]
    paths = {name: container[name]["httpGet"] for name in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert paths == {
        "startupProbe": {"path": "/healthz", "port": "https", "scheme": "HTTPS"},
        "readinessProbe": {"path": "/readyz", "port": "https", "scheme": "HTTPS"},
        "livenessProbe": {"path": "/healthz", "port": "https", "scheme": "HTTPS"},
    }


def test_requests_and_a_memory_limit_but_no_cpu_limit(fleet: ClusterGPUPolicy) -> None:
    resources = pod_template_spec(fleet)["containers"][0]["resources"]
    # Sized from scripts/memory.py's worst measured pod (211 MiB) with a third of headroom (docs/reliability.md).
    assert resources == {"requests": {"cpu": "100m", "memory": "160Mi"}, "limits": {"memory": "320Mi"}}


def test_shutdown_waits_for_endpoints_to_drop_within_the_grace_period() -> None:
    for version, pre_stop in (("1.30", {"sleep": {"seconds": 10}}),
                              ("1.28", {"exec": {"command": ["python3", "-c", "import time; time.sleep(10)"]}})):
        spec = pod_template_spec(policy_with(version=version))
        assert spec["containers"][0]["lifecycle"]["preStop"] == pre_stop
        assert spec["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize("replicas", [1, 3, 5])
def test_replicas_come_from_the_spec_and_spread_over_zones_and_nodes(replicas: int) -> None:
    objs = rendered(policy_with(replicas=replicas))
    deployment = objs["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    spread = {c["topologyKey"]: c["whenUnsatisfiable"] for c in spec["topologySpreadConstraints"]}
    assert spread == {"topology.kubernetes.io/zone": "ScheduleAnyway", "kubernetes.io/hostname": "DoNotSchedule"}
    preferred = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [term["podAffinityTerm"]["topologyKey"] for term in preferred] == ["kubernetes.io/hostname"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert objs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def test_service_pdb_spread_and_network_policy_all_select_the_webhook_pods(fleet: ClusterGPUPolicy) -> None:
    objs = rendered(fleet)
    deployment = objs["Deployment"]["spec"]
    pod_labels = deployment["template"]["metadata"]["labels"]
    selector = deployment["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert "team" not in selector  # user labels may change; a Deployment selector may not
    assert objs["Service"]["spec"]["selector"] == selector
    assert objs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == selector
    assert objs["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"] == selector
    spec = deployment["template"]["spec"]
    assert all(c["labelSelector"]["matchLabels"] == selector for c in spec["topologySpreadConstraints"])


def test_the_service_maps_443_to_the_named_serving_port_and_exposes_the_metrics_port(
    fleet: ClusterGPUPolicy,
) -> None:
    assert rendered(fleet)["Service"]["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]


#: Prometheus, wherever it runs in the cluster, may scrape; nothing else is opened by this rule.
SCRAPE_RULE = {"from": [{"namespaceSelector": {}}], "ports": [{"port": 9090, "protocol": "TCP"}]}


def test_without_the_node_cache_the_webhook_gets_no_rbac_no_token_and_no_egress() -> None:
    objects = render_admission(policy_with(nodeCache=False))
    kinds = {obj["kind"] for obj in objects}
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds
    deployment = next(obj for obj in objects if obj["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert {"name": "GPUPOLICY_NODE_CACHE", "value": "false"} in spec["containers"][0]["env"]
    network = next(obj for obj in objects if obj["kind"] == "NetworkPolicy")["spec"]
    # Egress isolated with no rule: all egress denied (an `egress: []` would not be stored by the API server)
    assert network["policyTypes"] == ["Ingress", "Egress"] and "egress" not in network


def test_the_network_policy_admits_the_serving_port_from_anywhere_metrics_from_pods_and_egress_to_the_api_server(
    fleet: ClusterGPUPolicy,
) -> None:
    spec = rendered(fleet)["NetworkPolicy"]["spec"]
    assert spec["ingress"] == [{"ports": [{"port": 8443, "protocol": "TCP"}]}, SCRAPE_RULE]
    # Egress isolated to the API server's ports (the node cache's list and watch): no DNS, nothing else
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}]


def test_api_server_cidrs_restrict_the_serving_port_to_those_sources_and_leave_metrics_to_prometheus() -> None:
    spec = rendered(policy_with(apiServerCidrs=["10.0.0.0/16", "2001:db8::/64"]))["NetworkPolicy"]["spec"]
    assert spec["ingress"] == [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16"}}, {"ipBlock": {"cidr": "2001:db8::/64"}}],
                                "ports": [{"port": 8443, "protocol": "TCP"}]}, SCRAPE_RULE]


@pytest.mark.parametrize("cidr", ["10.0.0.1/16", "10.0.0.0/33", "example.com", "10.0.0"])
def test_an_api_server_cidr_that_is_not_a_network_is_refused_with_a_hint(cidr: str) -> None:
    with pytest.raises(ValueError, match="is not a CIDR block"):
        policy_with(apiServerCidrs=[cidr])


# ---------------------------------------------------------------- the ValidatingWebhookConfiguration


def entries(policy: ClusterGPUPolicy) -> dict[str, Obj]:
    return {w["name"]: w for w in webhook_configuration(policy)["webhooks"]}


def test_every_entry_is_v1_side_effect_free_equivalent_and_uses_the_shipped_conditions(
    fleet: ClusterGPUPolicy,
) -> None:
    for entry in entries(fleet).values():
        assert entry["admissionReviewVersions"] == ["v1"]
        assert entry["sideEffects"] == "None"
        assert entry["matchPolicy"] == "Equivalent"
        assert (entry["failurePolicy"], entry["timeoutSeconds"]) == ("Fail", 3)
        assert [(c["name"], c["expression"]) for c in entry["matchConditions"]] == list(MATCH_CONDITIONS)
        assert entry["clientConfig"]["service"]["name"] == "gpupolicy-webhook"
        assert entry["clientConfig"]["service"]["port"] == 443


def test_failure_policy_and_timeout_come_from_the_spec() -> None:
    for entry in entries(policy_with(failurePolicy="Ignore", timeoutSeconds=10)).values():
        assert (entry["failurePolicy"], entry["timeoutSeconds"]) == ("Ignore", 10)


def test_rules_cover_pods_on_create_and_controllers_and_workload_kinds_on_create_and_update_only(
        fleet: ClusterGPUPolicy) -> None:
    from policy.spec.workload_kinds import DEFAULT_WORKLOAD_KINDS

    kinds = {(k.group, k.resource) for k in DEFAULT_WORKLOAD_KINDS}
    for entry in entries(fleet).values():
        registered = {(group, resource, op) for rule in entry["rules"] for group in rule["apiGroups"]
                      for resource in rule["resources"] for op in rule["operations"]}
        controllers = {("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"),
                       ("apps", "daemonsets"), ("batch", "jobs"), ("batch", "cronjobs"), ("", "replicationcontrollers")}
        assert registered == {("", "pods", "CREATE")} | {(g, r, op) for g, r in controllers | kinds
                                                        for op in ("CREATE", "UPDATE")}
        assert all(rule["scope"] == "Namespaced" for rule in entry["rules"])
        built_in = [rule for rule in entry["rules"] if rule["apiGroups"][0] in ("", "apps", "batch")]
        assert len(built_in) == 4 and all(rule["apiVersions"] == ["v1"] for rule in built_in)
        ray = next(rule for rule in entry["rules"] if rule["apiGroups"] == ["ray.io"])
        assert ray["apiVersions"] == ["v1"] and ray["resources"] == ["rayclusters", "rayjobs", "rayservices"]
        assert not any("/" in resource or "*" in resource for _, resource, _ in registered)


def test_a_workload_kind_the_spec_adds_is_registered_and_read_by_the_match_condition(
        fleet: ClusterGPUPolicy) -> None:
    from policy.spec.model import PodTemplateRef, WorkloadKind

    own = WorkloadKind(group="example.com", kind="Trainer", resource="trainers", versions=("v2",),
                       templates=(PodTemplateRef(path="spec.pods[*]"),))
    admission = fleet.spec.admission.model_copy(update={"workload_kinds": (own,)})
    policy = fleet.model_copy(update={"spec": fleet.spec.model_copy(update={"admission": admission})})
    for entry in entries(policy).values():
        assert {"apiGroups": ["example.com"], "apiVersions": ["v2"], "operations": ["CREATE", "UPDATE"],
                "resources": ["trainers"], "scope": "Namespaced"} in entry["rules"]
        assert "request.kind.kind == 'Trainer' && ((has(o.spec) && has(o.spec.pods)" in \
            entry["matchConditions"][0]["expression"]


def test_tenants_get_one_entry_each_and_everyone_else_the_default_entry(fleet: ClusterGPUPolicy) -> None:
    paths = {name: entry["clientConfig"]["service"]["path"] for name, entry in entries(fleet).items()}
    assert paths == {
        "default.gpupolicy.dev": "/validate",
        "dev.tenants.gpupolicy.dev": "/validate/tenant/dev",
        "prod.tenants.gpupolicy.dev": "/validate/tenant/prod",
        "research.tenants.gpupolicy.dev": "/validate/tenant/research",
    }
    assert list(entries(policy_with("tke-l20-t4"))) == ["default.gpupolicy.dev"]


def test_namespace_selectors_exclude_system_namespaces_and_add_tenant_selectors(fleet: ClusterGPUPolicy) -> None:
    excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": ["gpupolicy-system", "kube-system"]}
    selectors_by_entry = {name: e["namespaceSelector"]["matchExpressions"] for name, e in entries(fleet).items()}
    assert selectors_by_entry == {
        "default.gpupolicy.dev": [
            excluded,
            {"key": "gpu-tier", "operator": "NotIn", "values": ["dev", "sandbox"]},
            {"key": "gpu-tier", "operator": "NotIn", "values": ["prod"]},
            {"key": "gpu-tier", "operator": "NotIn", "values": ["research"]},
        ],
        "dev.tenants.gpupolicy.dev": [excluded, {"key": "gpu-tier", "operator": "In", "values": ["dev", "sandbox"]}],
        "prod.tenants.gpupolicy.dev": [excluded, {"key": "gpu-tier", "operator": "In", "values": ["prod"]}],
        "research.tenants.gpupolicy.dev": [excluded, {"key": "gpu-tier", "operator": "In", "values": ["research"]}],
    }


def test_kube_system_is_excluded_even_when_excluded_namespaces_omits_it() -> None:
    policy = policy_with(namespace="gpu-admission", excludedNamespaces=["monitoring"])
    for entry in entries(policy).values():
        first = entry["namespaceSelector"]["matchExpressions"][0]
        assert first["values"] == ["gpu-admission", "kube-system", "monitoring"]


def test_a_tenant_selector_with_no_negation_is_refused_with_a_located_diagnostic() -> None:
    data = example_data("mixed-fleet")
    data["spec"]["tenants"][1]["namespaceSelector"] = {"matchLabels": {"gpu-tier": "research", "team": "ml"}}
    with pytest.raises(PolicyError) as raised:
        render_admission(policy_from(data))
    [diagnostic] = raised.value.diagnostics
    assert (diagnostic.code, diagnostic.path) == ("tenant-selector-too-complex",
                                                  ("spec", "tenants", 1, "namespaceSelector"))


# ---------------------------------------------------------------- certificates


def cert_manager_objects(policy: ClusterGPUPolicy) -> dict[str, Obj]:
    return {obj["metadata"]["name"]: obj for obj in render_admission(policy) if obj["kind"] in CERT_MANAGER_KINDS}


def hours(duration: str) -> int:
    match = re.fullmatch(r"(\d+)h", duration)
    assert match, f"{duration!r} is not a whole number of hours"
    return int(match[1])


def cert_manager_problems(obj: Obj) -> list[str]:
    """The required fields of cert-manager.io/v1 Issuer and Certificate (cert-manager's CRD schema)."""
    found = [] if obj["apiVersion"] == "cert-manager.io/v1" else ["apiVersion"]
    meta, spec = obj["metadata"], obj.get("spec", {})
    found += [f"metadata.{key}" for key in ("name", "namespace") if not meta.get(key)]
    if obj["kind"] == "Issuer":
        kinds = set(spec) & {"acme", "ca", "selfSigned", "vault", "venafi"}
        found += [] if len(kinds) == 1 else ["an Issuer needs exactly one issuer type"]
        found += ["ca.secretName"] if "ca" in spec and not spec["ca"].get("secretName") else []
        return found
    found += ["spec.secretName"] if not spec.get("secretName") else []
    issuer = spec.get("issuerRef", {})
    found += ["issuerRef.name"] if not issuer.get("name") else []
    found += ["issuerRef.kind"] if issuer.get("kind") not in ("Issuer", "ClusterIssuer") else []
    found += ["a subject"] if not (spec.get("commonName") or spec.get("dnsNames")) else []
    found += ["renewBefore must be shorter than duration"] if hours(spec["renewBefore"]) >= hours(
        spec["duration"]) else []
    return found


def test_cert_manager_issues_a_ca_then_the_serving_certificate_from_it(fleet: ClusterGPUPolicy) -> None:
    objs = cert_manager_objects(fleet)
    assert {name: obj["kind"] for name, obj in objs.items()} == {
        "gpupolicy-selfsigned": "Issuer", "gpupolicy-webhook-ca": "Certificate",
        "gpupolicy-ca": "Issuer", "gpupolicy-webhook-tls": "Certificate",
    }
    for obj in objs.values():
        assert cert_manager_problems(obj) == []
    ca, serving = objs["gpupolicy-webhook-ca"]["spec"], objs["gpupolicy-webhook-tls"]["spec"]
    assert objs["gpupolicy-selfsigned"]["spec"] == {"selfSigned": {}}
    assert ca["isCA"] is True and ca["issuerRef"]["name"] == "gpupolicy-selfsigned"
    assert objs["gpupolicy-ca"]["spec"] == {"ca": {"secretName": ca["secretName"]}}
    assert serving["issuerRef"]["name"] == "gpupolicy-ca" and "isCA" not in serving
    assert serving["secretName"] == "gpupolicy-webhook-tls"
    assert serving["dnsNames"] == ["gpupolicy-webhook.gpupolicy-system.svc",
                                   "gpupolicy-webhook.gpupolicy-system.svc.cluster.local"]
    assert (serving["duration"], serving["renewBefore"]) == ("2160h", "720h")
    assert hours(ca["duration"]) > 10 * hours(serving["duration"])


def test_the_check_of_cert_manager_fields_catches_missing_ones() -> None:
    broken = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "x"},
              "spec": {"issuerRef": {"kind": "Secret"}, "duration": "1h", "renewBefore": "2h"}}
    assert cert_manager_problems(broken) == [
        "metadata.namespace", "spec.secretName", "issuerRef.name", "issuerRef.kind", "a subject",
        "renewBefore must be shorter than duration"]
    assert cert_manager_problems({"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
                                  "metadata": {"name": "i", "namespace": "n"}, "spec": {}}) == [
        "an Issuer needs exactly one issuer type"]


def test_cert_manager_injects_the_ca_of_the_serving_certificate_into_the_registration() -> None:
    policy = policy_with(namespace="gpu-admission", certificates={"secretName": "serving"})
    vwc = webhook_configuration(policy)
    assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpu-admission/gpupolicy-webhook-tls"
    assert all("caBundle" not in e["clientConfig"] for e in vwc["webhooks"])
    serving = cert_manager_objects(policy)["gpupolicy-webhook-tls"]["spec"]
    assert serving["secretName"] == "serving"
    assert serving["dnsNames"][0] == "gpupolicy-webhook.gpu-admission.svc"
    volumes = {v["name"]: v for v in pod_template_spec(policy)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "serving"


def test_a_user_secret_replaces_cert_manager_and_its_ca_bundle_is_registered() -> None:
    policy = policy_with(certificates={"source": "secret", "secretName": "my-tls", "caBundle": "Y2EtYnVuZGxl"})
    assert cert_manager_objects(policy) == {}
    vwc = webhook_configuration(policy)
    assert "cert-manager.io/inject-ca-from" not in vwc["metadata"]["annotations"]
    assert all(e["clientConfig"]["caBundle"] == "Y2EtYnVuZGxl" for e in vwc["webhooks"])
    volumes = {v["name"]: v for v in pod_template_spec(policy)["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "my-tls"


def test_a_user_secret_without_a_ca_bundle_leaves_the_bundle_for_an_overlay() -> None:
    vwc = webhook_configuration(policy_with(certificates={"source": "secret"}))
    assert all("caBundle" not in e["clientConfig"] for e in vwc["webhooks"])


# ---------------------------------------------------------------- fail-safe scope, evaluated

RESOURCE_OF_KIND = {
    "Pod": ("", "pods"), "ReplicationController": ("", "replicationcontrollers"), "ConfigMap": ("", "configmaps"),
    "Deployment": ("apps", "deployments"), "ReplicaSet": ("apps", "replicasets"),
    "StatefulSet": ("apps", "statefulsets"), "DaemonSet": ("apps", "daemonsets"),
    "Job": ("batch", "jobs"), "CronJob": ("batch", "cronjobs"),
}
API_VERSION = {"": "v1", "apps": "apps/v1", "batch": "batch/v1"}


def namespace_labels(name: str, **labels: str) -> dict[str, str]:
    # The API server sets kubernetes.io/metadata.name on every namespace (Kubernetes 1.22+).
    return {"kubernetes.io/metadata.name": name, **labels}


def selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    reqs = selectors.requirements_from(
        selector.get("matchLabels", {}),
        [(e["key"], e["operator"], e.get("values", ())) for e in selector.get("matchExpressions", [])],
    )
    return selectors.matches(reqs, labels)


def rule_matches(entry: Obj, kind: str, operation: str) -> bool:
    group, resource = RESOURCE_OF_KIND[kind]
    return any(group in r["apiGroups"] and resource in r["resources"] and operation in r["operations"]
               for r in entry["rules"])


def called(vwc: Obj, labels: dict[str, str], operation: str, obj: Obj | None, old: Obj | None = None) -> set[str]:
    """The entries the API server would call: rules, then namespaceSelector, then every matchCondition."""
    kind = (obj or old or {})["kind"]
    request = {"operation": operation, "namespace": labels["kubernetes.io/metadata.name"]}
    return {
        entry["name"] for entry in vwc["webhooks"]
        if rule_matches(entry, kind, operation)
        and selector_matches(entry["namespaceSelector"], labels)
        and all([cel_k8s.evaluate(c["expression"], object=obj, old_object=old, request=request)
                 for c in entry["matchConditions"]])
    }


def workload(kind: str, *, gpus: int = 0, namespace: str = "team-a", replicas: int = 1) -> Obj:
    limits = {"cpu": "1", **({"nvidia.com/gpu": gpus} if gpus else {})}
    spec: Obj = {"containers": [{"name": "main", "image": "app", "resources": {"limits": limits}}]}
    group, _ = RESOURCE_OF_KIND[kind]
    meta = {"name": "w", "namespace": namespace}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "spec": spec}
    template = {"metadata": {"labels": {"app": "w"}}, "spec": spec}
    if kind == "CronJob":
        return {"apiVersion": API_VERSION[group], "kind": kind, "metadata": meta,
                "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": template}}}}
    return {"apiVersion": API_VERSION[group], "kind": kind, "metadata": meta,
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "w"}}, "template": template}}


def scaled(obj: Obj, replicas: int) -> Obj:
    new = copy.deepcopy(obj)
    new["spec"]["replicas"] = replicas
    new["metadata"]["annotations"] = {"deployment.kubernetes.io/desired-replicas": str(replicas)}
    return new


OUTAGE_CASES: dict[str, tuple[bool, dict[str, str], str, Obj | None, Obj | None]] = {
    # case: (blocked, namespace labels, operation, object, oldObject)
    "GPU pod in a team namespace": (True, namespace_labels("team-a"), "CREATE", workload("Pod", gpus=1), None),
    "GPU Deployment in a tenant namespace": (
        True, namespace_labels("inference", **{"gpu-tier": "prod"}), "CREATE", workload("Deployment", gpus=1), None),
    "GPU CronJob in a team namespace": (True, namespace_labels("team-a"), "CREATE", workload("CronJob", gpus=2), None),
    "Deployment update that removes its GPUs": (
        True, namespace_labels("team-a"), "UPDATE", workload("Deployment"), workload("Deployment", gpus=1)),
    "Deployment update that adds GPUs": (
        True, namespace_labels("team-a"), "UPDATE", workload("Deployment", gpus=1), workload("Deployment")),
    "CPU pod in a team namespace": (False, namespace_labels("team-a"), "CREATE", workload("Pod"), None),
    "CPU Deployment in a tenant namespace": (
        False, namespace_labels("inference", **{"gpu-tier": "prod"}), "CREATE", workload("Deployment"), None),
    "CPU StatefulSet update": (
        False, namespace_labels("team-a"), "UPDATE", scaled(workload("StatefulSet"), 2), workload("StatefulSet")),
    "GPU pod in kube-system": (
        False, namespace_labels("kube-system"), "CREATE", workload("Pod", gpus=1, namespace="kube-system"), None),
    "GPU DaemonSet in the webhook's namespace": (
        False, namespace_labels("gpupolicy-system"), "CREATE",
        workload("DaemonSet", gpus=1, namespace="gpupolicy-system"), None),
    "GPU pod in kube-system labelled as a tenant": (
        False, namespace_labels("kube-system", **{"gpu-tier": "prod"}), "CREATE",
        workload("Pod", gpus=1, namespace="kube-system"), None),
    "scaling a GPU Deployment": (
        False, namespace_labels("team-a"), "UPDATE", scaled(workload("Deployment", gpus=1), 3),
        workload("Deployment", gpus=1)),
    "the Deployment controller resizing a GPU ReplicaSet": (
        False, namespace_labels("team-a"), "UPDATE", scaled(workload("ReplicaSet", gpus=1), 0),
        workload("ReplicaSet", gpus=1)),
    "relabelling a running GPU pod": (
        False, namespace_labels("team-a"), "UPDATE", {**workload("Pod", gpus=1), "metadata": {"name": "w",
                                                      "labels": {"a": "b"}}}, workload("Pod", gpus=1)),
    "deleting a GPU Job": (False, namespace_labels("team-a"), "DELETE", None, workload("Job", gpus=1)),
    "a ConfigMap": (False, namespace_labels("team-a"), "CREATE",
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}, None),
}


@pytest.mark.parametrize("case", OUTAGE_CASES)
def test_with_the_webhook_down_and_fail_only_gpu_workloads_outside_system_namespaces_are_blocked(
    fleet: ClusterGPUPolicy, case: str
) -> None:
    blocked, labels, operation, obj, old = OUTAGE_CASES[case]
    vwc = webhook_configuration(fleet)
    assert {e["failurePolicy"] for e in vwc["webhooks"]} == {"Fail"}
    # Fail turns an unreachable webhook into a rejection, so "blocked" is "some entry would be called".
    assert bool(called(vwc, labels, operation, obj, old)) is blocked


def test_an_excluded_namespace_is_never_sent_anything() -> None:
    vwc = webhook_configuration(policy_with(excludedNamespaces=["gpu-operator"]))
    pod = workload("Pod", gpus=1, namespace="gpu-operator")
    assert called(vwc, namespace_labels("gpu-operator"), "CREATE", pod) == set()
    assert called(vwc, namespace_labels("kube-system"), "CREATE", pod) == set()


# ---------------------------------------------------------------- tenant routing, evaluated

ROUTES = {
    "a namespace without tenant labels": (namespace_labels("team-a"), {"default.gpupolicy.dev"}),
    "a prod namespace": (namespace_labels("inference", **{"gpu-tier": "prod"}), {"prod.tenants.gpupolicy.dev"}),
    "a research namespace": (namespace_labels("ml", **{"gpu-tier": "research"}), {"research.tenants.gpupolicy.dev"}),
    "a sandbox namespace of the dev tenant": (namespace_labels("sb", **{"gpu-tier": "sandbox"}),
                                              {"dev.tenants.gpupolicy.dev"}),
    "an unknown tier": (namespace_labels("x", **{"gpu-tier": "gold"}), {"default.gpupolicy.dev"}),
    "the webhook's own namespace labelled prod": (namespace_labels("gpupolicy-system", **{"gpu-tier": "prod"}),
                                                 set()),
}


@pytest.mark.parametrize("case", ROUTES)
def test_a_gpu_pod_reaches_exactly_its_tenants_entry_or_the_default(fleet: ClusterGPUPolicy, case: str) -> None:
    labels, expected = ROUTES[case]
    assert called(webhook_configuration(fleet), labels, "CREATE", workload("Pod", gpus=1)) == expected


def test_every_namespace_is_routed_to_its_matching_tenants_or_else_to_the_default_entry() -> None:
    # One tenant per operator, overlapping on purpose; every combination of their labels is tried.
    data = example_data("mixed-fleet")
    data["spec"]["tenants"] = [
        {"name": "team-a", "namespaceSelector": {"matchLabels": {"team": "a"}}, "allow": ["mig"]},
        {"name": "labelled", "namespaceSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
         "allow": ["mps"]},
        {"name": "not-dev", "namespaceSelector": {"matchExpressions": [
            {"key": "env", "operator": "NotIn", "values": ["dev"]}]}, "allow": ["exclusive"]},
        {"name": "unlabelled", "namespaceSelector": {"matchExpressions": [
            {"key": "owner", "operator": "DoesNotExist"}]}, "allow": ["time-slicing"]},
    ]
    policy = policy_from(data)
    vwc = webhook_configuration(policy)
    tenant_reqs = {t.name: tenant_requirements(t) for t in policy.spec.tenants}
    choices = {"team": [None, "a", "b"], "gpu": [None, ""], "env": [None, "dev", "prod"], "owner": [None, "x"]}
    for values in itertools.product(*choices.values()):
        labels = namespace_labels("ns", **{k: v for k, v in zip(choices, values, strict=True) if v is not None})
        tenants = {f"{name}.tenants.gpupolicy.dev" for name, reqs in tenant_reqs.items()
                   if selectors.matches(reqs, labels)}
        expected = tenants or {"default.gpupolicy.dev"}
        assert called(vwc, labels, "CREATE", workload("Pod", gpus=1)) == expected, labels


@pytest.mark.parametrize("example", ["h20-mig", "mixed-fleet"])
def test_the_node_label_reconciler_meets_pod_security_restricted_and_may_only_touch_nodes(example: str) -> None:
    from compiler import compile_policy
    from policy.load import load_policy_or_raise

    path = Path(__file__).resolve().parents[2] / "examples" / "clusters" / example / "cluster.yaml"
    tree = compile_policy(load_policy_or_raise(path.read_text(), filename=str(path)))
    deployment = yaml.safe_load(tree["node-labels/deployment.yaml"])
    assert restricted_violations(deployment["spec"]["template"]["spec"]) == []
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    role = yaml.safe_load(tree["node-labels/clusterrole.yaml"])
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "watch"]}]
    events = yaml.safe_load(tree["node-labels/role.yaml"])
    assert events["metadata"]["namespace"] == "default" and events["rules"][0]["resources"] == ["events"]
