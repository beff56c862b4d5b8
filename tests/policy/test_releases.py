"""Device-plugin releases: what each really advertises a MIG profile as, and what the compiled output promises.

Two implementations are held against a table of upstream facts and against each other: policy/hardware/releases.py
(what every consumer reads) and tests/policy/plugin_reference.py (written separately from the same source).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from plugin_reference import EXIT, advertised, enum_of

from compiler import compile_policy
from policy.hardware import catalog, mig, releases
from policy.load import load_policy

GPU = "nvidia.com/gpu"
DP = "NVIDIA/k8s-device-plugin"

# ---- the table: profile x release -> what the plugin advertises ------------------------------------------------

# (GPU, profile, release, strategy, advertised, source). EXIT: the plugin exits at start (pod crash-loops).
TABLE: list[tuple[str, str, str, str, str, str]] = [
    ("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", "v0.17.1", "mixed", "nvidia.com/mig-1g.10gb",
     f"{DP}@v0.17.1:api/config/v1/resources.go:163-180 (unanchored Matches; 1g.10gb is walked first)"),
    ("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", "v0.19.3", "mixed", "nvidia.com/mig-1g.10gb",
     f"{DP}@v0.19.3:api/config/v1/resources.go:163-180"),
    ("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", "v0.20.0", "mixed", "nvidia.com/mig-1g.10gb.me",
     f"{DP}@v0.20.0:api/config/v1/resources.go:169-182 (anchored), internal/rm/rm.go:145 ('+' spelt '.')"),
    ("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", "v0.12.0", "mixed", "nvidia.com/mig-1g.10gb",
     f"{DP}@v0.12.0:internal/rm/nvml.go:309-335 (GetAttributes naming has no attributes)"),
    ("NVIDIA-H100-80GB-HBM3", "1g.20gb", "v0.12.3", "mixed", EXIT,
     f"{DP}@v0.12.3:internal/rm/nvml.go:170 (walk stops at GPU_INSTANCE_PROFILE_COUNT=8; 1g.20gb is enum 9), "
     "internal/rm/devices.go:265-278 ('does not match any resource patterns')"),
    ("NVIDIA-H100-80GB-HBM3", "1g.20gb", "v0.12.3", "single", GPU,
     f"{DP}@v0.12.3:cmd/nvidia-device-plugin/mig-strategy.go:92 (single: one pattern '*')"),
    ("NVIDIA-H100-80GB-HBM3", "1g.20gb", "v0.13.0", "single", EXIT,
     f"{DP}@v0.13.0:vendor/gitlab.com/nvidia/cloud-native/go-nvlib/pkg/nvlib/device/mig_device.go:102-147 "
     "(GetProfile loops enums 0-7: 'no matching profile IDs found')"),
    ("NVIDIA-H100-80GB-HBM3", "1g.20gb", "v0.14.0", "mixed", "nvidia.com/mig-1g.20gb",
     f"{DP}@v0.14.0:vendor/github.com/NVIDIA/go-nvml/pkg/nvml/const.go:617 (COUNT=10)"),
    ("NVIDIA-A100-SXM4-40GB", "1g.10gb", "v0.12.0", "mixed", EXIT,
     f"{DP}@v0.12.0:internal/rm/nvml.go:170 (enum 9 never walked)"),
    ("NVIDIA-A100-SXM4-40GB", "1g.10gb", "v0.14.0", "mixed", "nvidia.com/mig-1g.10gb",
     f"{DP}@v0.14.0:vendor/github.com/NVIDIA/go-nvml/pkg/nvml/const.go:617"),
    ("NVIDIA-A100-SXM4-40GB", "1g.5gb+me", "v0.17.1", "mixed", "nvidia.com/mig-1g.5gb",
     f"{DP}@v0.17.1:api/config/v1/resources.go:163-180"),
    ("NVIDIA-A30", "2g.12gb+me", "v0.12.0", "mixed", "nvidia.com/mig-2g.12gb",
     f"{DP}@v0.12.0:internal/rm/nvml.go:309-335 (any enum named, without attributes)"),
    ("NVIDIA-A30", "2g.12gb+me", "v0.13.0", "mixed", EXIT,
     f"{DP}@v0.13.0:vendor/.../go-nvlib/pkg/nvlib/device/mig_device.go:102 (2-slice REV1 is enum 8)"),
    ("NVIDIA-A30", "2g.12gb+me", "v0.14.0", "mixed", "nvidia.com/mig-2g.12gb",
     f"{DP}@v0.14.0:api/config/v1/resources.go:169-180 (unanchored)"),
    ("NVIDIA-A30", "2g.12gb+me", "v0.20.0", "mixed", "nvidia.com/mig-2g.12gb.me",
     f"{DP}@v0.20.0:api/config/v1/resources.go:169-182"),
    ("NVIDIA-H100-NVL", "1g.12gb", "v0.12.0", "mixed", "nvidia.com/mig-1g.11gb",
     f"{DP}@v0.12.0:internal/rm/nvml.go:191 (GB = ceil(MemorySizeMB/1024): 10.75 GiB is 11)"),
    ("NVIDIA-H100-NVL", "1g.12gb", "v0.13.0", "mixed", "nvidia.com/mig-1g.12gb",
     f"{DP}@v0.13.0:vendor/.../go-nvlib/pkg/nvlib/device/mig_profile.go:324-332 (getMigMemorySizeGB)"),
    ("NVIDIA-H200", "2g.35gb", "v0.12.0", "mixed", "nvidia.com/mig-2g.33gb",
     f"{DP}@v0.12.0:internal/rm/nvml.go:191 (32.25 GiB is 33)"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb+gfx", "v0.17.2", "single", EXIT,
     f"{DP}@v0.17.2:vendor/github.com/NVIDIA/go-nvml/pkg/nvml/const.go:766 (COUNT=10; +gfx is enum 10)"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb+gfx", "v0.17.3", "mixed", EXIT,
     f"{DP}@v0.17.3:vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/mig_profile.go:57-120 (v0.7.2: "
     "'invalid GPU Instance Profile ID' for enums 10-16)"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb", "v0.17.3", "mixed", EXIT,
     f"{DP}@v0.17.3:vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go:298-357 (the walk reaches "
     "enum 10 whatever the layout)"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb", "v0.17.3", "single", GPU,
     f"{DP}@v0.17.3:internal/rm/rm.go:97-137 (single walks nothing)"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb+gfx", "v0.17.4", "mixed", "nvidia.com/mig-1g.24gb",
     f"{DP}@v0.17.4:vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/mig_profile.go:60-144 (v0.7.4 names "
     "+gfx), api/config/v1/resources.go:163-180 (unanchored)"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb+me.all", "v0.19.3", "mixed",
     "nvidia.com/mig-1g.24gb", f"{DP}@v0.19.3:api/config/v1/resources.go:163-180"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb+gfx", "v0.20.0", "mixed",
     "nvidia.com/mig-1g.24gb.gfx", f"{DP}@v0.20.0:api/config/v1/resources.go:169-182"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb+me.all", "v0.20.0", "mixed",
     "nvidia.com/mig-1g.24gb.me.all", f"{DP}@v0.20.0:internal/rm/rm.go:145"),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "1g.24gb-me", "v0.20.0", "mixed",
     "nvidia.com/mig-1g.24gb-me", f"{DP}@v0.20.0:internal/rm/rm.go:145 (only '+' is replaced)"),
]


def model(name: str) -> catalog.GpuModel:
    found = catalog.lookup(name)
    assert found is not None and found.mig is not None
    return found


@pytest.mark.parametrize(("gpu", "profile", "tag", "strategy", "expected", "source"), TABLE,
                         ids=[f"{r[0].removeprefix('NVIDIA-')[:14]} {r[1]} {r[2]} {r[3]}" for r in TABLE])
def test_what_each_release_advertises_a_profile_as(gpu: str, profile: str, tag: str, strategy: str,
                                                    expected: str, source: str) -> None:
    m = model(gpu)
    assert m.mig is not None
    p = m.mig.profile(profile)
    assert p is not None and source
    release = releases.find(tag)
    assert release is not None
    outcome = releases.advertise(release, m.mig, p, strategy)  # type: ignore[arg-type]
    assert (outcome.resource or EXIT) == expected, outcome.reason
    assert outcome.certain
    assert advertised(tag, m, p, strategy) == expected


def test_the_catalogs_nvml_profile_enums_are_nvidias() -> None:
    for m in catalog.models():
        for p in (m.mig.profiles if m.mig else ()):
            assert p.nvml_enum == enum_of(m, p), (m.product, p.name)


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_both_implementations_agree_on_every_catalog_profile_and_release(strategy: str) -> None:
    disagreements = []
    for release in releases.config_releases():
        for m in catalog.models():
            for p in (m.mig.profiles if m.mig else ()):
                assert m.mig is not None
                ours = releases.advertise(release, m.mig, p, strategy)  # type: ignore[arg-type]
                if ours.certain and (ours.resource or EXIT) != advertised(release.tag, m, p, strategy):
                    disagreements.append((release.tag, m.product, p.name, ours.resource))
    assert disagreements == []


# ---- the release table itself ------------------------------------------------------------------------------------

UPSTREAM_TAGS = [  # `git tag` of NVIDIA/k8s-device-plugin, pre-releases and the 1.0.0-beta aliases left out
    "v0.0.0", "v0.1.0", "v0.2.0", "v0.3.0", "v0.4.0", "v0.5.0", "v0.6.0", "v0.7.0", "v0.7.1", "v0.7.2", "v0.7.3",
    "v0.8.0", "v0.8.1", "v0.8.2", "v0.9.0", "v0.10.0", "v0.11.0", "v0.12.0", "v0.12.1", "v0.12.2", "v0.12.3",
    "v0.13.0", "v0.14.0", "v0.14.1", "v0.14.2", "v0.14.3", "v0.14.4", "v0.14.5", "v0.15.0", "v0.15.1", "v0.16.0",
    "v0.16.1", "v0.16.2", "v0.17.0", "v0.17.1", "v0.17.2", "v0.17.3", "v0.17.4", "v0.18.0", "v0.18.1", "v0.18.2",
    "v0.19.0", "v0.19.1", "v0.19.2", "v0.19.3", "v0.20.0",
]


def test_every_published_release_is_known_in_order_and_the_config_readers_start_at_v0_12() -> None:
    assert [r.tag for r in releases.RELEASES] == UPSTREAM_TAGS
    assert [r.version for r in releases.RELEASES] == sorted(r.version for r in releases.RELEASES)
    assert releases.config_releases()[0].tag == "v0.12.0" and len(releases.config_releases()) == 29


@pytest.mark.parametrize(("tag", "behaves_as", "nearest"), [
    ("v0.21.0", "v0.20.0", "v0.20.0"), ("v1.0.0", "v0.20.0", "v0.20.0"), ("v0.17.5", "v0.17.4", "v0.17.4"),
    ("v0.17.0-rc.1", "v0.17.0", "v0.17.0"), ("v0.11.5", "v0.12.0", "v0.12.0"),
])
def test_an_unknown_tag_is_not_found_and_resolves_like_the_release_below_it(tag: str, behaves_as: str,
                                                                            nearest: str) -> None:
    assert releases.find(tag) is None
    assert releases.behaviour(tag).tag == behaves_as
    assert releases.nearest(tag).tag == nearest


# ---- the cases end to end --------------------------------------------------------------------------------

SPEC = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {{name: demo}}
spec:
  devicePlugin: {{version: {version}, gpuFeatureDiscovery: {gfd}{mig_manager}}}
  nodeClasses:
  - name: gpus
    nodeSelector: {{pool: gpus}}
    nodes: 3
    gpu: {{model: {gpu}, count: {count}}}
    sharing: {sharing}
"""


