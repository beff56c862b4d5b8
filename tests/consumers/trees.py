"""What a compiled tree hands each consumer: every device-plugin and mig-parted config file, with the release
that reads it and the environment it is read in, and what report.json (and the admission policy) promise for it.

Read from the files `gpupolicy compile` writes, never from the compiler's objects, so the tests see what Argo CD
or Flux would apply.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from harnesses import Consumers
from jsonschema import Draft202012Validator

from policy.hardware import operator

#: Environment the GPU Operator's device-plugin DaemonSet always sets, whatever the config file says
#: (NVIDIA/gpu-operator assets/state-device-plugin/0500_daemonset.yaml; env beats the file:
#: /work/shared/reference/device-plugin.md section 7). MIG_STRATEGY comes from the ClusterPolicy's mig.strategy.
OPERATOR_PLUGIN_ENV = {"PASS_DEVICE_SPECS": "true", "FAIL_ON_INIT_ERROR": "true", "DEVICE_LIST_STRATEGY": "envvar",
                       "DEVICE_ID_STRATEGY": "uuid", "MPS_ROOT": "/run/nvidia/mps"}
SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
_TAG = re.compile(r":(v\d+\.\d+\.\d+)(?:-[\w.]+)?$")


@dataclass(frozen=True)
class PluginConfig:
    """One device-plugin config file as one node class's plugin reads it."""

    tree: Path
    class_name: str
    release: str
    """The device-plugin release the spec targets (devicePlugin.version), checked against the image tag."""
    text: str
    env: dict[str, str]
    """The plugin container's environment: what overrides the file on the node."""
    source: str
    """Where the config and the env come from, for failure messages."""


@dataclass(frozen=True)
class MigConfig:
    """The mig-parted config file of a tree and the k8s-mig-manager release that applies it."""

    tree: Path
    release: str
    text: str
    source: str


@dataclass(frozen=True)
class Promise:
    """What the compiled tree says a class's plugin advertises (report.json, cross-checked with the admission
    policy where the tree has one)."""

    shared: dict[str, int]
    """Advertised resource -> replicas per device, for every resource with more than one replica."""
    sharing_strategy: str
    mig_strategy: str
    fail_requests_greater_than_one: bool | None
    """From the admission policy's offers; None when the tree has no admission policy ConfigMap."""
    mig_devices: dict[str, int]
    """MIG profile -> devices per node."""
    gpus_per_node: int
    mig_config: str | None
    """The nvidia.com/mig.config label value the class's nodes get."""


def documents(tree: Path, folder: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted((tree / folder).glob("*.yaml")):
        found.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict))
    return found


def spec_of(tree: Path) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((tree.parent / "cluster.yaml").read_text(encoding="utf-8"))["spec"]
    return spec


