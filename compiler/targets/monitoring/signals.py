"""The series the rules read, by exporter, with the label conventions that decide how selectors are written.

Sources (reference cel-monitoring.md Part 2, read from the exporters' own code):

* kube-state-metrics v2.x (``internal/store/node.go``, ``pod.go``, ``daemonset.go``, ``utils.go``): a node label
  becomes ``label_`` + its key with every character outside ``[a-zA-Z0-9_]`` turned into ``_`` and camelCase
  turned into snake_case, and appears on ``kube_node_labels`` only when allow-listed
  (``--metric-labels-allowlist``); an extended resource name gets the same substitution without the
  snake_case step (``nvidia.com/mig-1g.12gb`` -> ``nvidia_com_mig_1g_12gb``).
* NVIDIA dcgm-exporter (``etc/default-counters.csv``, ``internal/pkg/transformation/kubernetes.go`` and
  ``process_metrics.go``): per-device series labelled ``gpu``, ``UUID`` and, for MIG instances,
  ``GPU_I_ID``/``GPU_I_PROFILE``; from 4.5.3-4.8.2 with virtual GPUs, ``DCGM_FI_DEV_FB_USED`` and
  ``DCGM_FI_DEV_GPU_UTIL`` also per pod (``pod``, ``namespace``, ``pod_uid``) beside the device's own series.
* kube-apiserver (``k8s.io/apiserver/pkg/admission/metrics``): the webhook as the API server sees it.
* The webhook's own metrics (webhook/metrics.py) and the node-label reconciler's (cluster/reconciler.py); the
  names are repeated here because the compiler may not import either (pyproject import contracts), and
  tests/docs check that they stay in step.
"""

from __future__ import annotations

import re

from compiler.targets.monitoring.promql import Matcher, Selector, escape_regex, sel

# kube-state-metrics
KSM_NODE_LABELS = "kube_node_labels"
KSM_ALLOCATABLE = "kube_node_status_allocatable"
KSM_CAPACITY = "kube_node_status_capacity"
KSM_POD_INFO = "kube_pod_info"
KSM_POD_PHASE = "kube_pod_status_phase"
KSM_POD_REASON = "kube_pod_status_reason"
KSM_POD_UNSCHEDULABLE = "kube_pod_status_unschedulable"
KSM_POD_OWNER = "kube_pod_owner"
KSM_POD_LIMITS = "kube_pod_container_resource_limits"
KSM_POD_REQUESTS = "kube_pod_container_resource_requests"
KSM_REPLICASET_OWNER = "kube_replicaset_owner"
KSM_DEPLOYMENT_SPEC_REPLICAS = "kube_deployment_spec_replicas"
KSM_DEPLOYMENT_UPDATED = "kube_deployment_status_replicas_updated"
KSM_DEPLOYMENT_AVAILABLE = "kube_deployment_status_replicas_available"
KSM_DS_DESIRED = "kube_daemonset_status_desired_number_scheduled"
KSM_DS_UPDATED = "kube_daemonset_status_updated_number_scheduled"
KSM_DS_AVAILABLE = "kube_daemonset_status_number_available"
KSM_DS_OBSERVED_GENERATION = "kube_daemonset_status_observed_generation"
KSM_DS_GENERATION = "kube_daemonset_metadata_generation"

# dcgm-exporter
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
DCGM_GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
#: One GPU, or one MIG instance of it: the labels that tell devices apart on a node.
DCGM_DEVICE = ("node", "gpu", "UUID", "GPU_I_ID", "GPU_I_PROFILE")
DCGM_POD = (*DCGM_DEVICE, "namespace", "pod")
#: The per-pod series carry the pod's UID; the device's own series never do (process_metrics.go).
PER_POD = Matcher("pod_uid", "!=", "")

# kube-apiserver, for the webhook as it sees it
APISERVER_WEBHOOK_REJECTIONS = "apiserver_admission_webhook_rejection_count"
APISERVER_WEBHOOK_FAIL_OPEN = "apiserver_admission_webhook_fail_open_count"
APISERVER_WEBHOOK_DURATION = "apiserver_admission_webhook_admission_duration_seconds_bucket"
#: One count per (policy, binding) evaluation: {policy, policy_binding, enforcement_action, state} in 1.30, where an
#: error failurePolicy Ignore let through counts as enforcement_action="allow"; {policy, policy_binding, error_type,
#: enforcement_action} from 1.31 (k8s.io/apiserver v0.30.0 and v0.31.0 pkg/admission/plugin/policy/validating/
#: metrics/metrics.go).
APISERVER_POLICY_CHECKS = "apiserver_validating_admission_policy_check_total"
#: The first minor whose check counter carries error_type.
POLICY_CHECK_ERROR_TYPE_MINOR = 31

# the webhook's own metrics (webhook/metrics.py; counters end in _total once exposed)
WEBHOOK_DECISIONS = "gpupolicy_admission_decisions_total"
WEBHOOK_DURATION = "gpupolicy_admission_duration_seconds_bucket"
WEBHOOK_CERT_EXPIRY = "gpupolicy_certificate_expiry_timestamp_seconds"
WEBHOOK_CERT_RELOADS = "gpupolicy_certificate_reloads_total"
WEBHOOK_POLICY_INFO = "gpupolicy_policy_info"
WEBHOOK_POLICY_RELOAD_FAILURES = "gpupolicy_policy_reload_failures_total"
WEBHOOK_INTERNAL_ERRORS = "gpupolicy_webhook_internal_errors_total"
WEBHOOK_DROPPED_CONNECTIONS = "gpupolicy_webhook_dropped_connections_total"
#: 1 while a pod's node cache is synced, the lowest across its workers; 0 too in a webhook run without its cache.
WEBHOOK_NODE_CACHE_SYNCED = "gpupolicy_node_cache_synced"

# the node-label reconciler's metrics (cluster/reconciler.py, the same reason for repeating them)
RECONCILER_CONFLICTS = "gpupolicy_node_label_conflicts"
RECONCILER_ERRORS = "gpupolicy_node_label_errors_total"

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def ksm_label(key: str) -> str:
    """The ``kube_node_labels`` label of a node label key: ``nvidia.com/gpu.product`` ->
    ``label_nvidia_com_gpu_product`` (kube-state-metrics utils.go labelName: sanitise, then snake_case)."""
    return "label_" + _CAMEL.sub(r"\1_\2", _INVALID.sub("_", key)).lower()


def ksm_resource(resource: str) -> str:
    """The ``resource`` label value of an extended resource: ``nvidia.com/gpu`` -> ``nvidia_com_gpu``."""
    return _INVALID.sub("_", resource)


#: Every NVIDIA extended resource, as kube-state-metrics names them.
NVIDIA_RESOURCES = Matcher("resource", "=~", escape_regex(ksm_resource("nvidia.com/")) + ".+")


def node_labels(labels: dict[str, str]) -> Selector:
    """``kube_node_labels`` of the nodes carrying every one of ``labels``."""
    return Selector(KSM_NODE_LABELS, tuple(Matcher(ksm_label(k), "=", v) for k, v in sorted(labels.items())))


def nvidia(metric: str) -> Selector:
    """A kube-state-metrics resource series for every ``nvidia.com/*`` resource."""
    return sel(metric, NVIDIA_RESOURCES)