#: Releases a standalone tree cannot run GFD beside: v0.12.0's chart renders none, v0.14.0's GFD (v0.8.0) cannot
#: parse its config's deviceListStrategy list (tests/compiler/test_standalone_images.py has the sources).
NO_GFD = {"v0.12.0", "v0.14.0"}
#: Releases no GPU Operator shipped with a MIG manager (the first, v1.11.0, ships v0.12.2): a MIG spec names one.
NO_MIG_MANAGER = {"v0.12.0", "v0.12.1"}


def spec_text(version: str, gpu: str, count: int, sharing: str, *, template: str = SPEC, **more: str) -> str:
    """SPEC for one class, with GFD where the release was shipped with one that runs and a MIG manager image where
    none was shipped with it: what these tests check is the plugin's MIG naming, not those images."""
    manager = ", migManager: {image: nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.4.2-ubuntu20.04}"
    return template.format(version=version, gpu=gpu, count=count, sharing=sharing, **more,
                           gfd="false" if version in NO_GFD else "true",
                           mig_manager=manager if version in NO_MIG_MANAGER else "")


def load(version: str = "v0.17.1", gpu: str = "H100", count: int = 2, sharing: str = "exclusive") -> Any:
    return load_policy(spec_text(version, gpu, count, sharing), filename="demo.yaml")


