"""The static CEL cost estimate: what the runtime tracker charges wherever sizes are exact and nothing short-circuits,
never less where they are bounds, and a refusal where no bound was declared."""

from __future__ import annotations

import json
from typing import Any

import cel_cost
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import cel_estimate
from compiler.cel_estimate import EstimateError, Shape, estimate, list_of, map_of, record, shape_of, text

# Expressions over exact data: no branch skipped, no loop cut short (all() over trues, exists() over falses).
EXACT = [
    "object.a + 'x'",
    "object.items.map(x, x + 1)",
    "object.items.filter(x, x > 0)",
    "object.items.all(x, x > 0)",
    "object.items.exists(x, x > 9)",
    "object.items.exists_one(x, x > 0)",
    "object.items.map(x, x > 0, x * 2)",
    "object.names.map(n, n + '-' + object.a).join(', ')",
    "object.names.indexOf('bb') + object.items.sum() + object.items.max()",
    "object.names.exists(n, n.startsWith('z')) || 'cc' in object.names",
    "object.labels.exists(k, object.labels[k] == 'z') || object.labels['k1'] == 'v'",
    "object.?missing.orValue([]).size() == 0 && object.?a.orValue('') == 'abc'",
    "quantity(object.q).asInteger() > 0 && isQuantity(object.q) && quantity(object.q).isInteger()",
    "string(object.a) + object.a",
    "object.a.split('b').size() == 2 && object.a.matches('^a.c$')",
    "[object.items.size(), 2].max() == 3 && {'x': object.a}['x'] == object.a",
    "object.nested.map(r, r[0] + r[1]).sum() == 10",
]
DATA: dict[str, Any] = {"a": "abc", "items": [1, 2, 3], "names": ["aa", "bb", "cc"], "labels": {"k1": "v", "k2": "w"},
                        "q": "2k", "nested": [[1, 2], [3, 4]]}


@pytest.mark.parametrize("expression", EXACT)
def test_the_estimate_is_the_runtime_cost_where_sizes_are_exact_and_nothing_short_circuits(expression: str) -> None:
    run = cel_cost.cost_of(expression, {"object": DATA})
    assert not run.error, run.value
    assert estimate(expression, {"object": shape_of(DATA)}).cost == run.cost


def test_the_estimate_bounds_every_value_within_the_declared_shape() -> None:
    shape = record(names=list_of(text(8), 5), labels=map_of(text(10), text(4), 3))
    expression = "object.names.filter(n, n.startsWith('a') || n in object.labels).map(n, n + '!').join(',')"
    bound = estimate(expression, {"object": shape}).cost
    for names, labels in ((["a"], {}), (["abcdefgh"] * 5, {"abcdefghij": "vvvv", "b": "x", "c": "y"}),
                          (["zz", "a1", "q"], {"zz": "1"})):
        assert cel_cost.cost_of(expression, {"object": {"names": names, "labels": labels}}).cost <= bound
    # an int as text is bounded by the longest int64, and a cut-short loop by the whole one
    assert estimate("string(object.items.size()) + object.a", {"object": shape_of(DATA)}).cost >= cel_cost.cost_of(
        "string(object.items.size()) + object.a", {"object": DATA}).cost


def test_both_branches_are_counted_and_the_costlier_kept() -> None:
    cheap, dear = "object.a == 'x'", "object.items.map(x, x).size() > 0"
    shape = {"object": shape_of(DATA)}
    both = estimate(f"{cheap} || {dear}", shape).cost
    assert both == estimate(cheap, shape).cost + estimate(dear, shape).cost
    condition = "object.a == 'y'"
    assert estimate(f"{condition} ? {cheap} : {dear}", shape).cost == (estimate(condition, shape).cost
                                                                          + estimate(dear, shape).cost)


def test_a_field_with_no_declared_bound_is_refused() -> None:
    with pytest.raises(EstimateError, match="no bound declared for spec"):
        estimate("object.spec.containers.size()", {"object": record(kind=text(10))})
    with pytest.raises(EstimateError, match="no bound declared for params"):
        estimate("params.x", {"object": record()})


def test_a_function_without_a_cost_model_is_refused() -> None:
    with pytest.raises(EstimateError, match="no cost model for lowerAscii"):
        estimate("object.a.lowerAscii()", {"object": shape_of(DATA)})


def test_literals_have_their_exact_shape() -> None:
    assert shape_of({"l20": {"nvidia.com/gpu": 8}}).member("l20").member("nvidia.com/gpu") == Shape("scalar")
    assert shape_of(["ab", "abcd"]).item == text(4)


# The policy's data, written as one JSON literal per variable, is estimated from its value without parsing 600 KB of
# CEL per policy at a thousand classes: the figures must be those the parse gives.
JSON_LEAVES = st.one_of(st.text(max_size=12), st.integers(-3, 10**12), st.booleans(), st.none(),
                        st.floats(allow_nan=False, allow_infinity=False))
JSON_DATA = st.recursive(JSON_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                             st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                         max_leaves=20)


# Shapes of the policy's own data (class -> labels, offers, modes, pins): homogeneous, as CEL's literals must be.
NAMES = st.text(max_size=10)
POLICY_DATA = st.dictionaries(NAMES, st.one_of(
    st.lists(NAMES, max_size=3), st.dictionaries(NAMES, st.integers(0, 64), max_size=3),
    st.dictionaries(NAMES, st.lists(NAMES, max_size=2), max_size=3)), max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(JSON_DATA, max_size=4), st.dictionaries(st.text(max_size=8), JSON_DATA, max_size=4),
                 POLICY_DATA))
def test_a_json_literal_is_estimated_from_its_value_as_its_parse_would_be(value: Any) -> None:
    source = json.dumps(value, sort_keys=True, ensure_ascii=False)

    def outcome(work: Any) -> Any:
        try:
            return work()
        except EstimateError as err:  # mixed element types (CEL's homogeneous literals) or what CEL reads otherwise
            return type(err)

    assert outcome(lambda: estimate(source, {})) == outcome(
        lambda: cel_estimate._estimate(cel_estimate.parse(source), {}))


def test_the_policy_s_data_takes_the_quick_answer_and_what_cel_reads_otherwise_does_not() -> None:
    assert cel_estimate._json_literal('{"pool-0000": ["nvidia.com/gpu.", "nvidia.com/mig-"], "n": ["x"]}') is not None
    for source in ('["a\\"b"]', "[-1]", "[1.5]", "[1] + [2]", "{'a': 1}"):
        assert cel_estimate._json_literal(source) is None, source
