"""Generated specs, compiled by the real command line, loaded by the consumers' own code at the releases they
target: every device-plugin and mig-parted config a spec the compiler accepts compiles to means what its
report.json and admission policy promise.

The specs are drawn as tests/policy/test_releases.py draws its MIG specs (the catalog's models, the layouts
policy/hardware/mig.py finds feasible, every release a harness covers), widened to time-slicing, MPS and whole
GPUs, with the renameByDefault and failRequestsGreaterThanOne switches, one to three classes per spec.
"""

from __future__ import annotations

from typing import Any

import harnesses
import pytest
import trees
import yaml
from harnesses import Consumers
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cli.main import main
from policy.hardware import catalog, mig, operator, releases

pytestmark = pytest.mark.consumers

#: Release tags gpupolicy compiles for that a device-plugin harness loads exactly (harnesses.DEVICE_PLUGIN).
PLUGIN_TAGS = [r.tag for r in releases.config_releases() if any(r.tag in h.covers for h in harnesses.DEVICE_PLUGIN)]


def _mig_manager(tag: str) -> str | None:
    """The k8s-mig-manager release a standalone tree deploys beside device plugin `tag`, as compiler/targets/
    mig_manager.py picks it (operator.mig_manager_release: the newest GPU Operator release, of either table,
    shipping that plugin or an older config-file one); None where no release shipped one (v0.12.0, v0.12.1)."""
    found = releases.find(tag)
    assert found is not None
    shipped = operator.mig_manager_release(found.version)
    return trees.image_tag(shipped.mig_manager_image) if shipped else None


_PARTED = {t for h in harnesses.MIG_PARTED for t in h.covers}
#: MIG specs only target releases whose MIG manager a mig-parted harness covers, so every emitted mig config
#: is loaded too (the others: docs/testing.md).
MIG_TAGS = [t for t in PLUGIN_TAGS if _mig_manager(t) in _PARTED]
WHOLE = [m for m in catalog.models() if m.mig is None]
MIG_MODELS = [m for m in catalog.models() if m.mig is not None]


def test_the_corpus_draws_from_every_release_family_and_mig_releases_exist() -> None:
    families = {tuple(releases.find(t).version[:2]) for t in PLUGIN_TAGS}  # type: ignore[union-attr]
    assert families >= {(0, 12), (0, 13), (0, 14), (0, 15), (0, 17), (0, 18), (0, 19)}
    assert MIG_TAGS, "no device-plugin release deploys a MIG manager a mig-parted harness covers"


def test_the_corpus_pairs_each_plugin_release_with_the_mig_manager_its_operator_release_shipped() -> None:
    # GO@<tag>:deployments/gpu-operator/values.yaml (operator.RELEASES, COMPONENTS_ONLY): v22.9.0 ships plugin
    # v0.12.3 with MIG manager v0.5.0, v25.3.0 v0.17.1 with v0.12.1, v25.3.2 v0.17.3 with v0.12.2, v25.10.1 v0.18.1
    # with v0.13.1 (v0.18.2 was shipped by none), v26.3.3 v0.19.3 with v0.14.2.
    assert {t: _mig_manager(t) for t in ("v0.12.3", "v0.13.0", "v0.17.1", "v0.17.3", "v0.18.2", "v0.19.3")} == {
        "v0.12.3": "v0.5.0", "v0.13.0": "v0.5.0", "v0.17.1": "v0.12.1", "v0.17.3": "v0.12.2",
        "v0.18.2": "v0.13.1", "v0.19.3": "v0.14.2"}
    # Only those whose MIG manager a mig-parted harness parses draw MIG classes.
    assert MIG_TAGS == ["v0.17.1", "v0.17.2", "v0.18.2", "v0.19.3"]