def codes(result: Any, severity: str = "error") -> list[str]:
    return [d.code for d in result.diagnostics if d.severity == severity]


def outputs(result: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """report.json, the admission policy and the class's device-plugin config, as the compiled tree has them."""
    tree = compile_policy(result.resolved)
    report = json.loads(tree["report.json"])
    admission = yaml.safe_load(tree["admission/configmap-gpupolicy-admission-policy.yaml"])
    policy = json.loads(admission["data"]["admission-policy.json"])
    config = yaml.safe_load(yaml.safe_load(tree["device-plugin/configmap-gpus.yaml"])["data"]["gpus"])
    return report, policy, config


def test_a_media_profile_beside_its_plain_twin_before_v0_20_is_refused_with_the_release_it_needs() -> None:
    result = load(sharing="{mig: {strategy: mixed, layout: {1g.10gb+me: 1, 1g.10gb: 5}, "
                          "timeSlicing: {1g.10gb+me: 2}}}")
    assert codes(result) == ["mig-profiles-share-resource"]
    [found] = [d for d in result.diagnostics if d.code == "mig-profiles-share-resource"]
    assert "nvidia.com/mig-1g.10gb" in found.message and "v0.20.0" in found.hint
    fixed = load("v0.20.0", sharing="{mig: {strategy: mixed, layout: {1g.10gb+me: 1, 1g.10gb: 5}, "
                                    "timeSlicing: {1g.10gb+me: 2}}}")
    assert fixed.ok
    report, policy, config = outputs(fixed)
    after = {s["resource"]: s["perNode"] for s in report["classes"][0]["after"]}
    assert after == {"nvidia.com/mig-1g.10gb": 10, "nvidia.com/mig-1g.10gb.me": 4}
    assert {o["resource"] for o in policy["classes"][0]["offers"]} == set(after)
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.10gb.me", "replicas": 2}]


def test_a_lone_media_profile_before_v0_20_is_promised_under_the_name_the_plugin_advertises() -> None:
    result = load(sharing="{mig: {strategy: mixed, layout: {1g.10gb+me: 1, 2g.20gb: 3}, timeSlicing: "
                          "{1g.10gb+me: 2}}}")
    assert result.ok and codes(result, "warning") == ["mig-resource-renamed"]
    report, policy, config = outputs(result)
    after = {s["resource"]: s["perNode"] for s in report["classes"][0]["after"]}
    assert after == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 6}
    offers = {o["resource"]: o for o in policy["classes"][0]["offers"]}
    assert offers["nvidia.com/mig-1g.10gb"]["mig_profile"] == "1g.10gb+me"
    assert config["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]
    labels = policy["classes"][0]["node_labels"]
    assert "nvidia.com/mig-2g.20gb.count" in labels and not any("1g.10gb" in key for key in labels)
    assert "mig-resource-renamed" in compile_policy(result.resolved)["REPORT.md"].decode()


def test_the_admission_engine_denies_the_name_the_plugin_never_advertises_and_hints_the_one_it_does() -> None:
    from policy.admission.engine import Engine
    from policy.resolved.offers import build_admission_policy

    result = load(sharing="{mig: {strategy: mixed, layout: {1g.10gb+me: 1, 2g.20gb: 3}}}")
    engine = Engine(build_admission_policy(result.resolved))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "video"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.10gb.me": 1}}}]}}
    decision = engine.evaluate(pod)
    assert not decision.allowed and "nvidia.com/mig-1g.10gb" in decision.message
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": 1}
    assert engine.evaluate(pod).allowed


@pytest.mark.parametrize(("version", "gpu", "layout", "needed"), [
    ("v0.12.3", "H100", "{1g.20gb: 3}", "v0.14.0"),
    ("v0.13.0", "H100", "{1g.20gb: 3}", "v0.14.0"),
    ("v0.12.3", "A100-SXM4-40GB", "{1g.10gb: 2}", "v0.14.0"),
    ("v0.13.0", "A30", "{2g.12gb+me: 1}", "v0.14.0"),
    ("v0.17.2", "RTX-PRO-6000", "{1g.24gb+gfx: 4}", "v0.17.4"),
    ("v0.17.3", "RTX-PRO-6000", "{1g.24gb: 4}", "v0.17.4"),
    ("v0.12.0", "B200", "{1g.23gb: 7}", "v0.13.0"),
])
def test_a_layout_the_targeted_release_cannot_start_with_is_refused_naming_the_release_it_needs(
    version: str, gpu: str, layout: str, needed: str
) -> None:
    result = load(version, gpu, 1, f"{{mig: {{strategy: mixed, layout: {layout}}}}}")
    assert codes(result) == ["mig-profile-needs-plugin-release"], result.diagnostics
    [found] = result.diagnostics
    assert f"to {needed} or newer" in found.hint
    assert found.span is not None and found.span.line == 11  # the profile's key in the layout
    assert load(needed, gpu, 1, f"{{mig: {{strategy: mixed, layout: {layout}}}}}").ok


@pytest.mark.parametrize("version", ["v0.21.0", "v1.0.0", "v0.16.3", "v0.17.0-rc.1"])
def test_a_release_nvidia_never_published_is_refused_with_the_known_ones(version: str) -> None:
    result = load(version)
    assert codes(result) == ["unknown-plugin-version"]
    assert "it knows v0.12.0 to v0.20.0" in result.diagnostics[0].message


# ---- parser facts per release --------------------------------------------------------------------------------------

LIST_SPEC = SPEC.replace("devicePlugin: {{version: {version}, ",
                         "devicePlugin: {{version: {version}, flags: {{deviceListStrategy: {strategy}}}, ")


@pytest.mark.parametrize(("version", "strategy", "written"), [
    ("v0.17.1", "[envvar, cdi-annotations]", ["envvar", "cdi-annotations"]),
    ("v0.14.1", "[volume-mounts]", ["volume-mounts"]),
    ("v0.14.1", "envvar", "envvar"),
    ("v0.14.0", "envvar", ["envvar"]),
    ("v0.14.0", "[envvar, cdi-annotations]", ["envvar", "cdi-annotations"]),
    ("v0.13.0", "[envvar]", "envvar"),
])
def test_device_list_strategy_is_written_as_the_targeted_release_parses_it(version: str, strategy: str,
                                                                          written: Any) -> None:
    result = load_policy(spec_text(version, "T4", 1, "exclusive", template=LIST_SPEC, strategy=strategy),
                         filename="demo.yaml")
    assert result.ok, result.diagnostics
    _, _, config = outputs(result)
    assert config["flags"]["plugin"]["deviceListStrategy"] == written


def test_a_list_of_strategies_before_v0_14_is_refused() -> None:
    result = load_policy(spec_text("v0.13.0", "T4", 1, "exclusive", template=LIST_SPEC,
                                   strategy="[envvar, volume-mounts]"), filename="demo.yaml")
    assert codes(result) == ["version-unsupported-feature"]
    assert "a list of device list strategies needs device plugin v0.14.0" in result.diagnostics[0].message


def test_a_cdi_strategy_inside_a_list_mounts_the_cdi_directories() -> None:
    result = load_policy(spec_text("v0.17.1", "T4", 1, "exclusive", template=LIST_SPEC,
                                   strategy="[envvar, cdi-annotations]"), filename="demo.yaml")
    daemon_set = yaml.safe_load(compile_policy(result.resolved)["device-plugin/daemonset-gpus.yaml"])
    mounts = daemon_set["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "cdi-root", "mountPath": "/var/run/cdi"} in mounts


@pytest.mark.parametrize("sharing", ["{timeSlicing: {replicas: 5000}}",
                                     "{mig: {layout: {1g.10gb: 7}, timeSlicing: {1g.10gb: 2048}}}"])
def test_replicas_above_1024_are_accepted_as_the_plugin_accepts_them(sharing: str) -> None:
    result = load(sharing=sharing)
    assert result.ok, result.diagnostics
    _, _, config = outputs(result)
    assert config["sharing"]["timeSlicing"]["resources"][0]["replicas"] in (5000, 2048)


def test_replicas_beyond_what_the_plugins_go_int_decodes_are_refused() -> None:
    assert codes(load(sharing="{timeSlicing: {replicas: 9223372036854775808}}")) == ["invalid-value"]


@pytest.mark.parametrize(("version", "written", "strict"), [("v0.17.1", True, True), ("v0.20.0", False, False)])
def test_mps_fail_requests_false_is_a_warning_below_v0_20_and_everything_says_what_the_plugin_does(
    version: str, written: bool, strict: bool
) -> None:
    result = load(version, "A100-SXM4-80GB", 4, "{mps: {replicas: 4, failRequestsGreaterThanOne: false}}")
    assert result.ok
    assert codes(result, "warning") == (["version-unsupported-feature"] if version < "v0.20" else [])
    _, policy, config = outputs(result)
    assert config["sharing"]["mps"]["failRequestsGreaterThanOne"] is written
    assert policy["classes"][0]["offers"][0]["fail_requests_greater_than_one"] is strict


@pytest.mark.parametrize(("name", "warned"), [("NVIDIA-L2O", "NVIDIA-L20"), ("NVIDA-L40S", "NVIDIA-L40S"),
                                              ("NVIDIA-A40", None), ("Tesla-P4", None), ("NVIDIA-RTX-A6000", None)])
def test_a_model_one_typo_from_the_catalog_is_a_warning_with_the_did_you_mean(name: str, warned: str | None) -> None:
    text = spec_text(version="v0.17.1", gpu=f"{name}, memory: 46068Mi", count=1, sharing="exclusive")
    result = load_policy(text, filename="demo.yaml")
    assert result.ok
    found = [d for d in result.diagnostics if d.code == "gpu-model-typo"]
    assert [w for d in found for w in [warned] if f"did you mean {w!r}" in d.hint] == ([warned] if warned else [])
    assert bool(found) == bool(warned)


def test_gpus_no_group_names_get_mig_off_in_their_own_entry_and_are_advertised_whole() -> None:
    result = load(gpu="H100", count=8, sharing="{mig: {groups: [{gpus: [0, 1, 2, 3], layout: {1g.10gb: 7}}]}}")
    assert result.ok and codes(result, "info") == ["mig-groups-incomplete"]
    tree = compile_policy(result.resolved)
    mig_parted = yaml.safe_load(yaml.safe_load(tree["mig/configmap.yaml"])["data"]["config.yaml"])
    assert mig_parted["mig-configs"]["gpus"] == [
        {"devices": [0, 1, 2, 3], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [4, 5, 6, 7], "mig-enabled": False},
    ]
    report, _, _ = outputs(result)
    after = {s["resource"]: (s["perNode"], s["isolation"]) for s in report["classes"][0]["after"]}
    assert after == {"nvidia.com/mig-1g.10gb": (28, "MIG hardware (memory, cache, faults)"),
                     GPU: (4, "whole GPU")}


def test_the_h100_94gb_product_label_resolves_to_its_own_profiles_not_the_80gb_ones() -> None:
    assert model("NVIDIA-H100").mig.profile("1g.12gb") is not None  # type: ignore[union-attr]
    assert model("H100").product == "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize("product", ["NVIDIA-GB300", "NVIDIA-A800-SXM4-80GB", "NVIDIA-A800-80GB-PCIe",
                                     "NVIDIA-A800-40GB-Active", "NVIDIA-H800-PCIe", "NVIDIA-H800-NVL",
                                     "NVIDIA-PG506-232", "NVIDIA-H100-96GB"])
