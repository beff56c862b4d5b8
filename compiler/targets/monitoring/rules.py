"""Recording rules that carry each class's expectations, and the alerts that compare the cluster with them.

The recording rules are the only place a class's facts enter PromQL (its node selector, what each node must
advertise, replicas, the memory a slot may use, its MIG config, the memory-pressure threshold its sizing
implies), always as `gpupolicy:*` series labelled by `class`. The alerts then join live series against them,
so an alert's expression does not grow with the number of classes, except where a class's expected node
labels must be spelled out one by one.

`ALERTS` is the catalogue of every alert the compiler can emit, in order; each entry builds its expression
from the policy, or returns None when the policy has nothing it could fire on (no MIG class, admission off,
no dcgm-exporter). docs/runbooks.md has one section per entry (tests/docs check it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from compiler.targets import (
    admission_policy,
    admission_webhook,
    device_plugin,
    dra_admission,
    feature_discovery,
    gpu_operator,
    hami,
    mig_manager,
    node_labels,
    tenancy_guard,
)
from compiler.targets.monitoring import modes
from compiler.targets.monitoring import signals as sig
from compiler.targets.monitoring.promql import (
    Expr,
    Matcher,
    Selector,
    add,
    aggregate,
    and_,
    call,
    cmp,
    div,
    eq,
    mul,
    ne,
    number,
    one_of,
    or_,
    sel,
    sub,
    unless,
)
from compiler.targets.monitoring.promql import String as Str
from policy.hardware import labels as label_keys
from policy.hardware import sizing
from policy.resolved import node_labels as label_plan
from policy.resolved.resolve import ResolvedClass, ResolvedPolicy
from policy.spec.model import Monitoring

# The series the recording rules write.
NODE_CLASS = "gpupolicy:node_class:info"
EXPECTED_ALLOCATABLE = "gpupolicy:expected_allocatable"
CLASS_NODES = "gpupolicy:class_nodes:expected"
CLASS_GPUS_PER_NODE = "gpupolicy:class_gpus_per_node:expected"
CLASS_REPLICAS = "gpupolicy:class_replicas:expected"
CLASS_SLOT_MEMORY = "gpupolicy:class_slot_memory_mib:budget"
CLASS_MIG_CONFIG = "gpupolicy:class_mig_config:info"
CLASS_MEMORY_PRESSURE = "gpupolicy:class_memory_pressure:threshold"
GPU_MEMORY_USED = "gpupolicy:gpu_memory_used:mib"
GPU_MEMORY_RATIO = "gpupolicy:gpu_memory_used:ratio"
GPU_SM_ACTIVE = "gpupolicy:gpu_sm_active:ratio"
POD_MEMORY_USED = "gpupolicy:pod_gpu_memory_used:mib"
POD_UTILIZATION = "gpupolicy:pod_gpu_utilization:ratio"

RECORDING_GROUP = "gpupolicy.expectations"
#: GPU Feature Discovery labels sharing rewrites, checked on every node of a class where GFD runs: the
#: product (the -SHARED suffix, or -MIG-<profile>), replicas per device, and the MIG strategy.
DRIFT_SUFFIXES = (".product", ".replicas", ".strategy")
#: The certificate is renewed 30 days ahead (admission_webhook); 14 days left means renewal has failed twice.
CERTIFICATE_WARNING_SECONDS = 14 * 86400
DENIALS_SURGE = 10
PLUGIN_REGISTERED_GRACE = "10m"


@dataclass(frozen=True)
class Recording:
    record: str
    expr: Expr
    labels: dict[str, str]


@dataclass(frozen=True)
class Alert:
    name: str
    group: str
    severity: str
    for_: str | None
    summary: str
    description: str
    expr: Expr


@dataclass(frozen=True)
class Context:
    """The policy as the rules read it; `scope` narrows the rules written class by class (recording rules and
    the per-class terms of the label alerts) to some classes, when a large fleet's rules are split."""

    resolved: ResolvedPolicy
    scope: tuple[str, ...] | None = None

    @property
    def scoped(self) -> tuple[ResolvedClass, ...]:
        return tuple(c for c in self.classes if self.scope is None or c.name in self.scope)

    @property
    def settings(self) -> Monitoring:
        return self.resolved.spec.monitoring

    @property
    def classes(self) -> tuple[ResolvedClass, ...]:
        return tuple(sorted(self.resolved.classes, key=lambda c: c.name))

    @property
    def dcgm(self) -> bool:
        return self.settings.dcgm_exporter.enabled

    @property
    def per_pod(self) -> bool:
        return self.dcgm and self.settings.dcgm_exporter.per_pod_metrics

    @property
    def admission(self) -> bool:
        """The webhook runs (admission on, and not compiled to ValidatingAdmissionPolicies alone)."""
        return self.resolved.spec.runs_webhook

    @property
    def node_cache(self) -> bool:
        """The webhook runs with its node cache (admission.nodeCache), so it exports the cache's state."""
        return self.admission and self.resolved.spec.admission.node_cache

    @property
    def webhook_namespace(self) -> str:
        return self.resolved.spec.admission.namespace


def ratio(percent: str) -> float:
    """A spec percentage as a ratio: "90%" -> 0.9."""
    return round(sizing.parse_percent(percent) / 100, 6)


def seconds(duration: str) -> float:
    """A threshold duration ("500ms", "2s") in seconds."""
    return int(duration[:-2]) / 1000 if duration.endswith("ms") else float(duration[:-1])


def memory_pressure_ratio(node_class: ResolvedClass, settings: Monitoring) -> float:
    """Device memory used, as a share of the device, above which a shared device is under pressure: where
    sizing set a reserve, the point where pods eat into it (usable / total); else the spec's threshold."""
    if node_class.sizing is not None and node_class.sizing.total_mib:
        return round(node_class.sizing.usable_mib / node_class.sizing.total_mib, 4)
    return ratio(settings.thresholds.memory_pressure)