@st.composite
def sharing(draw: st.DrawFn, tag: str) -> tuple[str, dict[str, Any]]:
    """A GPU model and a sharing block for it."""
    switches = {"renameByDefault": draw(st.booleans()), "failRequestsGreaterThanOne": draw(st.booleans())}
    kind = draw(st.sampled_from(["exclusive", "timeSlicing", "mps", "mig", "mig"] if tag in MIG_TAGS
                                else ["exclusive", "timeSlicing", "mps"]))
    if kind == "mig":
        model = draw(st.sampled_from(MIG_MODELS))
        assert model.mig is not None
        strategy = draw(st.sampled_from(["single", "mixed", "mixed"]))
        layouts = mig.feasible_layouts(model.mig)
        if strategy == "single":
            layouts = tuple(lay for lay in layouts if len(lay) == 1)
        layout = dict(draw(st.sampled_from(layouts)))
        sliced = draw(st.dictionaries(st.sampled_from(sorted(layout)), st.integers(2, 8), max_size=2))
        return model.product, {"mig": {"strategy": strategy, "layout": layout, "timeSlicing": sliced,
                                       "failRequestsGreaterThanOne": switches["failRequestsGreaterThanOne"]}}
    model = draw(st.sampled_from(WHOLE + MIG_MODELS))
    if kind == "exclusive":
        return model.product, {}
    most = model.mps_max_clients if kind == "mps" else 64
    return model.product, {kind: {"replicas": draw(st.integers(2, most)), **switches}}


@st.composite
def specs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    tag = draw(st.sampled_from(PLUGIN_TAGS))
    classes = []
    for i in range(draw(st.integers(1, 3))):
        product, block = draw(sharing(tag))
        classes.append({"name": f"c{i}", "nodeSelector": {"pool": f"c{i}"}, "nodes": 2,
                        "gpu": {"model": product, "count": draw(st.integers(1, 8))},
                        "sharing": block or "exclusive"})
    spec = {"apiVersion": "gpupolicy.dev/v1alpha1", "kind": "ClusterGPUPolicy", "metadata": {"name": "corpus"},
            "spec": {"devicePlugin": {"version": tag, "gpuFeatureDiscovery": True}, "nodeClasses": classes}}
    return tag, spec


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=specs())
def test_every_config_a_generated_spec_compiles_to_means_at_its_release_what_the_report_promises(
        consumers: Consumers, tmp_path_factory: pytest.TempPathFactory, case: tuple[str, dict[str, Any]],
        capsys: pytest.CaptureFixture[str]) -> None:
    tag, spec = case
    work = tmp_path_factory.mktemp("corpus")
    (work / "cluster.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    status = main(["compile", str(work / "cluster.yaml"), "-o", str(work / "out")])
    output = capsys.readouterr()
    assert status in (0, 1), f"a generated spec must be valid input (exit 0 or 1), got {status}:\n{output.err}"
    if status == 1:  # the compiler refused it with findings: there is nothing for a consumer to read
        event("refused by gpupolicy")
        return
    tree = work / "out"
    configs = trees.plugin_configs(tree, spec["spec"])
    assert {c.class_name for c in configs} == {c["name"] for c in spec["spec"]["nodeClasses"]}, configs
    for config in configs:
        trees.check_plugin_config(consumers, config, work)
        # The consumer loaded it: the editor's schema, as the release reads files, must not flag it (schemas/ are
        # kept where they agree).
        assert trees.accepted_by_schema("device-plugin-config.schema.json", config.text, tag), config.text
    parted = trees.mig_config(tree, spec["spec"])
    if parted is not None:
        assert parted.release == _mig_manager(tag), (parted.source, tag)  # the tree runs the MIG manager paired
        trees.check_mig_config(consumers, parted, work)
        assert trees.accepted_by_schema("mig-parted-config.schema.json", parted.text), parted.text
    event(f"compiled, device plugin {harnesses.for_release('device-plugin', tag).version}"
          + (f", mig-parted {harnesses.for_release('mig-parted', parted.release).version}" if parted else ""))