def test_the_mig_gpus_of_mig_parteds_defaults_are_in_the_catalog(product: str) -> None:
    profile = model(product).mig.profiles[0].name  # type: ignore[union-attr]
    result = load("v0.20.0", product, 1, f"{{mig: {{strategy: mixed, layout: {{{profile}: 1}}}}}}")
    assert result.ok, result.diagnostics


@pytest.mark.parametrize("tag", ["v0.13.0", "v0.14.0", "v0.17.1", "v0.20.0"])
def test_the_h100_96gb_takes_mig_parteds_balanced_layout_under_the_96gb_names(tag: str) -> None:
    # mig-parted v0.15.0 deployments/systemd/config-default.yaml, all-balanced: 0x233D10DE with 0x20B610DE
    # (PG506-96GB), 0x234210DE (GH200) and 0x232910DE (H20) -> 1g.12gb x2, 2g.24gb x1, 3g.48gb x1.
    h100 = model("H100-96GB")
    assert h100.mig is not None and "0x233D10DE" in h100.mig.pci_device_ids
    assert [p.name for p in h100.mig.profiles] == [p.name for p in model("NVIDIA-H20").mig.profiles]  # type: ignore[union-attr]
    result = load(tag, "H100-96GB", 8, "{mig: {strategy: mixed, layout: {1g.12gb: 2, 2g.24gb: 1, 3g.48gb: 1}}}")
    assert result.ok, result.diagnostics
    report, _, _ = outputs(result)
    after = {s["resource"]: s["perNode"] for s in report["classes"][0]["after"]}
    assert after == {"nvidia.com/mig-1g.12gb": 16, "nvidia.com/mig-2g.24gb": 8, "nvidia.com/mig-3g.48gb": 8}


