"""Advice: small specs that contradict the decision matrix get exactly the expected codes, at exact paths."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import get_args

import pytest

from policy.checks import advice
from policy.load import load_policy
from policy.spec.diagnostics import Diagnostic
from policy.spec.model import ClusterGPUPolicy

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "clusters").glob("*/cluster.yaml"))

HEADER = """\
apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata: {name: advice}
spec:
  devicePlugin: {version: v0.17.1}
"""


def policy_of(body: str) -> ClusterGPUPolicy:
    """A checked policy from the spec body (indented under spec:); fails the test if it does not validate."""
    text = HEADER + textwrap.indent(textwrap.dedent(body), "  ")
    result = load_policy(text, filename="advice.yaml")
    errors = [f"{d.code}: {d.message}" for d in result.diagnostics if d.severity == "error"]
    assert result.ok and result.policy is not None, errors
    return result.policy


def found(body: str) -> list[tuple[str, str, tuple[str | int, ...]]]:
    return [(d.code, d.severity, d.path) for d in advice.advise(policy_of(body))]


L20_SIZED = """\
- name: l20
  nodeSelector: {pool: l20}
  gpu: {model: NVIDIA-L20, count: 1}
  sharing: {timeSlicing: {sizing: {memoryPerReplica: 4621Mi, reserve: 10%}}}
"""
H100_MIG = """\
- name: h100-mig
  nodeSelector: {pool: h100-mig}
  gpu: {model: H100, count: 8}
  sharing: {mig: {layout: {1g.10gb: 7}}}
"""


def classes(*items: str) -> str:
    return "nodeClasses:\n" + "".join(textwrap.indent(textwrap.dedent(i), "  ") for i in items)


def test_the_seed_spec_sized_from_measured_memory_gets_no_advice() -> None:
    assert found(classes(L20_SIZED)) == []


def test_a_production_tenant_that_may_land_on_time_sliced_gpus_is_warned_at_its_allow_list() -> None:
    body = classes(L20_SIZED) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [time-slicing, exclusive]
          production: true
        """)
    assert found(body) == [
        ("production-tenant-without-memory-isolation", "warning", ("spec", "tenants", 0, "allow")),
    ]


def test_the_production_warning_names_the_class_and_mode() -> None:
    body = classes(L20_SIZED) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [time-slicing]
          production: true
        """)
    (d,) = advice.advise(policy_of(body))
    assert d == Diagnostic(
        "production-tenant-without-memory-isolation",
        "production tenant 'prod' may land on GPUs shared without memory isolation: l20 (time-slicing); "
        "one pod's OOM or fault reaches its neighbours",
        ("spec", "tenants", 0, "allow"),
        "allow only mig and exclusive for this tenant, or pin it to isolated classes with classes:",
        severity="warning",
    )


def test_a_production_tenant_limited_to_mig_and_whole_gpus_gets_no_advice() -> None:
    body = classes(L20_SIZED, H100_MIG) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [mig, exclusive]
          production: true
        """)
    assert found(body) == []


def test_a_production_tenant_pinned_away_from_shared_classes_gets_no_advice() -> None:
    body = classes(L20_SIZED, H100_MIG) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [mig, time-slicing]
          classes: [h100-mig]
          production: true
        """)
    assert found(body) == []


def test_time_slicing_on_mig_instances_counts_as_shared_memory_for_production() -> None:
    body = classes("""\
        - name: h20
          nodeSelector: {pool: h20}
          gpu: {model: H20, count: 8}
          sharing: {mig: {layout: {1g.12gb: 7}, timeSlicing: {1g.12gb: 2}}}
        """) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [mig, time-slicing]
          production: true
        """)
    assert found(body) == [
        ("production-tenant-without-memory-isolation", "warning", ("spec", "tenants", 0, "allow")),
    ]


