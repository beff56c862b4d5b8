"""Every example's compiled tree, applied to a real kube-apiserver the way Argo CD and Flux apply it: kustomize
builds it, server-side apply stores it.  The API server validates each object at its own version (schemas,
defaulting, immutable selectors, CEL of the policies, the CRDs' structural schemas with strict field
validation), so: no error, no field dropped, and a second apply of the same tree changes nothing.

The root kustomization needs cert-manager's kinds; monitoring/ (applied on its own, like the monitoring stack
would) needs the Prometheus Operator's, flux/ Flux's: their CRDs (tests/kube/crds.py) are applied first, as the
operators' installations would have.  Each example gets an API server of its own: the trees share names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crds
import pytest
import yaml
from kube_api import KubeAPI, running_api_server
from kube_cases import EXAMPLES, Obj, ensure_namespace

pytestmark = [pytest.mark.kube_api, pytest.mark.slow]

TREES = sorted(p.parent.parent.name for p in EXAMPLES.glob("*/out/kustomization.yaml"))
#: the parts of a tree applied on their own, by the stack that owns their CRDs (docs/ci-and-gitops.md)
APART = ("monitoring", "flux")
MANAGER = "gpupolicy-gitops"
#: namespaces a tree writes into without creating them, each made by whoever owns it before the tree applies
OTHERS_NAMESPACES = {
    "kube-system": "Kubernetes",
    "default": "Kubernetes (events about a Node, a cluster-scoped object, are recorded there)",
    "flux-system": "Flux's installation (the HelmRelease and values ConfigMaps of out/flux)",
    "gpu-operator": "the GPU Operator's Helm release, whose ClusterPolicy the tree's config sits beside",
}


@dataclass
class Applied:
    cluster: str
    api: KubeAPI
    parts: dict[str, list[Obj]]  # root, monitoring, flux -> the objects kustomize built
    first: dict[str, str]  # object key -> resourceVersion after the first apply
    outputs: dict[str, str]  # part -> kubectl's output of the first apply


def key(obj: Obj) -> str:
    metadata = obj["metadata"]
    return f"{obj['apiVersion']}/{obj['kind']}/{metadata.get('namespace', '')}/{metadata['name']}"


def build(api: KubeAPI, directory: Path) -> list[Obj]:
    built = api.kubectl("kustomize", str(directory)).stdout
    return [d for d in yaml.safe_load_all(built) if d]


def apply(api: KubeAPI, objects: list[Obj]) -> str:
    # --validate=strict: an unknown or duplicated field is an error, not a warning (nothing pruned in silence)
    return api.kubectl("apply", "--server-side", f"--field-manager={MANAGER}", "--validate=strict", "-f", "-",
                       input=yaml.safe_dump_all(objects, sort_keys=True)).stdout


def stored(api: KubeAPI, objects: list[Obj]) -> dict[str, Obj]:
    answer = json.loads(api.kubectl("get", "-o", "json", "--show-managed-fields", "-f", "-",
                                    input=yaml.safe_dump_all(objects)).stdout)
    items = answer["items"] if answer.get("kind") == "List" else [answer]
    return {key(item): item for item in items}


def parts(cluster: str, api: KubeAPI) -> dict[str, list[Obj]]:
    out = EXAMPLES / cluster / "out"
    found = {"root": build(api, out)}
    for part in APART:
        if (out / part / "kustomization.yaml").is_file():
            found[part] = build(api, out / part)
    return found


def tenant_namespaces(cluster: str) -> set[str]:
    """The tenants' own namespaces, which hold their DRA claim templates and quota (docs/dra.md): the teams make
    them, so the test does, as for the others' namespaces."""
    from policy.load import load_policy
    from policy.resolved import dra

    path = EXAMPLES / cluster / "cluster.yaml"
    policy = load_policy(path.read_text(encoding="utf-8"), filename=str(path)).policy
    assert policy is not None
    return {ns for tenant in policy.spec.tenants for ns in dra.named_namespaces(tenant)}