@pytest.mark.parametrize("layout", ["{1g.24gb: 1}", "{1g.12gb: 2, 2g.24gb: 1, 3g.48gb: 1}", "{1g.12gb+me: 1}"])
@pytest.mark.parametrize("tag", [r.tag for r in releases.config_releases()])
def test_each_release_gates_the_h100_96gb_as_it_gates_its_96gb_siblings(tag: str, layout: str) -> None:
    # Same placement table and names as H20 and GH200 96GB: every per-release verdict (v0.12 names devices by
    # estimated memory, enum 9 lies outside v0.12's walk, ...) must come out the same.
    sharing = f"{{mig: {{strategy: mixed, layout: {layout}}}}}"
    verdicts = {gpu: codes(load(tag, gpu, 1, sharing)) for gpu in ("H100-96GB", "NVIDIA-H20", "NVIDIA-GH200-480GB")}
    assert len({tuple(v) for v in verdicts.values()}) == 1, verdicts


def test_mig_on_a_model_the_catalog_does_not_know_says_the_table_is_missing_not_that_mig_is() -> None:
    # gpu.memory makes an unknown model usable for time-slicing; MIG still needs the catalog's profile table.
    text = spec_text(version="v0.17.1", gpu="NVIDIA-H100-97GB", count=1,
                       sharing="{mig: {strategy: mixed, layout: {1g.12gb: 1}}}").replace(
        "count: 1", "count: 1, memory: 96Gi")
    unknown = load_policy(text, filename="demo.yaml")
    (d,) = [d for d in unknown.diagnostics if d.code == "mig-unsupported-gpu"]
    assert d.message.startswith("gpupolicy's catalog has no MIG profile table for NVIDIA-H100-97GB")
    assert "does not support MIG" not in d.message and "policy/hardware/catalog.yaml" in d.hint
    t4 = load("v0.17.1", "T4", 1, "{mig: {strategy: mixed, layout: {1g.5gb: 1}}}")
    assert [d.message for d in t4.diagnostics if d.code == "mig-unsupported-gpu"] == ["Tesla-T4 does not support MIG"]