def test_a_mig_capable_gpu_time_sliced_for_a_production_tenant_suggests_mig() -> None:
    body = classes("""\
        - name: a100
          nodeSelector: {pool: a100}
          gpu: {model: A100-SXM4-80GB, count: 4}
          sharing: {timeSlicing: {sizing: {memoryPerReplica: 20Gi}}}
        """) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [time-slicing]
          production: true
        """)
    assert found(body) == [
        ("mig-capable-gpu-time-sliced", "info", ("spec", "nodeClasses", 0, "sharing", "timeSlicing")),
        ("production-tenant-without-memory-isolation", "warning", ("spec", "tenants", 0, "allow")),
    ]


def test_a_mig_capable_gpu_time_sliced_for_development_only_gets_no_mig_advice() -> None:
    body = classes("""\
        - name: a100
          nodeSelector: {pool: a100}
          gpu: {model: A100-SXM4-80GB, count: 4}
          sharing: {timeSlicing: {sizing: {memoryPerReplica: 20Gi}}}
        """) + textwrap.dedent("""\
        tenants:
        - name: dev
          namespaceSelector: {matchLabels: {tier: dev}}
          allow: [time-slicing]
        """)
    assert found(body) == []


def test_replicas_without_sizing_that_leave_under_4_gib_each_are_warned_at_replicas() -> None:
    body = classes("""\
        - name: t4
          nodeSelector: {pool: t4}
          gpu: {model: T4, count: 1}
          sharing: {timeSlicing: {replicas: 8}}
        """)
    assert found(body) == [
        ("time-slicing-without-sizing", "warning", ("spec", "nodeClasses", 0, "sharing", "timeSlicing", "replicas")),
    ]


def test_replicas_without_sizing_that_leave_enough_memory_are_fine() -> None:
    body = classes("""\
        - name: l20
          nodeSelector: {pool: l20}
          gpu: {model: L20, count: 1}
          sharing: {timeSlicing: {replicas: 8}}
        """)
    assert found(body) == []


def test_time_sliced_mig_profiles_too_small_per_replica_are_warned_at_the_profile() -> None:
    body = classes("""\
        - name: h100
          nodeSelector: {pool: h100}
          gpu: {model: H100, count: 8}
          sharing: {mig: {layout: {1g.10gb: 7}, timeSlicing: {1g.10gb: 4}}}
        """)
    assert found(body) == [
        ("time-slicing-without-sizing", "warning",
         ("spec", "nodeClasses", 0, "sharing", "mig", "timeSlicing", "1g.10gb")),
    ]


@pytest.mark.parametrize("sharing", ["{timeSlicing: {replicas: 8}}",
                                     "{mig: {layout: {1g.10gb: 7}, timeSlicing: {1g.10gb: 4}}}"])
def test_the_share_per_replica_is_the_offer_s_slot_memory(sharing: str) -> None:
    # One figure for what a slot can count on: the offer's, which admission, REPORT.md and the pictures show.
    from policy.resolved.resolve import resolve

    model = "T4" if "timeSlicing: {replicas" in sharing else "H100"
    policy = policy_of(f"""\
        nodeClasses:
          - name: c
            nodeSelector: {{pool: c}}
            gpu: {{model: {model}, count: 1}}
            sharing: {sharing}
        """)
    (offer,) = [o for o in resolve(policy).classes[0].offers if o.shared]
    (finding,) = advice.advise(policy)
    assert f"= {offer.slot_memory_mib} MiB per replica" in finding.message, finding.message
    assert f"/ {offer.replicas} replicas" in finding.message


def test_disabling_fail_requests_greater_than_one_is_an_info_at_the_flag() -> None:
    body = classes("""\
        - name: l20
          nodeSelector: {pool: l20}
          gpu: {model: L20, count: 1}
          sharing: {timeSlicing: {replicas: 4, failRequestsGreaterThanOne: false}}
        """)
    assert found(body) == [
        ("fail-requests-greater-than-one-disabled", "info",
         ("spec", "nodeClasses", 0, "sharing", "timeSlicing", "failRequestsGreaterThanOne")),
    ]


def test_rename_by_default_is_an_info_at_the_flag() -> None:
    body = classes("""\
        - name: l20
          nodeSelector: {pool: l20}
          gpu: {model: L20, count: 1}
          sharing: {timeSlicing: {replicas: 4, renameByDefault: true}}
        """)
    assert found(body) == [
        ("rename-by-default-breaks-requests", "info",
         ("spec", "nodeClasses", 0, "sharing", "timeSlicing", "renameByDefault")),
    ]


def test_mps_on_a_pascal_gpu_outside_the_catalog_is_warned() -> None:
    body = classes("""\
        - name: p100
          nodeSelector: {pool: p100}
          gpu: {model: Tesla-P100-PCIE-16GB, count: 2, memory: 16280Mi}
          sharing: {mps: {replicas: 4}}
        """)
    assert found(body) == [
        ("mps-on-pre-volta", "warning", ("spec", "nodeClasses", 0, "sharing", "mps")),
    ]


def test_mps_on_volta_and_newer_gets_no_pre_volta_advice() -> None:
    body = classes("""\
        - name: v100
          nodeSelector: {pool: v100}
          gpu: {model: Tesla-V100-SXM2-32GB, count: 8}
          sharing: {mps: {replicas: 4}}
        """)
    assert found(body) == []


def test_a_training_class_that_shares_its_gpus_is_an_info_at_sharing() -> None:
    body = classes("""\
        - name: h100-train
          nodeSelector: {pool: train}
          gpu: {model: H100, count: 8}
          sharing: {timeSlicing: {replicas: 2}}
        """)
    assert found(body) == [
        ("training-on-shared-gpus", "info", ("spec", "nodeClasses", 0, "sharing")),
    ]


def test_a_training_tenant_without_whole_gpus_is_an_info_at_allow() -> None:
    body = classes(L20_SIZED) + textwrap.dedent("""\
        tenants:
        - name: training
          namespaceSelector: {matchLabels: {tier: training}}
          allow: [time-slicing]
        """)
    assert found(body) == [("training-on-shared-gpus", "info", ("spec", "tenants", 0, "allow"))]


def test_words_that_merely_contain_train_are_not_training() -> None:
    body = classes("""\
        - name: constrained
          description: strained budget pool
          nodeSelector: {pool: c}
          gpu: {model: L20, count: 1}
          sharing: {timeSlicing: {replicas: 4}}
        """)
    assert found(body) == []


def test_admission_with_one_replica_and_ignore_gets_both_infos() -> None:
    body = classes(L20_SIZED) + "admission: {replicas: 1, failurePolicy: Ignore}\n"
    assert found(body) == [
        ("failure-policy-ignore", "info", ("spec", "admission", "failurePolicy")),
        ("single-replica-webhook", "info", ("spec", "admission", "replicas")),
    ]


def test_disabled_admission_gets_no_admission_advice() -> None:
    body = classes(L20_SIZED) + "admission: {enabled: false, replicas: 1, failurePolicy: Ignore}\n"
    assert found(body) == []


def test_admission_enforced_by_validating_admission_policies_alone_gets_no_webhook_advice() -> None:
    # No webhook runs, so it has no replicas to drain nor outage to let workloads through.
    body = (classes(L20_SIZED)
            + "kubernetesVersion: '1.31'\nadmission: {engine: vap, replicas: 1, failurePolicy: Ignore}\n")
    assert found(body) == []
    assert len(found(body.replace("engine: vap", "engine: both"))) == 2


def test_advice_is_sorted_classes_then_tenants_then_admission() -> None:
    body = classes(L20_SIZED, *(f"""\
        - name: c{n}
          nodeSelector: {{pool: c{n}}}
          gpu: {{model: T4, count: 1}}
          sharing: {{timeSlicing: {{replicas: 8}}}}
        """ for n in range(11))) + textwrap.dedent("""\
        tenants:
        - name: prod
          namespaceSelector: {matchLabels: {tier: prod}}
          allow: [time-slicing]
          production: true
        admission: {replicas: 1}
        """)
    paths = [d.path[:3] for d in advice.advise(policy_of(body))]
    assert paths == [*(("spec", "nodeClasses", n) for n in range(1, 12)),
                     ("spec", "tenants", 0), ("spec", "admission", "replicas")]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.parent.name for e in EXAMPLES])
def test_advice_on_the_bundled_examples_is_never_an_error(example: Path) -> None:
    result = load_policy(example.read_text(), filename=str(example))
    assert result.policy is not None
    assert all(d.severity in {"warning", "info"} for d in advice.advise(result.policy))


def test_every_advice_code_is_declared_with_a_severity_that_is_not_error() -> None:
    assert set(advice.CODES) == set(get_args(advice.AdviceCode))
    assert {severity for severity, _ in advice.CODES.values()} <= {"warning", "info"}


def test_every_advice_code_is_documented_in_the_sharing_modes_guide() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "sharing-modes.md").read_text()
    missing = [code for code in advice.CODES if f"`{code}`" not in guide]
    assert not missing, f"add these codes to docs/sharing-modes.md: {missing}"