def report_of(tree: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((tree / "report.json").read_text(encoding="utf-8"))
    return report


def image_tag(image: str) -> str:
    match = _TAG.search(image)
    assert match, f"image {image} has no vX.Y.Z tag"
    return match[1]


def plugin_configs(tree: Path, spec: dict[str, Any] | None = None) -> list[PluginConfig]:
    """Every device-plugin config of the tree, once per DaemonSet container that runs `nvidia-device-plugin` with
    it (standalone), or once per ConfigMap key with the operator's env (deploy: gpu-operator)."""
    spec = spec if spec is not None else spec_of(tree)
    plugin = spec.get("devicePlugin", {})
    release = plugin.get("version")
    assert release, f"{tree.parent / 'cluster.yaml'} names no devicePlugin.version"
    configmaps = {d["metadata"]["name"]: d for d in documents(tree, "device-plugin") if d["kind"] == "ConfigMap"}
    found: list[PluginConfig] = []
    if plugin.get("deploy") == "gpu-operator":
        values = yaml.safe_load((tree / "gpu-operator-values.yaml").read_text(encoding="utf-8"))
        name = values["devicePlugin"]["config"]["name"]
        env = dict(OPERATOR_PLUGIN_ENV)
        if values.get("mig", {}).get("strategy"):
            env["MIG_STRATEGY"] = values["mig"]["strategy"]
        for key, text in sorted(configmaps[name]["data"].items()):
            source = f"{tree}/device-plugin ConfigMap {name} key {key}"
            found.append(PluginConfig(tree, key, release, text, env, source))
        return found
    for daemonset in documents(tree, "device-plugin"):
        if daemonset["kind"] != "DaemonSet":
            continue
        pod = daemonset["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            if container.get("command") != ["nvidia-device-plugin"]:
                continue  # the MPS control daemon and GFD validate differently (device-plugin.md section 3)
            assert image_tag(container["image"]) == release, (container["image"], release)
            args = [a for a in container.get("args", []) if a.startswith("--config-file=")]
            assert len(args) == 1, f"{daemonset['metadata']['name']}: one --config-file expected, got {args}"
            path = args[0].removeprefix("--config-file=")
            text = _mounted(path, container, volumes, configmaps)
            env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
            klass = daemonset["metadata"]["labels"]["gpupolicy.dev/node-class"]
            found.append(PluginConfig(tree, klass, release, text, env,
                                      f"{tree}/device-plugin DaemonSet {daemonset['metadata']['name']} ({path})"))
    return found


def _mounted(path: str, container: dict[str, Any], volumes: dict[str, Any], configmaps: dict[str, Any]) -> str:
    """The text a ConfigMap volume puts at `path` inside the container (items map keys to file names)."""
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        source = volumes[mount["name"]].get("configMap")
        assert source, f"{path} is mounted from {volumes[mount['name']]}, not a ConfigMap"
        relative = path.removeprefix(prefix)
        data = configmaps[source["name"]]["data"]
        items = {i["path"]: i["key"] for i in source.get("items", [])} or {k: k for k in data}
        text: str = data[items[relative]]
        return text
    raise AssertionError(f"nothing is mounted at {path}")


def mig_config(tree: Path, spec: dict[str, Any] | None = None) -> MigConfig | None:
    """The tree's mig-parted config and the k8s-mig-manager release applying it; None without MIG."""
    if not (tree / "mig").is_dir():
        return None
    spec = spec if spec is not None else spec_of(tree)
    [configmap] = [d for d in documents(tree, "mig") if d["kind"] == "ConfigMap"]
    managers = [c["image"] for d in documents(tree, "mig-manager") if d["kind"] == "DaemonSet"
                for c in d["spec"]["template"]["spec"]["containers"]]
    if managers:
        tags = {image_tag(i) for i in managers}
        assert len(tags) == 1, f"{tree}/mig-manager runs several releases: {sorted(tags)}"
        [release] = tags
        source = f"{tree}/mig-manager DaemonSets ({managers[0]})"
    else:  # the GPU Operator runs the MIG manager its release ships (GO@<tag>:deployments/gpu-operator/values.yaml)
        version = spec["devicePlugin"]["operator"]["version"]
        shipped = next(r for r in operator.RELEASES if r.version == version)
        release = image_tag(shipped.mig_manager_image)
        source = f"the MIG manager GPU Operator {version} ships ({shipped.mig_manager_image})"
    return MigConfig(tree, release, configmap["data"]["config.yaml"], f"{tree}/mig ConfigMap; {source}")


def promise(tree: Path, class_name: str, spec: dict[str, Any] | None = None) -> Promise:
    """What report.json says class_name's plugin advertises, with failRequestsGreaterThanOne from the admission
    policy when the tree has one."""
    report = report_of(tree)
    [entry] = [c for c in report["classes"] if c["name"] == class_name]
    after = entry["after"]
    # A claim-only DRA offer (report.json names its deviceClass: no extended-resource bridge) is no resource a pod
    # asks for, so the admission policy offers it to none; its MIG devices are still laid out.
    shared = {a["resource"]: a["replicas"] for a in after if a["replicas"] > 1 and "deviceClass" not in a}
    profiles = [a for a in after if a["migProfile"]]
    if not profiles:
        mig_strategy = "none"
    else:
        # One resource per MIG profile is the mixed strategy's naming; a DRA class's implicit extended resources
        # (one DeviceClass per profile, deviceclass.resource.kubernetes.io/<class>) name profiles apart the same way.
        per_profile = ("nvidia.com/mig-", "deviceclass.resource.kubernetes.io/")
        mig_strategy = "mixed" if all(a["resource"].startswith(per_profile) for a in profiles) else "single"
    strategy = "mps" if entry["mode"] == "mps" else "time-slicing" if shared else "none"
    mig_devices: Counter[str] = Counter()
    for a in profiles:
        mig_devices[a["migProfile"]] += a["devicesPerNode"]
    fail = None
    policy = tree / "admission" / "configmap-gpupolicy-admission-policy.yaml"
    if policy.is_file():
        data = json.loads(yaml.safe_load(policy.read_text(encoding="utf-8"))["data"]["admission-policy.json"])
        [klass] = [c for c in data["classes"] if c["name"] == class_name]
        flags = {o["fail_requests_greater_than_one"] for o in klass["offers"] if o["shared"]}
        assert len(flags) <= 1, f"{class_name}: offers disagree on failRequestsGreaterThanOne: {klass['offers']}"
        fail = flags.pop() if flags else None
        assert klass["mig_strategy"] == mig_strategy, (klass["mig_strategy"], mig_strategy)
        offered = {o["resource"]: o["replicas"] for o in klass["offers"] if o["replicas"] > 1}
        assert offered == shared, f"{class_name}: admission policy offers {offered}, report.json {shared}"
    return Promise(shared, strategy, mig_strategy, fail, dict(mig_devices), entry["gpusPerNode"],
                   entry["nodeLabels"].get("nvidia.com/mig.config"))


def accepted_by_schema(schema: str, text: str, release: str | None = None) -> bool:
    """Whether the hand-written consumer schema schemas/<schema> accepts a config file's text: as every release
    reads it, or, given `release`, as that release does (schema_for_release)."""
    document = json.loads((SCHEMAS / schema).read_text(encoding="utf-8"))
    if release is not None:
        document = schema_for_release(document, release)
    return not any(Draft202012Validator(document).iter_errors(yaml.safe_load(text)))


def _version(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.removeprefix("v").split("."))


def in_release(node: Any, release: str) -> bool:
    """Whether `release` reads what a schema node describes: its `x-since` (the first release that does, v0.12.0
    when unmarked) is not newer, and `x-except` (releases after that which refuse it all the same) does not name
    it."""
    if not isinstance(node, dict):
        return True
    return _version(node.get("x-since", "v0.0.0")) <= _version(release) and release not in node.get("x-except", ())


def schema_for_release(node: Any, release: str) -> Any:
    """The schema as `release` reads files: every property, anyOf/oneOf branch and enum value (`x-since-values`)
    the release does not read dropped (in_release), so additionalProperties: false refuses the key that release
    would silently ignore and the enum or the remaining branches refuse a value it refuses or mis-handles."""
    if isinstance(node, list):
        return [schema_for_release(item, release) for item in node]
    if not isinstance(node, dict):
        return node
    kept = {key: schema_for_release(value, release) for key, value in node.items()}
    if isinstance(node.get("properties"), dict):
        kept["properties"] = {name: schema_for_release(sub, release) for name, sub in node["properties"].items()
                              if in_release(sub, release)}
    for keyword in ("anyOf", "oneOf"):
        if isinstance(node.get(keyword), list):
            branches = [schema_for_release(b, release) for b in node[keyword] if in_release(b, release)]
            assert branches, f"every branch of {node} is newer than {release}: mark the property instead"
            kept[keyword] = branches
    if isinstance(node.get("x-since-values"), dict):
        since = node["x-since-values"]
        assert set(since) <= set(node["enum"]), f"x-since-values marks values outside the enum: {node}"
        kept["enum"] = [v for v in node["enum"] if _version(since.get(v, "v0.0.0")) <= _version(release)]
    return kept


def walk(schema: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Every subschema of a schema with the dotted path of the property it describes: through properties, $defs
    refs (the config's $defs nest without cycles), anyOf/oneOf branches and array items."""
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        node, at = stack.pop()
        if not isinstance(node, dict):
            continue
        yield node, at
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            stack.append((schema["$defs"][ref.removeprefix("#/$defs/")], at))
        stack.extend((branch, at) for keyword in ("anyOf", "oneOf") for branch in node.get(keyword) or ())
        if isinstance(node.get("items"), dict):
            stack.append((node["items"], at))
        stack.extend((sub, f"{at}.{name}" if at else name) for name, sub in (node.get("properties") or {}).items())


def since_marks(schema: dict[str, Any]) -> dict[str, str]:
    """Every property of a schema carrying `x-since`, by its dotted path, mapped to its release."""
    return {f"{at}.{name}" if at else name: sub["x-since"] for node, at in walk(schema)
            for name, sub in (node.get("properties") or {}).items() if isinstance(sub, dict) and "x-since" in sub}


@dataclass(frozen=True)
class ValueMark:
    """A value (an enum's, through `x-since-values`) or a form of values (an anyOf branch, by its title) that
    only some releases accept, at the dotted path of the property holding it."""

    path: str
    value: str
    since: str
    excepted: tuple[str, ...] = ()
    """Releases after `since` that refuse it all the same (x-except)."""


def value_marks(schema: dict[str, Any]) -> set[ValueMark]:
    """Every value mark of a schema: enum values in `x-since-values` and anyOf/oneOf branches carrying `x-since` or
    `x-except` (each named by its `title`)."""
    found: set[ValueMark] = set()
    for node, at in walk(schema):
        found.update(ValueMark(at, value, since) for value, since in (node.get("x-since-values") or {}).items())
        for branch in (*(node.get("anyOf") or ()), *(node.get("oneOf") or ())):
            if isinstance(branch, dict) and ("x-since" in branch or "x-except" in branch):
                assert branch.get("title"), f"a marked branch at {at} needs a title to be named by: {branch}"
                found.add(ValueMark(at, branch["title"], branch.get("x-since", "v0.12.0"),
                                    tuple(branch.get("x-except", ()))))
    return found


def mig_devices_per_node(entries: list[dict[str, Any]], gpus: int) -> dict[str, int]:
    """MIG devices per profile on a node of `gpus` GPUs after mig-parted applies `entries` (a selected config as
    the harness prints it): entries in order, GPUs in index order, the last entry naming a GPU wins
    (pkg/mig/config via cmd/nvidia-mig-parted/apply; /work/shared/reference/mig.md section 4)."""
    final: dict[int, dict[str, int]] = {}
    for entry in entries:
        assert not entry.get("device-filter"), "device filters need the node's PCI ids; gpupolicy writes none"
        indices = range(gpus) if entry["devices"] == "all" else [i for i in entry["devices"] if 0 <= i < gpus]
        for index in indices:
            final[index] = dict(entry["mig-devices"] or {}) if entry["mig-enabled"] else {}
    totals: Counter[str] = Counter()
    for layout in final.values():
        totals.update(layout)
    return {profile: n for profile, n in totals.items() if n}


# ---- the checks: a consumer loads the file, and what it makes of it is what the tree promised ----------------


def check_plugin_config(consumers: Consumers, config: PluginConfig, tmp_path: Path) -> None:
    """Load one config with its release's own code and compare the effective config with the tree's promise;
    a failure shows both views."""
    path = tmp_path / f"{config.class_name}.yaml"
    path.write_text(config.text, encoding="utf-8")
    result = consumers.device_plugin(config.release, path, config.env)
    promised = promise(config.tree, config.class_name)
    views = f"{config.source}, release {config.release}\nplugin: {result.describe()}\npromised: {promised}"
    assert result.returncode == 0, views
    summary = result.document["summary"]
    advertised = {r["advertised"]: r["replicas"] for r in summary["resources"] if r["replicas"] > 1}
    assert advertised == promised.shared, views
    assert summary["sharingStrategy"] == promised.sharing_strategy, views
    assert summary["migStrategy"] == promised.mig_strategy, views
    if promised.shared and promised.fail_requests_greater_than_one is not None:
        assert summary["failRequestsGreaterThanOne"] == promised.fail_requests_greater_than_one, views
    # The plugin drops a resources section and every rename but <name>.shared (DisableResourceNamingInConfig):
    # the compiled config must not rely on either.
    effective = result.document["config"]
    assert not (effective.get("resources") or {}).get("gpus") and not (effective.get("resources") or {}).get("mig")
    for r in summary["resources"]:
        assert r["advertised"] in (r["name"], r["name"] + ".shared"), views


def check_mig_config(consumers: Consumers, config: MigConfig, tmp_path: Path) -> None:
    """Parse the tree's mig-parted config as its MIG manager does and select every class's nvidia.com/mig.config."""
    path = tmp_path / "config.yaml"
    path.write_text(config.text, encoding="utf-8")
    report = report_of(config.tree)
    promises = {c["name"]: promise(config.tree, c["name"]) for c in report["classes"]}
    labelled = {name: p for name, p in promises.items() if p.mig_config}
    assert labelled, f"{config.source}: no class names a mig-parted config"
    result = consumers.mig_parted(config.release, path, *sorted({p.mig_config for p in labelled.values()
                                                                 if p.mig_config}))
    assert result.returncode == 0, f"{config.source}, release {config.release}\nmig-parted: {result.describe()}"
    for name, promised in labelled.items():
        assert promised.mig_config is not None
        selected = result.document["selected"][promised.mig_config]
        devices = mig_devices_per_node(selected, promised.gpus_per_node)
        assert devices == promised.mig_devices, (
            f"{config.source}: class {name} selects {promised.mig_config}\nmig-parted: {selected} -> {devices} per "
            f"node\npromised: {promised.mig_devices}")