# ---- generated specs: every promised resource is one the targeted release advertises ---------------------------

MIG_MODELS = [m for m in catalog.models() if m.mig is not None]
RELEASE_CODES = {"mig-profile-needs-plugin-release", "mig-profiles-share-resource"}


@st.composite
def mig_specs(draw: st.DrawFn) -> tuple[str, catalog.GpuModel, dict[str, int], str, str, dict[str, int], int]:
    m = draw(st.sampled_from(MIG_MODELS))
    assert m.mig is not None
    strategy = draw(st.sampled_from(["single", "mixed", "mixed"]))  # names matter most under mixed
    layouts = mig.feasible_layouts(m.mig)
    if strategy == "single":
        layouts = tuple(lay for lay in layouts if len(lay) == 1)
    layout = dict(draw(st.sampled_from(layouts)))
    tag = draw(st.sampled_from([r.tag for r in releases.config_releases()]))
    shared = draw(st.dictionaries(st.sampled_from(sorted(layout)), st.integers(2, 4096), max_size=2))
    count = draw(st.integers(1, 8))
    flow = "{" + ", ".join(f"{p}: {n}" for p, n in layout.items()) + "}"
    slicing = "{" + ", ".join(f"{p}: {n}" for p, n in shared.items()) + "}"
    sharing = f"{{mig: {{strategy: {strategy}, layout: {flow}, timeSlicing: {slicing}}}}}"
    text = spec_text(version=tag, gpu=m.product, count=count, sharing=sharing)
    return text, m, layout, strategy, tag, shared, count