@pytest.fixture(scope="module", params=TREES)
def applied(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Applied]:
    cluster: str = request.param
    with running_api_server(tmp_path_factory.mktemp(f"tree-{cluster}")) as api:
        api.kubectl("apply", "--server-side", "--field-manager=operators", "-f", "-",
                    input=yaml.safe_dump_all(crds.ALL, sort_keys=True))
        api.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        built = parts(cluster, api)
        created = {o["metadata"]["name"] for objects in built.values() for o in objects if o["kind"] == "Namespace"}
        used = {o["metadata"]["namespace"] for objects in built.values() for o in objects
                if o["metadata"].get("namespace")}
        assert used - created <= set(OTHERS_NAMESPACES) | tenant_namespaces(cluster), used - created
        for namespace in sorted(used - created - {"kube-system", "default"}):
            ensure_namespace(api, namespace, {})
        outputs = {part: apply(api, objects) for part, objects in built.items()}
        first = {k: o["metadata"]["resourceVersion"] for objects in built.values()
                 for k, o in stored(api, objects).items()}
        yield Applied(cluster, api, built, first, outputs)


def test_every_object_of_the_tree_is_stored(applied: Applied) -> None:
    for part, objects in applied.parts.items():
        lines = applied.outputs[part].splitlines()
        assert len(lines) == len(objects), (part, lines)
        assert all(line.endswith(" serverside-applied") for line in lines), lines
    assert sorted(applied.first) == sorted(key(o) for objects in applied.parts.values() for o in objects)


def test_no_field_of_the_tree_is_dropped_or_changed(applied: Applied) -> None:
    for objects in applied.parts.values():
        server = stored(applied.api, objects)
        for obj in objects:
            problems = differences(obj, server[key(obj)])
            assert problems == [], (key(obj), problems)


def test_a_second_apply_of_the_same_tree_changes_nothing(applied: Applied) -> None:
    for objects in applied.parts.values():
        apply(applied.api, objects)
    after = {k: o["metadata"]["resourceVersion"] for objects in applied.parts.values()
             for k, o in stored(applied.api, objects).items()}
    changed = sorted(k for k in after if after[k] != applied.first[k])
    # an empty list the server does not store (omitempty) would be written again on each apply: the compiler
    # leaves such fields out (the NetworkPolicy's egress, which this test found)
    assert changed == [], changed


def test_the_tree_is_owned_by_its_field_manager_alone(applied: Applied) -> None:
    # server-side apply records who owns what: everything the tree sets is the GitOps tool's, so a later edit by
    # another manager is a conflict it is told about, not a silent overwrite
    for objects in applied.parts.values():
        for k, obj in stored(applied.api, objects).items():
            managers = {m["manager"] for m in obj["metadata"].get("managedFields", []) if m["operation"] == "Apply"}
            assert managers == {MANAGER}, (k, managers)


def differences(mine: Any, theirs: Any, path: str = "") -> list[str]:
    """Where the stored object lacks or alters what the manifest says (the server may add defaults, never drop).

    A quantity written as a number comes back as its canonical string (`1` -> "1"); that is the same value."""
    if isinstance(mine, dict):
        if not isinstance(theirs, dict):
            return [f"{path}: {type(theirs).__name__} instead of an object"]
        return [p for k, v in mine.items()
                for p in (differences(v, theirs[k], f"{path}.{k}") if k in theirs else [f"{path}.{k}: dropped"])]
    if isinstance(mine, list):
        if not isinstance(theirs, list) or len(theirs) != len(mine):
            return [f"{path}: {theirs!r} instead of {mine!r}"]
        return [p for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) for p in differences(a, b, f"{path}[{i}]")]
    if mine == theirs or (isinstance(mine, int) and not isinstance(mine, bool) and theirs == str(mine)):
        return []
    return [f"{path}: {theirs!r} instead of {mine!r}"]
