"""The table of ClusterPolicy CRD facts (policy/hardware/operator.py CRD_FIELDS): consistent release by release, and the
JSON Schema rendered from it refuses what each release's CRD refuses."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest

from policy.hardware import operator

RELABELING = {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}


def errors(version: str, spec: dict[str, Any]) -> list[str]:
    """What the schema finds wrong with these spec fields, leaving aside the blocks they lack."""
    release = operator.release(version)
    assert release is not None
    schema = operator.crd_schema(release)
    jsonschema.Draft202012Validator.check_schema(schema)
    found = jsonschema.Draft202012Validator(schema).iter_errors({"spec": spec})
    return [e.message for e in found if list(e.absolute_path) != ["spec"] or e.validator != "required"]


def parent(path: str) -> str | None:
    if path.endswith("[]"):
        return path.removesuffix("[]")
    return path.rpartition(".")[0] or None


@pytest.mark.parametrize("release", operator.RELEASES, ids=lambda r: r.version)
def test_every_release_states_each_field_once_under_a_parent_of_the_right_type(release: operator.Release) -> None:
    facts = {}
    for fact in release.crd_fields:
        assert fact.path not in facts, f"{fact.path} is stated twice for {release.version}"
        facts[fact.path] = fact
    for path in facts:
        above = parent(path)
        if above is not None:
            assert above in facts, f"{path} without {above} in {release.version}"
            assert facts[above].type == ("array" if path.endswith("[]") else "object"), path


def test_every_range_runs_between_releases_of_the_table() -> None:
    known = {r.version for r in operator.RELEASES}
    for fact in operator.CRD_FIELDS:
        assert fact.since in known and (fact.until is None or fact.until in known), fact
        assert fact.until is None or operator.parse_version(fact.since) <= operator.parse_version(fact.until)
    # every fact holds in at least one release
    assert all(any(f.holds_in(r.version_tuple) for r in operator.RELEASES) for f in operator.CRD_FIELDS)


def test_every_release_names_the_commit_and_file_its_facts_were_read_from() -> None:
    for release in operator.RELEASES:
        assert re.fullmatch(r"[0-9a-f]{40}", release.commit), release.version
        renamed = release.version_tuple >= (24, 9, 0)
        assert release.crd_source.endswith(f"nvidia.com_clusterpolicies{'' if renamed else '_crd'}.yaml "
                                           f"({release.commit})")
    assert len({r.commit for r in operator.RELEASES}) == len(operator.RELEASES)


def test_what_the_compiler_reads_from_the_table_changes_exactly_where_the_fields_do() -> None:
    for release in operator.RELEASES:
        v = release.version_tuple
        assert release.crd_relabels_dcgm_exporter == (v >= (23, 6, 0)), release.version
        assert release.crd_has_dcgm_exporter_host_pid == (v >= (25, 10, 0)), release.version
        assert release.crd_defaults_mig_config_name == (v <= (25, 10, 1)), release.version
    assert operator.first_with(operator.DCGM_RELABELINGS).version == "v23.6.0"
    assert operator.first_with(operator.DCGM_HOST_PID).version == "v25.10.0"


def test_the_schema_refuses_values_outside_the_crds_enums_and_types() -> None:
    assert errors("v25.3.0", {"mig": {"strategy": "mixed"}, "migManager": {"config": {"default": ""}}}) == []
    assert errors("v25.3.0", {"mig": {"strategy": "mig"}})
    assert errors("v25.3.0", {"migManager": {"config": {"default": "all-enabled"}}})
    assert errors("v25.3.0", {"devicePlugin": {"config": {"name": 7}}})
    assert errors("v25.3.0", {"dcgmExporter": {"serviceMonitor": {"additionalLabels": {"release": 1}}}})
    assert errors("v25.3.0", {"dcgmExporter": {"env": [{"value": "true"}]}})  # an env var needs its name
    assert errors("v25.3.0", {"dcgmExporter": {"serviceMonitor": {"relabelings": [{**RELABELING, "action": "copy"}]}}})


def test_source_labels_must_be_label_names_until_v25_10_and_any_string_from_v26_3() -> None:
    odd = {"dcgmExporter": {"serviceMonitor": {"relabelings": [{**RELABELING, "sourceLabels": ["pod-node"]}]}}}
    assert errors("v25.10.1", odd)
    assert errors("v26.3.0", odd) == []


def test_the_schema_declares_a_field_only_in_the_releases_whose_crd_has_it() -> None:
    def declared(version: str, *path: str) -> bool:
        release = operator.release(version)
        assert release is not None
        node: Any = operator.crd_schema(release)
        for part in path:
            node = node.get("properties", {}).get(part)
            if node is None:
                return False
        return True

    assert not declared("v23.3.2", "spec", "dcgmExporter", "serviceMonitor", "relabelings")
    assert declared("v23.6.0", "spec", "dcgmExporter", "serviceMonitor", "relabelings")
    assert not declared("v25.3.4", "spec", "dcgmExporter", "hostPID")
    assert declared("v25.10.0", "spec", "dcgmExporter", "hostPID")
