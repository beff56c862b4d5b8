"""policy.kube.cron: CronJob schedules accepted and refused as kube-apiserver's validation (robfig/cron v3
ParseStandard) does, and spec.audit's located errors."""

from __future__ import annotations

import pytest

from policy.kube.cron import schedule_problem
from policy.load import load_policy


@pytest.mark.parametrize("schedule", [
    "17 * * * *", "*/15 * * * *", "0 3 * * 1-5", "0 0 1,15 * *", "30 2 * JAN-MAR sun", "0 0 ? * MON",
    "5-55/10 */2 * * *", "@hourly", "@daily", "@every 1h30m", "0 12 31 12 6",
])
def test_a_schedule_the_api_server_accepts_has_no_problem(schedule: str) -> None:
    assert schedule_problem(schedule) is None


@pytest.mark.parametrize(("schedule", "problem"), [
    ("60 * * * *", "the minute field '60': 60 is outside 0-59"),
    ("* 24 * * *", "the hour field '24': 24 is outside 0-23"),
    ("* * 0 * *", "the day of month field '0': 0 is outside 1-31"),
    ("* * * 13 *", "the month field '13': 13 is outside 1-12"),
    ("* * * * 7", "the day of week field '7': 7 is outside 0-6"),
    ("* * * *", "expected 5 fields (minute hour day-of-month month day-of-week), found 4"),
    ("0 0 * * * *", "expected 5 fields (minute hour day-of-month month day-of-week), found 6"),
    ("*/0 * * * *", "the minute field '*/0': the step '0' must be a whole number above 0"),
    ("30-10 * * * *", "the minute field '30-10': the range 30-10 runs backwards"),
    ("* * * FOO *", "the month field 'FOO': 'FOO' is not a number or a name"),
    ("@often", "@often is not a descriptor"),
    ("@every soon", "@every needs a duration such as 1h30m, got 'soon'"),
    ("TZ=UTC 0 * * * *", "a TZ= or CRON_TZ= prefix is refused"),
    ("", "the schedule is empty"),
])
def test_a_schedule_the_api_server_refuses_says_why(schedule: str, problem: str) -> None:
    found = schedule_problem(schedule)
    assert found is not None and found.startswith(problem), found


SPEC = """apiVersion: gpupolicy.dev/v1alpha1
kind: ClusterGPUPolicy
metadata:
  name: demo
spec:
  nodeClasses:
    - name: t4
      nodeSelector: {pool: t4}
      gpu: {model: T4, count: 1}
      sharing:
        timeSlicing: {replicas: 4}
  audit:
"""


def errors(audit: str) -> list[tuple[str, str, int, int, str]]:
    result = load_policy(SPEC + audit, filename="cluster.yaml")
    return [(d.code, ".".join(map(str, d.path)), d.span.line, d.span.column, d.hint) for d in result.diagnostics
            if d.severity == "error" and d.span is not None]


def test_the_audit_section_is_off_by_default_with_the_webhooks_image_and_namespace() -> None:
    result = load_policy(SPEC.removesuffix("  audit:\n"), filename="cluster.yaml")
    spec = result.policy.spec
    assert not spec.audit.enabled and spec.audit.schedule == "17 * * * *" and spec.audit.format == "policy-report"
    assert spec.audit_image == spec.admission.image and spec.audit_namespace == spec.admission.namespace
    assert spec.audit.resources.requests == {"cpu": "100m", "memory": "256Mi"}
    assert spec.audit.resources.limits == {"memory": "512Mi"}


def test_a_bad_schedule_is_located_with_a_fix() -> None:
    assert errors("    enabled: true\n    schedule: '0 0 * * 8'\n") == [
        ("invalid-value", "spec.audit.schedule", 14, 15,
         "write five fields, minute hour day-of-month month day-of-week, e.g. '17 * * * *' (hourly at :17), or "
         "@hourly")]


def test_resources_are_quantities_and_a_limit_is_never_below_its_request() -> None:
    assert errors("    resources:\n      limits: {memory: lots}\n") == [
        ("invalid-value", "spec.audit.resources.limits.memory", 14, 24, "write e.g. 500m (CPU) or 512Mi (memory)")]
    assert errors("    resources:\n      requests: {memory: 1Gi}\n      limits: {memory: 512Mi}\n") == [
        ("invalid-value", "spec.audit.resources", 14, 7, "raise limits.memory to at least 1Gi, or lower the request")]
    assert [e[:2] for e in errors("    resources:\n      limits: {gpu: 1}\n")] == [
        ("invalid-value", "spec.audit.resources.limits.gpu")]


def test_the_format_max_results_and_namespace_are_checked() -> None:
    assert [e[:2] for e in errors("    format: policyreport\n    maxResults: -1\n    namespace: Audit\n")] == [
        ("invalid-value", "spec.audit.format"), ("invalid-value", "spec.audit.maxResults"),
        ("invalid-value", "spec.audit.namespace")]