def drift_labels(node_class: ResolvedClass) -> dict[str, str]:
    """The GPU Feature Discovery labels every node of the class must carry once its config is live."""
    if not node_class.feature_discovery:
        return {}
    return {k: v for k, v in sorted(node_class.gfd_labels.items())
            if k not in node_class.node_selector and k.endswith(DRIFT_SUFFIXES)}


def profile_labels(profile: str | None) -> dict[str, str]:
    """The dcgm-exporter label of a MIG instance's profile; none for a whole GPU (an empty label is no label)."""
    return {"GPU_I_PROFILE": profile} if profile else {}


# ----------------------------------------------------------------------------------------- helpers


def _max_by(labels: tuple[str, ...], e: Expr) -> Expr:
    return aggregate("max", e, labels)


def _sum_by(labels: tuple[str, ...], e: Expr) -> Expr:
    return aggregate("sum", e, labels)


def _class(name: str, metric: str = NODE_CLASS) -> Selector:
    return sel(metric, eq("class", name))


def _with_class(e: Expr) -> Expr:
    """Per-node series labelled with the class (and sharing mode) of their node; other nodes drop out."""
    return mul(e, sel(NODE_CLASS), on=("node",), group_left=("class", "sharing"))


def _device(metric: str, *matchers: Matcher) -> Expr:
    # max, not sum: with virtual GPUs dcgm-exporter copies each device series once per pod sharing it.
    return _max_by(sig.DCGM_DEVICE, sel(metric, *matchers))


def _pod(metric: str) -> Expr:
    return _max_by(sig.DCGM_POD, sel(metric, sig.PER_POD))


def _increase(metric: str, window: str, *matchers: Matcher) -> Expr:
    return call("increase", sel(metric, *matchers).over(window))


def _rate(metric: str, window: str, *matchers: Matcher) -> Expr:
    return call("rate", sel(metric, *matchers).over(window))


def _tag(e: Expr, label: str, value: str) -> Expr:
    """``e`` with one more label set to a constant (label_replace of the empty source label)."""
    return call("label_replace", e, Str(label), Str(value), Str(""), Str(""))


def _gpu_pods(metric: str) -> Expr:
    """Pods that ask for any nvidia.com/* resource, by (namespace, pod)."""
    return cmp(_sum_by(("namespace", "pod"), sig.nvidia(metric)), ">", number(0))


# ----------------------------------------------------------------------------------------- recording rules


def recording_rules(ctx: Context) -> list[Recording]:
    """The class recordings, then the device recordings that join DCGM series to them. In evaluation order:
    Prometheus evaluates a group's rules in sequence, each seeing the ones before."""
    return class_recordings(ctx) + device_recordings(ctx)


def class_recordings(ctx: Context) -> list[Recording]:
    """Per class in scope: its nodes, what they must advertise, replicas and memory per slot, its MIG config and
    the memory-pressure threshold."""
    out = [Recording(NODE_CLASS, _max_by(("node",), sig.node_labels(c.node_selector)),
                     {"class": c.name, "sharing": c.mode_name}) for c in ctx.scoped]
    for c in ctx.scoped:
        for offer in c.offers:
            resource = {"class": c.name, "resource": sig.ksm_resource(offer.resource)}
            out.append(Recording(EXPECTED_ALLOCATABLE, mul(_max_by(("node",), _class(c.name)), number(offer.per_node)),
                                 resource))
            device = {**resource, **profile_labels(offer.mig_profile)}
            out.append(Recording(CLASS_REPLICAS, call("vector", number(offer.replicas)), device))
            if offer.slot_memory_mib:
                out.append(Recording(CLASS_SLOT_MEMORY, call("vector", number(offer.slot_memory_mib)), device))
        out.append(Recording(CLASS_GPUS_PER_NODE, call("vector", number(c.gpu_count)), {"class": c.name}))
        if c.nodes is not None:
            out.append(Recording(CLASS_NODES, call("vector", number(c.nodes)), {"class": c.name}))
        if c.mig_config is not None:
            out.append(Recording(CLASS_MIG_CONFIG, call("vector", number(1)),
                                 {"class": c.name, "mig_config": c.mig_config}))
        if ctx.dcgm and modes.watch(c).memory_pressure:
            out.append(Recording(CLASS_MEMORY_PRESSURE, call("vector", number(memory_pressure_ratio(c, ctx.settings))),
                                 {"class": c.name}))
    return out


def device_recordings(ctx: Context) -> list[Recording]:
    """dcgm-exporter's device (and pod) series, joined to the class of their node."""
    out: list[Recording] = []
    if ctx.dcgm:
        used = _device(sig.DCGM_FB_USED)
        out += [
            Recording(GPU_MEMORY_USED, _with_class(used), {}),
            Recording(GPU_MEMORY_RATIO, _with_class(div(used, add(used, _device(sig.DCGM_FB_FREE)))), {}),
            # SM activity where the CSV enables it, else the graphics engine's (on by default): same labels,
            # so `or` takes SM_ACTIVE device by device.
            Recording(GPU_SM_ACTIVE, _with_class(or_(_device(sig.DCGM_SM_ACTIVE),
                                                     _device(sig.DCGM_GR_ENGINE_ACTIVE))), {}),
        ]
    if ctx.per_pod:
        out += [
            Recording(POD_MEMORY_USED, _with_class(_pod(sig.DCGM_FB_USED)), {}),
            Recording(POD_UTILIZATION, _with_class(div(_pod(sig.DCGM_GPU_UTIL), number(100))), {}),
        ]
    return out


# ----------------------------------------------------------------------------------------- alert builders


def _allocatable_drift(ctx: Context) -> Expr:
    allocatable = sig.nvidia(sig.KSM_ALLOCATABLE)
    differs = cmp(_max_by(("node", "resource"), allocatable), "!=", sel(EXPECTED_ALLOCATABLE),
                  on=("node", "resource"), group_left=("class",))
    missing = unless(sel(EXPECTED_ALLOCATABLE), allocatable, on=("node", "resource"))
    return or_(differs, missing)


