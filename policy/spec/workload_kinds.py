"""The built-in table of workload custom resources: where each kind carries its pod templates, from its CRD source.

Each entry cites the Go type that defines the fields it names (repository, path, release tag). A spec adds kinds,
or replaces one of these by group and kind, in ``admission.workloadKinds`` (``merged``).
"""

from __future__ import annotations

from collections.abc import Sequence

from policy.spec.model import ContainerRef, GpuKey, PodTemplateRef, WorkloadKind


def _kind(group: str, kind: str, resource: str, versions: Sequence[str], paths: Sequence[str | PodTemplateRef],
          source: str) -> WorkloadKind:
    templates = tuple(p if isinstance(p, PodTemplateRef) else PodTemplateRef(path=p) for p in paths)
    return WorkloadKind(group=group, kind=kind, resource=resource, versions=tuple(versions), templates=templates,
                        source=source)


def _ray(prefix: str) -> tuple[str, ...]:
    # RayClusterSpec: headGroupSpec.template and workerGroupSpecs[].template are core PodTemplateSpecs.
    return (f"{prefix}.headGroupSpec.template.spec", f"{prefix}.workerGroupSpecs[*].template.spec")


# KServe PredictorSpec inlines a PodSpec and adds one container per model format (each a PredictorExtensionSpec
# that inlines a core Container), plus model (ModelSpec) and workerSpec (multi-node, a PodSpec).
_KSERVE_FORMATS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
                   "lightgbm", "paddle")
_KSERVE_PREDICTOR = PodTemplateRef(
    path="spec.predictor",
    containers=tuple(ContainerRef(path=f, name="kserve-container") for f in _KSERVE_FORMATS))

# Argo's Template: nodeSelector, affinity and tolerations at the template, the main container under container or
# script (named main), containerSet.containers, sidecars beside it, initContainers before it, and podSpecPatch.
# The pod spec fields a Template writes itself (the rest of its fields are Argo's: inputs, outputs, steps, ...).
_ARGO_SPEC_FIELDS = ("nodeSelector", "affinity", "tolerations", "schedulerName", "priorityClassName",
                     "securityContext", "serviceAccountName", "automountServiceAccountToken", "hostAliases",
                     "initContainers", "activeDeadlineSeconds", "volumes")
_ARGO_TEMPLATE = PodTemplateRef(
    path="spec.templates[*]",
    containers=(ContainerRef(path="container", name="main"), ContainerRef(path="script", name="main"),
                ContainerRef(path="containerSet.containers[*]"), ContainerRef(path="sidecars[*]")),
    pod_spec_patch="podSpecPatch", spec_fields=_ARGO_SPEC_FIELDS)

_ARGO = "argoproj/argo-workflows pkg/apis/workflow/v1alpha1/workflow_types.go (Template, UserContainer) @v3.6.2"
_KUBEFLOW = "kubeflow/training-operator pkg/apis/kubeflow.org/v1/{}_types.go (ReplicaSpec.template) @v1.9.0"
_TRAINER = "kubeflow/trainer pkg/apis/trainer/v1alpha1/{} @v2.0.0"

