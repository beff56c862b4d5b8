"""The review budget in the HTTP layer: a review out of time is denied (never allowed), counted and logged."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from webhook_support import ScriptedEngine, admission_review, compiled_policy, container, workload

from webhook import create_app
from webhook.settings import Settings, SettingsError
from webhook.store import PolicyStore

JSON = "application/json"


def client_with_budget(tmp_path: Path, seconds: float):  # type: ignore[no-untyped-def]
    path = tmp_path / "admission-policy.json"
    path.write_text(compiled_policy("tke-l20-t4").to_json())
    return create_app(Settings(policy_file=path, review_budget_seconds=seconds)).test_client()


def post(client, obj):  # type: ignore[no-untyped-def]
    return client.post("/validate", data=json.dumps(admission_review(obj)), content_type=JSON)


def decisions(client) -> dict[tuple[str, str], float]:  # type: ignore[no-untyped-def]
    body = client.get("/metrics").get_data(as_text=True)
    return {(s.labels["rule"], s.labels["outcome"]): s.value for family in text_string_to_metric_families(body)
            for s in family.samples if s.name == "gpupolicy_admission_decisions_total"}


def test_a_review_whose_budget_runs_out_is_denied_named_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = client_with_budget(tmp_path, 1e-6)  # out of time before the rules run, on any machine
    with caplog.at_level(logging.INFO, logger="gpupolicy.webhook"):
        answer = post(client, workload("Pod", container(gpus=1)))
    assert answer.status_code == 200
    response = answer.json["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith("gpupolicy could not decide Pod ml/trainer within its review budget (the time ran out "
                              "while applying the rules)")
    assert "refused rather than admitted unchecked" in message and "--review-budget" in message
    assert decisions(client)[("review-budget-exceeded", "deny")] == 1
    [line] = [r for r in caplog.records if "rules=review-budget-exceeded" in r.getMessage()]
    assert line.levelno == logging.WARNING and "verdict=deny" in line.getMessage()


def test_an_object_without_gpus_needs_no_budget(tmp_path: Path) -> None:
    client = client_with_budget(tmp_path, 1e-6)
    answer = post(client, workload("Pod", container(gpus=None)))
    assert answer.json["response"]["allowed"] is True


def test_with_the_default_budget_the_engine_is_given_a_deadline_not_yet_past(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    path = tmp_path / "policy.json"
    path.write_text(compiled_policy("tke-l20-t4").to_json())
    store = PolicyStore(path, interval_seconds=0, engine_factory=lambda _: engine)
    client = create_app(Settings(), store=store).test_client()
    post(client, workload("Pod", container(gpus=1)))
    [call] = engine.calls
    assert call["expired"]() is False


@pytest.mark.parametrize("seconds", ["0", "-1", "31", "nan"])
def test_a_budget_out_of_range_is_a_settings_error(seconds: str) -> None:
    with pytest.raises(SettingsError, match="review budget"):
        Settings.from_env({"GPUPOLICY_REVIEW_BUDGET_SECONDS": seconds})