def _unexpected_resource(ctx: Context) -> Expr:
    advertised = cmp(_max_by(("node", "resource"), sig.nvidia(sig.KSM_ALLOCATABLE)), ">", number(0))
    undeclared = unless(advertised, sel(EXPECTED_ALLOCATABLE), on=("node", "resource"))
    return mul(undeclared, sel(NODE_CLASS), on=("node",), group_left=("class",))


def unmanaged_nodes(ctx: Context) -> Expr:
    """Nodes with NVIDIA GPUs that no class selects."""
    gpus = cmp(_max_by(("node",), sig.nvidia(sig.KSM_CAPACITY)), ">", number(0))
    return unless(gpus, sel(NODE_CLASS), on=("node",))


def _class_without_nodes(ctx: Context) -> Expr | None:
    if not any(c.nodes for c in ctx.classes):
        return None
    return unless(cmp(sel(CLASS_NODES), ">", number(0)), aggregate("count", sel(NODE_CLASS), ("class",)),
                  on=("class",))


def _label_terms(ctx: Context, wanted: Callable[[ResolvedClass], dict[str, str]]) -> Expr | None:
    """Nodes of a class missing one of its wanted labels, labelled with the key and the value expected."""
    terms = [
        _tag(_tag(unless(_class(c.name), sig.node_labels({key: value}), on=("node",)), "label", key),
             "expected", value)
        for c in ctx.scoped for key, value in wanted(c).items()
    ]
    return or_(*terms) if terms else None


def _sharing_label_drift(ctx: Context) -> Expr | None:
    return _label_terms(ctx, drift_labels)


def _node_label_missing(ctx: Context) -> Expr | None:
    return _label_terms(ctx, lambda c: dict(c.required_labels))


def _mig_state(*states: str) -> Expr:
    label = sig.ksm_label(label_keys.MIG_CONFIG_STATE)
    matcher = eq(label, states[0]) if len(states) == 1 else one_of(label, states)
    return cmp(_max_by(("node",), sel(sig.KSM_NODE_LABELS, matcher)), "==", number(1))


def _has_mig(ctx: Context) -> bool:
    return any(c.mig_config is not None for c in ctx.classes)


def _mig_failed(ctx: Context) -> Expr | None:
    return _mig_state("failed") if _has_mig(ctx) else None


def _mig_stuck(ctx: Context) -> Expr | None:
    return _mig_state("pending", "rebooting") if _has_mig(ctx) else None