def reference_offers(m: catalog.GpuModel, layout: dict[str, int], strategy: str, tag: str,
                     count: int) -> Counter[str] | None:
    """Devices per node by advertised resource, per the reference; None when the plugin would not start."""
    assert m.mig is not None
    found: Counter[str] = Counter()
    for name, n in layout.items():
        profile = m.mig.profile(name)
        assert profile is not None
        resource = advertised(tag, m, profile, strategy)
        if resource == EXIT:
            return None
        found[resource] += n * count
    return found


def test_a_layout_v0_12_cannot_name_and_would_fold_is_refused_for_both() -> None:
    # Found by the property test below: GH200's 1g.18gb and 1g.18gb+me under v0.12.0, mixed strategy.
    sharing = "{mig: {strategy: mixed, layout: {1g.18gb: 1, 1g.18gb+me: 1, 4g.72gb: 1}, timeSlicing: {}}}"
    result = load_policy(spec_text(version="v0.12.0", gpu="NVIDIA-GH200-144G-HBM3e", count=1, sharing=sharing),
                         filename="demo.yaml")
    errors = {d.code for d in result.diagnostics if d.severity == "error"}
    assert errors == {"mig-profile-needs-plugin-release", "mig-profiles-share-resource"}, result.diagnostics
    assert any("cannot be told" in d.message for d in result.diagnostics)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mig_specs())