DEFAULT_WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (
    _kind("serving.kserve.io", "InferenceService", "inferenceservices", ("v1beta1",),
          (_KSERVE_PREDICTOR, "spec.predictor.workerSpec", "spec.transformer",
           PodTemplateRef(path="spec.explainer", containers=(ContainerRef(path="art", name="kserve-container"),))),
          "kserve/kserve pkg/apis/serving/v1beta1/inference_service.go, predictor.go, transformer.go, "
          "explainer.go @v0.15.0"),
    _kind("serving.kserve.io", "LLMInferenceService", "llminferenceservices", ("v1alpha1", "v1alpha2"),
          ("spec.template", "spec.worker", "spec.prefill.template", "spec.prefill.worker"),
          "kserve/kserve pkg/apis/serving/v1alpha1/llm_inference_service_types.go (WorkloadSpec: template, worker; "
          "prefill) @v0.16.0"),
    _kind("apps.nvidia.com", "NIMService", "nimservices", ("v1alpha1",),
          (PodTemplateRef(path="spec", containers=(ContainerRef(path=".", name="nim"),),
                          spec_fields=("nodeSelector", "tolerations", "affinity")),),
          "NVIDIA/k8s-nim-operator api/apps/v1alpha1/nimservice_types.go (NIMServiceSpec: resources, nodeSelector, "
          "tolerations, affinity) @v2.0.0"),
    _kind("nvidia.com", "DynamoGraphDeployment", "dynamographdeployments", ("v1alpha1", "v1beta1"),
          (PodTemplateRef(
              path="spec.services.*", pod_spec="extraPodSpec",
              containers=(ContainerRef(path="extraPodSpec.mainContainer", name="main"),),
              gpu_keys=(GpuKey(path="resources.limits.gpu", field="limits",
                               meaning="whole GPUs per pod of the component, set as the main container's "
                                       "nvidia.com/gpu limit"),
                        GpuKey(path="resources.requests.gpu", field="requests",
                               meaning="whole GPUs per pod of the component, set as the main container's "
                                       "nvidia.com/gpu request"))),
           # nvidia.com/v1beta1 writes each component's pod template as a core PodTemplateSpec
           "spec.components[*].podTemplate.spec"),
          "ai-dynamo/dynamo deploy/cloud/operator/api/v1alpha1/dynamocomponentdeployment_types.go "
          "(DynamoComponentDeploymentSharedSpec: resources, extraPodSpec.mainContainer) @v0.5.0; v1beta1 "
          "spec.components[].podTemplate as examples/backends/vllm/deploy/v1beta1/agg_snapshot_tp8.yaml @42cdd28f "
          "writes it"),
    _kind("kubeflow.org", "PyTorchJob", "pytorchjobs", ("v1",), ("spec.pytorchReplicaSpecs.*.template.spec",),
          _KUBEFLOW.format("pytorch")),
    _kind("kubeflow.org", "TFJob", "tfjobs", ("v1",), ("spec.tfReplicaSpecs.*.template.spec",),
          _KUBEFLOW.format("tensorflow")),
    _kind("kubeflow.org", "MPIJob", "mpijobs", ("v1", "v2beta1"), ("spec.mpiReplicaSpecs.*.template.spec",),
          _KUBEFLOW.format("mpi") + "; kubeflow/mpi-operator pkg/apis/kubeflow/v2beta1/types.go @v0.6.0"),
    _kind("trainer.kubeflow.org", "TrainJob", "trainjobs", ("v1alpha1",),
          # Trainer has no placement fields of its own (those are the runtime's, or podTemplateOverrides')
          (PodTemplateRef(path="spec", pod_spec="trainer", spec_fields=(), containers=(
              ContainerRef(path="trainer", name="node", resources="resourcesPerNode"),)),),
          _TRAINER.format("trainjob_types.go (Trainer.resourcesPerNode)")),
    _kind("trainer.kubeflow.org", "TrainingRuntime", "trainingruntimes", ("v1alpha1",),
          ("spec.template.spec.replicatedJobs[*].template.spec.template.spec",),
          _TRAINER.format("trainingruntime_types.go (JobSetTemplateSpec)")),
    _kind("trainer.kubeflow.org", "ClusterTrainingRuntime", "clustertrainingruntimes", ("v1alpha1",),
          ("spec.template.spec.replicatedJobs[*].template.spec.template.spec",),
          _TRAINER.format("trainingruntime_types.go (JobSetTemplateSpec)")),
    _kind("ray.io", "RayCluster", "rayclusters", ("v1",), _ray("spec"),
          "ray-project/kuberay ray-operator/apis/ray/v1/raycluster_types.go @v1.4.0"),
    _kind("ray.io", "RayJob", "rayjobs", ("v1",), (*_ray("spec.rayClusterSpec"), "spec.submitterPodTemplate.spec"),
          "ray-project/kuberay ray-operator/apis/ray/v1/rayjob_types.go @v1.4.0"),
    _kind("ray.io", "RayService", "rayservices", ("v1",), _ray("spec.rayClusterConfig"),
          "ray-project/kuberay ray-operator/apis/ray/v1/rayservice_types.go @v1.4.0"),
    _kind("argoproj.io", "Workflow", "workflows", ("v1alpha1",), (_ARGO_TEMPLATE,), _ARGO),
    _kind("argoproj.io", "WorkflowTemplate", "workflowtemplates", ("v1alpha1",), (_ARGO_TEMPLATE,), _ARGO),
    _kind("argoproj.io", "ClusterWorkflowTemplate", "clusterworkflowtemplates", ("v1alpha1",), (_ARGO_TEMPLATE,),
          _ARGO),
    _kind("argoproj.io", "CronWorkflow", "cronworkflows", ("v1alpha1",),
          (PodTemplateRef(path="spec.workflowSpec.templates[*]", containers=_ARGO_TEMPLATE.containers,
                          pod_spec_patch="podSpecPatch", spec_fields=_ARGO_SPEC_FIELDS),),
          "argoproj/argo-workflows pkg/apis/workflow/v1alpha1/cron_workflow_types.go (workflowSpec) @v3.6.2"),
    _kind("serving.knative.dev", "Service", "services", ("v1",), ("spec.template.spec",),
          "knative/serving pkg/apis/serving/v1/service_types.go, configuration_types.go (RevisionTemplateSpec) "
          "@knative-v1.17.0"),
    _kind("serving.knative.dev", "Configuration", "configurations", ("v1",), ("spec.template.spec",),
          "knative/serving pkg/apis/serving/v1/configuration_types.go @knative-v1.17.0"),
    _kind("batch.volcano.sh", "Job", "jobs", ("v1alpha1",), ("spec.tasks[*].template.spec",),
          "volcano-sh/apis pkg/apis/batch/v1alpha1/job.go (TaskSpec.template) @v1.11.0"),
    _kind("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ("v1",),
          ("spec.leaderWorkerTemplate.leaderTemplate.spec", "spec.leaderWorkerTemplate.workerTemplate.spec"),
          "kubernetes-sigs/lws api/leaderworkerset/v1/leaderworkerset_types.go (LeaderWorkerTemplate) @v0.6.1"),
    _kind("jobset.x-k8s.io", "JobSet", "jobsets", ("v1alpha2",),
          ("spec.replicatedJobs[*].template.spec.template.spec",),
          "kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go (ReplicatedJob.template) @v0.8.0"),
)


def merged(added: Sequence[WorkloadKind]) -> tuple[WorkloadKind, ...]:
    """The built-in table with a spec's own kinds: one of the same group and kind replaces the built-in, in place;
    new ones follow, in the spec's order."""
    own = {(k.group, k.kind): k for k in added}
    table = [own.pop((k.group, k.kind), k) for k in DEFAULT_WORKLOAD_KINDS]
    return (*table, *own.values())