@dataclass(frozen=True)
class DaemonSets:
    """The DaemonSets that run the classes' configs, as (namespace, name): the device plugins, which register
    the resources, and every one the rollout alert watches (the plugins and what runs beside them)."""

    plugins: tuple[tuple[str, str], ...]
    watched: tuple[tuple[str, str], ...]

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(sorted({namespace for namespace, _ in self.watched}))

    @staticmethod
    def names(pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        return tuple(sorted({name for _, name in pairs}))


def plugin_daemonsets(resolved: ResolvedPolicy) -> DaemonSets:
    plugin = resolved.spec.device_plugin
    hami_plugins = [(resolved.spec.hami.namespace, hami.daemonset_name(c.name)) for c in resolved.vgpu_classes]
    if plugin.deploy == "gpu-operator":
        namespace = plugin.operator.namespace
        driven = [gpu_operator.PLUGIN_DAEMONSET, gpu_operator.GFD_DAEMONSET]
        if any(c.mps_daemon for c in resolved.classes):
            driven.append(gpu_operator.MPS_DAEMONSET)
        if any(c.mig_config is not None for c in resolved.classes):
            driven.append(gpu_operator.MIG_MANAGER_DAEMONSET)
        plugins = [gpu_operator.PLUGIN_DAEMONSET] if resolved.plugin_classes else []
    else:
        namespace = plugin.namespace
        plugins = [device_plugin.plugin_daemonset_name(c.name) for c in resolved.plugin_classes]
        # The tree runs the MPS control daemon, the MIG manager and GPU Feature Discovery beside the plugin.
        driven = [*plugins, *(device_plugin.mps_daemonset_name(c.name) for c in resolved.classes if c.mps_daemon),
                  *(mig_manager.daemonset_name(c.name) for c in resolved.classes if c.mig_manager)]
        if plugin.labels_nodes:
            driven += [feature_discovery.daemonset_name(c.name) for c in resolved.classes]
    own = [(namespace, name) for name in plugins]
    return DaemonSets(tuple(sorted({*own, *hami_plugins})),
                      tuple(sorted({*((namespace, name) for name in driven), *hami_plugins})))


def _in_namespaces(namespaces: tuple[str, ...]) -> Matcher:
    return eq("namespace", namespaces[0]) if len(namespaces) == 1 else one_of("namespace", namespaces)


def _rollout_stuck(ctx: Context) -> Expr:
    daemonsets = plugin_daemonsets(ctx.resolved)

    def ds(metric: str) -> Selector:
        return sel(metric, _in_namespaces(daemonsets.namespaces),
                   one_of("daemonset", DaemonSets.names(daemonsets.watched)))

    behind = or_(
        cmp(ds(sig.KSM_DS_UPDATED), "!=", ds(sig.KSM_DS_DESIRED)),
        cmp(ds(sig.KSM_DS_AVAILABLE), "!=", ds(sig.KSM_DS_DESIRED)),
        cmp(ds(sig.KSM_DS_OBSERVED_GENERATION), "!=", ds(sig.KSM_DS_GENERATION)),
    )
    # kubernetes-mixin's KubeDaemonSetRolloutStuck: behind, and not moving.
    still = cmp(call("changes", ds(sig.KSM_DS_UPDATED).over("10m")), "==", number(0))
    return and_(behind, still, on=("namespace", "daemonset"))


def _plugin_not_registered(ctx: Context) -> Expr:
    daemonsets = plugin_daemonsets(ctx.resolved)
    running_pods = and_(
        sel(sig.KSM_POD_INFO, _in_namespaces(daemonsets.namespaces), eq("created_by_kind", "DaemonSet"),
            one_of("created_by_name", DaemonSets.names(daemonsets.plugins))),
        cmp(sel(sig.KSM_POD_PHASE, eq("phase", "Running")), "==", number(1)),
        on=("namespace", "pod"),
    )
    advertised = cmp(sig.nvidia(sig.KSM_ALLOCATABLE), ">", number(0))
    silent = unless(cmp(sel(EXPECTED_ALLOCATABLE), ">", number(0)), advertised, on=("node", "resource"))
    return and_(silent, _max_by(("node",), running_pods), on=("node",))


def _gpus_unhealthy(ctx: Context) -> Expr:
    lost = sub(_max_by(("node", "resource"), sig.nvidia(sig.KSM_CAPACITY)),
               _max_by(("node", "resource"), sig.nvidia(sig.KSM_ALLOCATABLE)))
    return mul(cmp(lost, ">", number(0)), sel(NODE_CLASS), on=("node",), group_left=("class",))


def _kubelet_rejected(ctx: Context) -> Expr:
    rejected = cmp(_sum_by(("namespace", "pod"), sel(sig.KSM_POD_REASON, eq("reason", "UnexpectedAdmissionError"))),
                   ">", number(0))
    return and_(rejected, _gpu_pods(sig.KSM_POD_LIMITS), on=("namespace", "pod"))


def _pod_unschedulable(ctx: Context) -> Expr:
    unschedulable = cmp(_max_by(("namespace", "pod"), sel(sig.KSM_POD_UNSCHEDULABLE)), "==", number(1))
    return and_(unschedulable, _gpu_pods(sig.KSM_POD_LIMITS), on=("namespace", "pod"))


def _rollout_blocked(ctx: Context) -> Expr:
    pending = cmp(_max_by(("namespace", "pod"), sel(sig.KSM_POD_PHASE, eq("phase", "Pending"))), "==", number(1))
    replica_set_of_pod = call("label_replace", sel(sig.KSM_POD_OWNER, eq("owner_kind", "ReplicaSet")),
                              Str("replicaset"), Str("$1"), Str("owner_name"), Str("(.+)"))
    deployment_of_replica_set = call("label_replace", sel(sig.KSM_REPLICASET_OWNER, eq("owner_kind", "Deployment")),
                                     Str("deployment"), Str("$1"), Str("owner_name"), Str("(.+)"))
    pending_gpu_pods = and_(and_(replica_set_of_pod, pending, on=("namespace", "pod")),
                            _gpu_pods(sig.KSM_POD_REQUESTS), on=("namespace", "pod"))
    per_deployment = aggregate("count", mul(pending_gpu_pods, deployment_of_replica_set, on=("namespace", "replicaset"),
                                            group_left=("deployment",)), ("namespace", "deployment"))
    behind = cmp(sel(sig.KSM_DEPLOYMENT_UPDATED), "<", sel(sig.KSM_DEPLOYMENT_SPEC_REPLICAS))
    return and_(per_deployment, behind, on=("namespace", "deployment"))


def webhook_names(ctx: Context) -> Matcher:
    """The webhook entries of the ValidatingWebhookConfiguration, as the API server's `name` label."""
    tenants = [f"{t.name}.{admission_webhook.TENANT_WEBHOOK_SUFFIX}" for t in ctx.resolved.spec.tenants]
    return one_of("name", [admission_webhook.DEFAULT_WEBHOOK, *tenants])


def _webhook_unavailable(ctx: Context) -> Expr | None:
    if not ctx.admission:
        return None
    names = webhook_names(ctx)
    failed = _sum_by(("name",), _rate(sig.APISERVER_WEBHOOK_REJECTIONS, "5m", names,
                                      one_of("error_type", ("calling_webhook_error", "apiserver_internal_error"))))
    ignored = _sum_by(("name",), _increase(sig.APISERVER_WEBHOOK_FAIL_OPEN, "10m", names))
    return or_(cmp(failed, ">", number(0)), cmp(ignored, ">", number(0)))


def _webhook_slow(ctx: Context) -> Expr | None:
    if not ctx.admission:
        return None
    buckets = _sum_by(("name", "le"), _rate(sig.APISERVER_WEBHOOK_DURATION, "5m", webhook_names(ctx),
                                            eq("type", "validating")))
    p99 = call("histogram_quantile", number(0.99), buckets)
    return cmp(p99, ">", number(seconds(ctx.settings.thresholds.webhook_latency)))


def _webhook_counter(metric: str, window: str, *matchers: Matcher) -> Callable[[Context], Expr | None]:
    def build(ctx: Context) -> Expr | None:
        if not ctx.admission:
            return None
        increase = _increase(metric, window, eq("namespace", ctx.webhook_namespace), *matchers)
        return cmp(_sum_by(("namespace", "pod"), increase), ">", number(0))

    return build


def _webhook_replicas(ctx: Context) -> Expr | None:
    if not ctx.admission:
        return None

    def deployment(metric: str) -> Selector:
        return sel(metric, eq("namespace", ctx.webhook_namespace), eq("deployment", admission_webhook.NAME))

    return cmp(deployment(sig.KSM_DEPLOYMENT_AVAILABLE), "<", deployment(sig.KSM_DEPLOYMENT_SPEC_REPLICAS))


def _certificate_expiring(ctx: Context) -> Expr | None:
    if not ctx.admission:
        return None
    # > 0: a worker that has not loaded a certificate yet reports 0, which is no expiry.
    loaded = cmp(sel(sig.WEBHOOK_CERT_EXPIRY, eq("namespace", ctx.webhook_namespace)), ">", number(0))
    left = sub(aggregate("min", loaded, ("namespace", "pod")), call("time"))
    return cmp(left, "<", number(CERTIFICATE_WARNING_SECONDS))


def _replicas_disagree(ctx: Context) -> Expr | None:
    if not ctx.admission:
        return None
    serving = cmp(sel(sig.WEBHOOK_POLICY_INFO, eq("namespace", ctx.webhook_namespace)), "==", number(1))
    digests = aggregate("count", aggregate("count", serving, ("namespace", "digest")), ("namespace",))
    return cmp(digests, ">", number(1))


def _node_cache_unsynced(ctx: Context) -> Expr | None:
    # Only where the compiled webhook runs its cache: a webhook without one exports the gauge too, as 0. The cache
    # retries a failed list or watch after at most 30 s (cluster/nodes.py), so a start or a blip syncs well within
    # the alert's 10 minutes.
    if not ctx.node_cache:
        return None
    synced = sel(sig.WEBHOOK_NODE_CACHE_SYNCED, eq("namespace", ctx.webhook_namespace))
    return cmp(aggregate("min", synced, ("namespace", "pod")), "==", number(0))


def watched_policies(resolved: ResolvedPolicy) -> tuple[str, ...]:
    """The compiled ValidatingAdmissionPolicies whose evaluation errors GPUPolicyAdmissionPolicyErrors reports:
    the rules', the DRA claims' and the tenancy guard's from 1.31 (error_type tells an error from a verdict; a DRA
    pool needs 1.34, so its policies are always of this branch); in 1.30, which has no
    error_type, only the errors failurePolicy Ignore let through can be told (enforcement_action allow: a policy
    counts an allow only for those), so the rules' under Ignore, and never the guard, which fails closed."""
    spec = resolved.spec
    if spec.kubernetes_minor >= sig.POLICY_CHECK_ERROR_TYPE_MINOR:
        return (*admission_policy.policy_names(resolved), *dra_admission.policy_names(resolved),
                *tenancy_guard.policy_names(resolved))
    if admission_policy.failure_policy(spec) == "Ignore":
        return admission_policy.policy_names(resolved)
    return ()  # 1.30 counts an error failurePolicy Fail turns into a denial as a denial: nothing to tell


def _admission_policy_errors(ctx: Context) -> Expr | None:
    """Evaluations of the compiled ValidatingAdmissionPolicies that ended in an error (a compile or type error, or
    the cost budget exhausted), not a verdict (watched_policies says which policies and how)."""
    names = watched_policies(ctx.resolved)
    typed = ctx.resolved.spec.kubernetes_minor >= sig.POLICY_CHECK_ERROR_TYPE_MINOR
    if not names:
        return None
    policies = one_of("policy", names)
    if typed:
        errors = _rate(sig.APISERVER_POLICY_CHECKS, "10m", policies, ne("error_type", "no_error"))
        return cmp(_sum_by(("policy", "policy_binding", "error_type"), errors), ">", number(0))
    ignored = _rate(sig.APISERVER_POLICY_CHECKS, "10m", policies, eq("enforcement_action", "allow"))
    return cmp(_sum_by(("policy", "policy_binding"), ignored), ">", number(0))


def _denies_surge(ctx: Context) -> Expr | None:
    if not ctx.admission:
        return None
    denials = _increase(sig.WEBHOOK_DECISIONS, "15m", eq("namespace", ctx.webhook_namespace), eq("outcome", "deny"))
    return cmp(_sum_by(("rule",), denials), ">", number(DENIALS_SURGE))


def reconciler_runs(resolved: ResolvedPolicy) -> bool:
    """Whether the tree runs the node-label reconciler (some class has labels it owns)."""
    return bool(label_plan.build_plan(resolved).classes)


def _label_conflict(ctx: Context) -> Expr | None:
    if not reconciler_runs(ctx.resolved):
        return None
    conflicts = sel(sig.RECONCILER_CONFLICTS, eq("namespace", ctx.webhook_namespace))
    return cmp(_max_by(("node", "key"), conflicts), "==", number(1))


def _reconciler_failing(ctx: Context) -> Expr | None:
    if not reconciler_runs(ctx.resolved):
        return None
    namespace = eq("namespace", ctx.webhook_namespace)
    errors = cmp(_sum_by(("namespace", "verb"), _increase(sig.RECONCILER_ERRORS, "15m", namespace)), ">", number(0))
    deployment = eq("deployment", node_labels.NAME)
    down = cmp(sel(sig.KSM_DEPLOYMENT_AVAILABLE, namespace, deployment), "<", number(1))
    return or_(errors, down)


def _dcgm_missing(ctx: Context) -> Expr | None:
    if not ctx.dcgm:
        return None
    return unless(sel(NODE_CLASS), _max_by(("node",), sel(sig.DCGM_FB_USED)), on=("node",))


def _memory_pressure(ctx: Context) -> Expr | None:
    if not ctx.dcgm or not any(modes.watch(c).memory_pressure for c in ctx.classes):
        return None
    return cmp(sel(GPU_MEMORY_RATIO), ">", sel(CLASS_MEMORY_PRESSURE), on=("class",), group_left=())


def _sharing_with(ctx: Context, flag: Callable[[modes.Watch], bool]) -> Matcher | None:
    shared = sorted({c.mode_name for c in ctx.classes if flag(modes.watch(c))})
    return one_of("sharing", shared) if shared else None


def _pod_over_budget(ctx: Context) -> Expr | None:
    sharing = _sharing_with(ctx, lambda w: w.pod_memory_budget) if ctx.per_pod else None
    if sharing is None:
        return None
    return cmp(sel(POD_MEMORY_USED, sharing), ">", sel(CLASS_SLOT_MEMORY), on=("class", "GPU_I_PROFILE"),
               group_left=())


def _compute_hog(ctx: Context) -> Expr | None:
    sharing = _sharing_with(ctx, lambda w: w.compute_hog) if ctx.per_pod else None
    if sharing is None:
        return None
    hog = cmp(sel(POD_UTILIZATION, sharing), ">", number(ratio(ctx.settings.thresholds.pod_compute_share)))
    shared = cmp(aggregate("count", sel(POD_UTILIZATION), ("node", "UUID")), ">", number(1))
    return and_(hog, shared, on=("node", "UUID"))


def _idle_memory(ctx: Context) -> Expr | None:
    if not ctx.dcgm:
        return None
    thresholds = ctx.settings.thresholds
    holding = cmp(sel(GPU_MEMORY_RATIO), ">=", number(ratio(thresholds.idle_memory)))
    idle = cmp(call("avg_over_time", sel(GPU_SM_ACTIVE).over("1h")), "<", number(ratio(thresholds.idle_sm_activity)))
    return and_(holding, idle, on=sig.DCGM_DEVICE)


# ----------------------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class AlertSpec:
    name: str
    group: str
    severity: str
    for_: str | None
    summary: str
    description: str
    build: Callable[[Context], Expr | None]
    per_class: bool = False
    """Its expression spells out each class in scope (and so grows with the fleet)."""


_NODES, _WORKLOADS, _WEBHOOK, _USAGE = "gpupolicy.nodes", "gpupolicy.workloads", "gpupolicy.webhook", "gpupolicy.usage"
_POLICIES = "gpupolicy.admission-policies"
#: A GPU or a MIG instance of it, in an annotation (GPU_I_PROFILE is empty on a whole GPU).
_DEVICE = ("{{ if $labels.GPU_I_PROFILE }}MIG instance {{ $labels.GPU_I_PROFILE }} of {{ end }}"
           "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.node }}")

ALERTS: tuple[AlertSpec, ...] = (
    AlertSpec(
        "GPUPolicyAllocatableDrift", _NODES, "warning", "15m",
        "{{ $labels.node }} advertises a different amount of {{ $labels.resource }} than class {{ $labels.class }} "
        "promises",
        "Node {{ $labels.node }} (class {{ $labels.class }}) advertises {{ $value }} {{ $labels.resource }} (when "
        "it advertises none at all, the value shown is the amount expected). The device-plugin config has not "
        "reached the node, the node selects another config, or its MIG layout is not applied.",
        _allocatable_drift),
    AlertSpec(
        "GPUPolicyUnexpectedGPUResource", _NODES, "warning", "15m",
        "{{ $labels.node }} advertises {{ $labels.resource }}, which class {{ $labels.class }} does not offer",
        "Node {{ $labels.node }} (class {{ $labels.class }}) advertises {{ $value }} {{ $labels.resource }}, a "
        "resource no compiled config gives it: another device plugin runs there, whole GPUs were left beside "
        "MIG instances, or renameByDefault differs. Pods asking for it bypass the class's sharing.",
        _unexpected_resource),
    AlertSpec(
        "GPUPolicyUnmanagedGPUNode", _NODES, "info", "30m",
        "GPU node {{ $labels.node }} belongs to no node class",
        "Node {{ $labels.node }} has NVIDIA GPUs but matches no class's nodeSelector, so no compiled config "
        "runs there and admission reasons about classes that do not include it. Add a class, or label the node "
        "like the class it belongs to.",
        unmanaged_nodes),
    AlertSpec(
        "GPUPolicyClassWithoutNodes", _NODES, "warning", "30m",
        "No node matches class {{ $labels.class }}",
        "Class {{ $labels.class }} declares {{ $value }} node(s) but no node carries its nodeSelector labels. A "
        "label it selects by was renamed or rewritten (the product label gains -SHARED once sharing starts), "
        "or kube-state-metrics does not export it (its --metric-labels-allowlist).",
        _class_without_nodes),
    AlertSpec(
        "GPUPolicySharingLabelDrift", _NODES, "warning", "15m",
        "{{ $labels.node }} lacks {{ $labels.label }}={{ $labels.expected }} (class {{ $labels.class }})",
        "GPU Feature Discovery has not labelled node {{ $labels.node }} of class {{ $labels.class }} with "
        "{{ $labels.label }}={{ $labels.expected }}: the class's sharing config is not live there (the product "
        "gets -SHARED and the replicas count only once it is), GPU Feature Discovery runs without the config, "
        "or kube-state-metrics does not export the label.",
        _sharing_label_drift, per_class=True),
    AlertSpec(
        "GPUPolicyNodeLabelMissing", _NODES, "warning", "15m",
        "{{ $labels.node }} lacks {{ $labels.label }}={{ $labels.expected }} (class {{ $labels.class }})",
        "Node {{ $labels.node }} of class {{ $labels.class }} does not carry {{ $labels.label }}="
        "{{ $labels.expected }}, a label the compiled output needs on it and that the node-label reconciler, the "
        "GPU Operator or GPU Feature Discovery sets (REPORT.md, Node labels, says which): without it the "
        "operator picks no device-plugin config, the MIG manager applies no layout, or the MPS daemon stays off.",
        _node_label_missing, per_class=True),
    AlertSpec(
        "GPUPolicyNodeLabelConflict", _NODES, "warning", "15m",
        "Another writer holds {{ $labels.key }} on {{ $labels.node }}",
        "The node-label reconciler owns {{ $labels.key }} on {{ $labels.node }}, but another writer (a person, a "
        "node pool's template, another controller) set it to another value, and the reconciler leaves it alone "
        "rather than fight: the node runs with a label its class does not want.",
        _label_conflict),
    AlertSpec(
        "GPUPolicyNodeLabelReconcilerFailing", _NODES, "warning", "15m",
        "The node-label reconciler in {{ $labels.namespace }} is failing",
        "The node-label reconciler {{ if $labels.verb }}keeps failing API calls ({{ $labels.verb }}){{ else }}is "
        "not running{{ end }}: new nodes get no device-plugin config or MIG layout label, and labels changed by "
        "hand are not put back.",
        _reconciler_failing),
    AlertSpec(
        "GPUPolicyMIGReconfigFailed", _NODES, "critical", "5m",
        "MIG reconfiguration failed on {{ $labels.node }}",
        "mig-manager set nvidia.com/mig.config.state=failed on {{ $labels.node }}: the node does not offer the "
        "MIG layout of its class, and its GPU pods may not start.",
        _mig_failed),
    AlertSpec(
        "GPUPolicyMIGReconfigStuck", _NODES, "warning", "30m",
        "MIG reconfiguration of {{ $labels.node }} does not finish",
        "nvidia.com/mig.config.state on {{ $labels.node }} has been pending or rebooting for 30 minutes: a GPU "
        "client is probably still running, or mig-manager is wedged.",
        _mig_stuck),
    AlertSpec(
        "GPUPolicyDevicePluginRolloutStuck", _NODES, "critical", "15m",
        "DaemonSet {{ $labels.namespace }}/{{ $labels.daemonset }} does not finish rolling out",
        "{{ $labels.namespace }}/{{ $labels.daemonset }} (the device plugin, or the MPS daemon, MIG manager or "
        "GPU Feature Discovery beside it) has pods that are not updated or not available, and nothing has "
        "changed for 10 minutes: those nodes keep their old sharing config.",
        _rollout_stuck),
    AlertSpec(
        "GPUPolicyDevicePluginNotRegistered", _NODES, "critical", PLUGIN_REGISTERED_GRACE,
        "The device plugin runs on {{ $labels.node }} but it advertises no {{ $labels.resource }}",
        "The device-plugin pod on {{ $labels.node }} (class {{ $labels.class }}) is Running, yet the node "
        "advertises no {{ $labels.resource }}: the plugin is hung, failed to start NVML (failOnInitError: false "
        "keeps it running idle), or never registered with the kubelet.",
        _plugin_not_registered),
    AlertSpec(
        "GPUPolicyGPUsUnhealthy", _NODES, "warning", "15m",
        "{{ $value }} {{ $labels.resource }} unhealthy on {{ $labels.node }}",
        "The device plugin marked {{ $value }} {{ $labels.resource }} of node {{ $labels.node }} (class "
        "{{ $labels.class }}) unhealthy, usually after an XID error: capacity stays, allocatable drops.",
        _gpus_unhealthy),
    AlertSpec(
        "GPUPolicyKubeletRejectedGPUPod", _WORKLOADS, "warning", "1m",
        "The kubelet rejected GPU pod {{ $labels.namespace }}/{{ $labels.pod }}",
        "The kubelet failed {{ $labels.namespace }}/{{ $labels.pod }} with UnexpectedAdmissionError: the device "
        "plugin refused its request (usually more than one shared replica) or did not answer. A request the "
        "webhook denies got past admission: it failed open, or the namespace is excluded.",
        _kubelet_rejected),
    AlertSpec(
        "GPUPolicyGPUPodUnschedulable", _WORKLOADS, "warning", "30m",
        "GPU pod {{ $labels.namespace }}/{{ $labels.pod }} has been unschedulable for 30 minutes",
        "No node can take {{ $labels.namespace }}/{{ $labels.pod }}: the GPUs it asks for are all allocated, or "
        "no node advertises them (a config that never rolled out).",
        _pod_unschedulable),
    AlertSpec(
        "GPUPolicyGPURolloutBlocked", _WORKLOADS, "warning", "30m",
        "Deployment {{ $labels.namespace }}/{{ $labels.deployment }} is stuck behind Pending GPU pods",
        "{{ $value }} GPU pod(s) of {{ $labels.namespace }}/{{ $labels.deployment }} are Pending and the "
        "Deployment has not updated all its replicas: the rollout waits for GPU slots and the old ReplicaSet "
        "keeps serving the previous version.",
        _rollout_blocked),
    AlertSpec(
        "GPUPolicyWebhookUnavailable", _WEBHOOK, "critical", "5m",
        "The API server cannot use the gpupolicy admission webhook {{ $labels.name }}",
        "Calls to webhook {{ $labels.name }} fail. With failurePolicy Fail, new GPU workloads are refused; with "
        "Ignore, they are admitted unchecked. Workloads without GPUs are not affected.",
        _webhook_unavailable),
    AlertSpec(
        "GPUPolicyWebhookSlow", _WEBHOOK, "warning", "10m",
        "The gpupolicy webhook {{ $labels.name }} answers slowly",
        "The p99 latency of webhook {{ $labels.name }}, as the API server measures it, is "
        "{{ $value | humanizeDuration }}. Past the webhook's timeoutSeconds the API server applies its "
        "failurePolicy.",
        _webhook_slow),
    AlertSpec(
        "GPUPolicyAdmissionPolicyErrors", _POLICIES, "warning", "10m",
        "The API server cannot evaluate the ValidatingAdmissionPolicy {{ $labels.policy }}",
        "Evaluations of {{ $labels.policy }} (binding {{ $labels.policy_binding }}) end in an error, not a "
        "verdict: the CEL ran out of its cost budget on a large pod, or does not compile on this API server. Its "
        "failurePolicy decides those requests: Ignore beside the webhook, which then decides alone; "
        "admission.failurePolicy with admission.engine vap; Fail for the tenancy guard, so a namespace label "
        "change it cannot evaluate is refused.",
        _admission_policy_errors),
    AlertSpec(
        "GPUPolicyWebhookInternalErrors", _WEBHOOK, "warning", None,
        "The gpupolicy webhook {{ $labels.pod }} hit an unexpected error",
        "{{ $labels.pod }} caught {{ $value }} unexpected exception(s) in 10 minutes and denied those requests "
        "(fail-closed). Every one is a bug: collect the pod's log and report it.",
        _webhook_counter(sig.WEBHOOK_INTERNAL_ERRORS, "10m")),
    AlertSpec(
        "GPUPolicyWebhookReplicasUnavailable", _WEBHOOK, "warning", "15m",
        "The gpupolicy webhook runs fewer replicas than it should",
        "{{ $labels.namespace }}/{{ $labels.deployment }} has {{ $value }} available replica(s), fewer than "
        "desired. At zero, the API server fails every GPU workload (failurePolicy Fail) or admits it unchecked.",
        _webhook_replicas),
    AlertSpec(
        "GPUPolicyWebhookCertificateExpiring", _WEBHOOK, "warning", "1h",
        "The gpupolicy webhook's serving certificate expires soon",
        "{{ $labels.pod }} serves a certificate that expires in {{ $value | humanizeDuration }}. cert-manager "
        "renews it 30 days ahead: check the Certificate and the webhook's certificate reloads.",
        _certificate_expiring),
    AlertSpec(
        "GPUPolicyWebhookCertificateReloadFailing", _WEBHOOK, "warning", None,
        "The gpupolicy webhook {{ $labels.pod }} cannot load its rotated certificate",
        "{{ $labels.pod }} keeps serving its previous certificate: the mounted Secret holds a pair it cannot "
        "read.",
        _webhook_counter(sig.WEBHOOK_CERT_RELOADS, "15m", eq("outcome", "failure"))),
    AlertSpec(
        "GPUPolicyReloadFailing", _WEBHOOK, "warning", None,
        "The gpupolicy webhook {{ $labels.pod }} cannot load the compiled admission policy",
        "{{ $labels.pod }} keeps enforcing its last good policy; the policy ConfigMap it mounts cannot be read.",
        _webhook_counter(sig.WEBHOOK_POLICY_RELOAD_FAILURES, "15m")),
    AlertSpec(
        "GPUPolicyReplicasDisagree", _WEBHOOK, "warning", "15m",
        "gpupolicy webhook replicas enforce different policies",
        "Webhook replicas in {{ $labels.namespace }} have served {{ $value }} different policies for 15 "
        "minutes: a rollout of the webhook or of its policy ConfigMap is stuck.",
        _replicas_disagree),
    AlertSpec(
        "GPUPolicyWebhookNodeCacheUnsynced", _WEBHOOK, "warning", "10m",
        "The gpupolicy webhook {{ $labels.pod }} has no synced node cache",
        "The node cache of {{ $labels.pod }} has not been synced for 10 minutes: it cannot list or watch Nodes "
        "(RBAC, the API server out of reach, egress). Until it syncs, a pod naming its node (spec.nodeName) is "
        "judged on every class it may reach instead of its node's, and may be denied for what another class "
        "forbids.",
        _node_cache_unsynced),
    AlertSpec(
        "GPUPolicyDeniesSurge", _WEBHOOK, "info", None,
        "Many GPU workloads denied by rule {{ $labels.rule }}",
        "{{ $value }} denials by {{ $labels.rule }} in 15 minutes; often a chart or image that changed its GPU "
        "requests. Run `gpupolicy admit` on the manifests to see why.",
        _denies_surge),
    AlertSpec(
        "GPUPolicyDCGMMetricsMissing", _USAGE, "warning", "30m",
        "No dcgm-exporter metrics from GPU node {{ $labels.node }}",
        "Node {{ $labels.node }} (class {{ $labels.class }}) has no DCGM series with a node label, so the GPU "
        "memory and SM activity alerts cannot see it: dcgm-exporter does not run there, is not scraped, or its "
        "ServiceMonitor lacks the node relabeling.",
        _dcgm_missing),
    AlertSpec(
        "GPUPolicySharedGPUMemoryPressure", _USAGE, "warning", "10m",
        "Shared GPU memory {{ $value | humanizePercentage }} full on {{ $labels.node }}",
        _DEVICE + " (class {{ $labels.class }}, {{ $labels.sharing }}) has had {{ $value | humanizePercentage }} "
        "of its memory in use for 10 minutes, past what the class's sizing leaves free. Its pods share that "
        "memory: the next allocation fails with out of memory, in whichever pod makes it.",
        _memory_pressure),
    AlertSpec(
        "GPUPolicyPodOverSliceMemory", _USAGE, "warning", "15m",
        "Pod {{ $labels.namespace }}/{{ $labels.pod }} uses more GPU memory than its slot's budget",
        "{{ $labels.namespace }}/{{ $labels.pod }} has used {{ $value }} MiB of " + _DEVICE + " (class "
        "{{ $labels.class }}) for 15 minutes, more than the memory per slot the class was sized for. Nothing "
        "enforces that budget between pods sharing a device: the others get less than they were promised.",
        _pod_over_budget),
    AlertSpec(
        "GPUPolicySharedGPUComputeHog", _USAGE, "warning", "15m",
        "Pod {{ $labels.namespace }}/{{ $labels.pod }} takes {{ $value | humanizePercentage }} of a shared GPU",
        "{{ $labels.namespace }}/{{ $labels.pod }} has kept the SMs of " + _DEVICE + " (class {{ $labels.class }}) "
        "{{ $value | humanizePercentage }} busy for 15 minutes while other pods share the GPU: time-slicing "
        "gives them what is left, so their latency suffers.",
        _compute_hog),
    AlertSpec(
        "GPUPolicyIdleGPUMemory", _USAGE, "info", "1h",
        "GPU memory held with idle SMs on {{ $labels.node }}",
        _DEVICE + " (class {{ $labels.class }}) has {{ $value | humanizePercentage }} of its memory in use, yet "
        "its SMs have been almost idle for two hours. Memory in use is not GPU use: its slots are taken and "
        "nothing runs on them.",
        _idle_memory),
)


def alerts(ctx: Context, *, per_class: bool | None = None) -> list[Alert]:
    """The catalogue's alerts that apply to this policy, in catalogue order; only the per-class ones, or only the
    others, when asked."""
    out = []
    for spec in ALERTS:
        if per_class is not None and spec.per_class != per_class:
            continue
        expr = spec.build(ctx)
        if expr is not None:
            out.append(Alert(spec.name, spec.group, spec.severity, spec.for_, spec.summary, spec.description, expr))
    return out


def runbook_url(settings: Monitoring, alert: str) -> str:
    """The runbook section of an alert: its name in lowercase is the Markdown heading's anchor."""
    return f"{settings.runbook_url}#{alert.lower()}"