def test_every_promised_resource_is_one_the_targeted_release_advertises_for_that_layout(case: Any) -> None:
    text, m, layout, strategy, tag, shared, count = case
    result = load_policy(text, filename="demo.yaml")
    expected = reference_offers(m, layout, strategy, tag, count)
    errors = {d.code for d in result.diagnostics if d.severity == "error"}
    if expected is None:  # the plugin would crash-loop: the spec must be refused, saying so
        event("refused: the plugin would exit")
        assert "mig-profile-needs-plugin-release" in errors and errors <= RELEASE_CODES, result.diagnostics
        return
    if any("cannot be told" in d.message for d in result.diagnostics):
        # v0.12 names by memory, which the catalog only estimates here: refused, so nothing to compare (and
        # refused again if two of the profiles also fold into one resource)
        assert "mig-profile-needs-plugin-release" in errors and errors <= RELEASE_CODES, result.diagnostics
        assume(False)
    folded = strategy == "mixed" and len(expected) < len(layout)
    if folded:  # two profiles in one resource: refused, with the release that separates them
        event("refused: profiles share a resource")
        assert "mig-profiles-share-resource" in errors and errors <= RELEASE_CODES, result.diagnostics
        return
    assert errors == set(), result.diagnostics
    event(f"compiled ({strategy})")
    report, policy, config = outputs(result)
    promised = {s["resource"]: s["devicesPerNode"] for s in report["classes"][0]["after"]}
    offered = {o["resource"]: o["devices_per_node"] for o in policy["classes"][0]["offers"]}
    assert promised == offered == dict(expected)
    sliced = {r["name"]: r["replicas"] for r in config.get("sharing", {}).get("timeSlicing", {}).get("resources", [])}
    assert set(sliced) <= set(expected)
    if strategy == "mixed":
        for name, replicas in shared.items():
            resource = advertised(tag, m, m.mig.profile(name), strategy)  # type: ignore[union-attr, arg-type]
            assert sliced[resource] == replicas
    labels = policy["classes"][0]["node_labels"]
    assert all(key.removesuffix(".count") in expected for key in labels if key.endswith(".count")
               and key.startswith("nvidia.com/mig-"))
