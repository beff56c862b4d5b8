"""The estimated CEL cost of the compiled ValidatingAdmissionPolicies, for pods within a declared envelope.

The API server charges a policy evaluation as it runs (compiler/cel_estimate.py): at most 1,000,000 units per
expression (a variable is a program of its own, charged once per evaluation context) and 10,000,000 per
(policy, binding) evaluation, which the validations, the variables they read and the messageExpressions share
(k8s.io/apiserver v0.30.0 pkg/admission/plugin/policy/validating/validator.go: the messages get what the
validations left; pkg/admission/plugin/cel/composition.go: a variable's cost is reported where it is first read).
The messages run in a context of their own, so every variable is counted twice; matchConditions have a budget of
their own (RuntimeCELCostBudgetMatchConditions, 2,500,000) and are held to the per-expression limit here.

Nothing in the API bounds a pod's lists (a container list has no maxItems), so the estimate is for pods within
`ENVELOPE`, which holds the largest pod the tests measure; a larger pod may cost more, and the policy's
failurePolicy then decides (Ignore beside the webhook).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compiler import cel_estimate
from compiler.cel_estimate import Shape, list_of, map_of, record, text

__all__ = ["ENVELOPE", "PER_CALL_LIMIT", "POLICY_BUDGET", "Envelope", "PolicyCost", "estimate_policy"]

#: k8s.io/apiserver pkg/apis/cel/config.go PerCallLimit and RuntimeCELCostBudget.
PER_CALL_LIMIT = 1_000_000
POLICY_BUDGET = 10_000_000

#: Longest texts the API server accepts where the policies read them (k8s.io/apimachinery validation: a DNS label
#: 63, a DNS subdomain 253, a qualified name a 253-character prefix, '/' and 63 characters; a label value 63).
_NAME, _SUBDOMAIN, _QUALIFIED, _VALUE = 63, 253, 317, 63
_QUANTITY = 32  # a canonical quantity: up to 19 digits of an int64, a sign, a suffix or an exponent
_WORD = 16  # restartPolicy, operators, taint effects
_OPERATION = 7  # CREATE, UPDATE


@dataclass(frozen=True)
class Envelope:
    """The largest pod the estimate holds for: how many of each list, how long each text."""

    containers: int = 300
    init_containers: int = 100
    resources: int = 8
    """Entries in one container's limits, and in its requests."""
    node_selector: int = 16
    terms: int = 8
    """Required node-affinity terms."""
    expressions: int = 8
    """matchExpressions of a term, and its matchFields."""
    values: int = 16
    """Values of one match expression."""
    tolerations: int = 16
    namespace_labels: int = 64

    def describe(self) -> str:
        return (f"up to {self.containers} containers and {self.init_containers} init containers with "
                f"{self.resources} resources each in limits and requests, {self.node_selector} nodeSelector "
                f"entries, {self.terms} required node-affinity terms of {self.expressions} expressions with "
                f"{self.values} values, {self.tolerations} tolerations, {self.namespace_labels} namespace labels, "
                "every name and value as long as the API allows")


ENVELOPE = Envelope()


def pod_spec(envelope: Envelope) -> Shape:
    """A pod spec's fields the policies read, at the envelope's bounds."""
    amounts = map_of(text(_QUALIFIED), text(_QUANTITY), envelope.resources)
    container = record(name=text(_NAME), restartPolicy=text(_WORD), resources=record(limits=amounts, requests=amounts))
    expression = record(key=text(_QUALIFIED), operator=text(_WORD), values=list_of(text(_VALUE), envelope.values))
    term = record(matchExpressions=list_of(expression, envelope.expressions),
                  matchFields=list_of(expression, envelope.expressions))
    toleration = record(key=text(_QUALIFIED), operator=text(_WORD), value=text(_VALUE), effect=text(_WORD))
    required = record(nodeSelectorTerms=list_of(term, envelope.terms))
    return record(containers=list_of(container, envelope.containers),
                  initContainers=list_of(container, envelope.init_containers),
                  nodeSelector=map_of(text(_QUALIFIED), text(_VALUE), envelope.node_selector),
                  affinity=record(nodeAffinity=record(requiredDuringSchedulingIgnoredDuringExecution=required)),
                  tolerations=list_of(toleration, envelope.tolerations), nodeName=text(_SUBDOMAIN))


def scope(path: Sequence[str], envelope: Envelope = ENVELOPE) -> dict[str, Shape]:
    """What a policy reading the pod spec at ``path`` (("spec", "template", "spec")) sees."""
    inner = pod_spec(envelope)
    for part in reversed(path[1:]):
        inner = record(**{part: inner})
    obj = record(kind=text(_NAME), metadata=record(name=text(_SUBDOMAIN)), **{path[0]: inner})
    namespace = record(metadata=record(labels=map_of(text(_QUALIFIED), text(_VALUE), envelope.namespace_labels)))
    return {"object": obj, "oldObject": obj, "request": record(operation=text(_OPERATION)),
            "namespaceObject": namespace}


@dataclass(frozen=True)
class PolicyCost:
    """The most each expression of one policy, and one evaluation of the policy, may cost."""

    variables: Mapping[str, int]
    validations: tuple[int, ...]
    messages: tuple[int, ...]
    match_conditions: tuple[int, ...]
    audit_annotations: tuple[int, ...] = ()

    @property
    def largest(self) -> tuple[str, int]:
        """The costliest expression, by name (a variable) or role."""
        rows = [*self.variables.items(), *(("validation", c) for c in self.validations),
                *(("messageExpression", c) for c in self.messages),
                *(("matchCondition", c) for c in self.match_conditions),
                *(("auditAnnotation", c) for c in self.audit_annotations)]
        return max(rows, key=lambda row: row[1])

    @property
    def total(self) -> int:
        """One evaluation: the validations and messages, every variable read in both contexts."""
        return sum(self.validations) + sum(self.messages) + 2 * sum(self.variables.values())


def estimate_policy(policy: Mapping[str, Any], path: Sequence[str], envelope: Envelope = ENVELOPE) -> PolicyCost:
    """The estimate for one ValidatingAdmissionPolicy object reading the pod spec at ``path``."""
    spec = policy["spec"]
    base = scope(path, envelope)
    shapes: dict[str, Shape] = {}
    costs: dict[str, int] = {}
    for variable in spec.get("variables", []):
        found = cel_estimate.estimate(variable["expression"], cel_estimate.with_variables(base, shapes))
        shapes[variable["name"]], costs[variable["name"]] = found.shape, found.cost
    full = cel_estimate.with_variables(base, shapes)

    def each(expressions: list[str]) -> tuple[int, ...]:
        return tuple(cel_estimate.estimate(e, full).cost for e in expressions)

    validations = spec.get("validations", [])
    return PolicyCost(costs, each([x["expression"] for x in validations]),
                      each([x["messageExpression"] for x in validations if "messageExpression" in x]),
                      each([c["expression"] for c in spec.get("matchConditions", [])]),
                      each([a["valueExpression"] for a in spec.get("auditAnnotations", [])]))
