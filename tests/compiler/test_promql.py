"""PromQL as data: escaping, precedence, line breaks, and the exporters' label conventions."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from prometheus_cluster import check_queries

from compiler.targets.monitoring import signals
from compiler.targets.monitoring.promql import (
    _KEYWORDS,
    RATE_INTERVAL,
    Binary,
    Expr,
    Matcher,
    Selector,
    add,
    aggregate,
    and_,
    call,
    cmp,
    div,
    eq,
    escape_regex,
    mul,
    number,
    one_of,
    or_,
    render,
    render_lines,
    sel,
    sub,
    unless,
)


def test_label_values_are_quoted_and_escaped() -> None:
    assert render(sel("m", eq("a", 'say "hi"\\now'))) == 'm{a="say \\"hi\\"\\\\now"}'
    assert render(sel("m", eq("a", "two\nlines"))) == 'm{a="two\\nlines"}'


def test_one_of_escapes_regex_metacharacters_and_sorts() -> None:
    assert render(sel("m", one_of("r", ["nvidia.com/mig-1g.12gb", "a|b"]))) == (
        'm{r=~"a\\\\|b|nvidia\\\\.com/mig-1g\\\\.12gb"}')
    assert escape_regex("1g.10gb+me") == "1g\\.10gb\\+me"
    with pytest.raises(ValueError):
        one_of("r", [])


def test_names_are_checked() -> None:
    for bad in ("1abc", "a-b", "node.name"):
        with pytest.raises(ValueError):
            Matcher(bad, "=", "x")
    with pytest.raises(ValueError):
        Selector("kube-node")
    with pytest.raises(ValueError):
        Selector("m", range="5 minutes")
    for keyword in ("on", "bool", "sum", "Inf"):
        with pytest.raises(ValueError):
            Selector(keyword)
    assert render(sel("m").over(RATE_INTERVAL)) == "m[$__rate_interval]"
    with pytest.raises(ValueError):
        Binary("and", sel("a"), sel("b"), group_left=())
    with pytest.raises(ValueError):
        cmp(sel("a"), "+", sel("b"))


def test_operands_get_parentheses_exactly_where_precedence_needs_them() -> None:
    a, b, c = sel("a"), sel("b"), sel("c")
    assert render(mul(add(a, b), c)) == "(a + b) * c"
    assert render(add(mul(a, b), c)) == "a * b + c"
    assert render(sub(a, sub(b, c))) == "a - (b - c)"
    assert render(sub(sub(a, b), c)) == "a - b - c"
    assert render(cmp(div(a, b), ">", number(0.9))) == "a / b > 0.9"
    assert render(and_(cmp(a, ">", number(0)), cmp(b, "==", number(1)), on=("node",))) == (
        "a > 0 and on (node) b == 1")
    # a different set operator of the same level is parenthesised for the reader
    assert render(and_(unless(a, b), c)) == "(a unless b) and c"
    assert render(or_(a, b, c)) == "a or b or c"
    assert render(mul(cmp(a, ">", number(0)), b, on=("node",), group_left=("class",))) == (
        "(a > 0) * on (node) group_left (class) b")
    assert render(cmp(a, ">", b, on=("class",), group_left=())) == "a > on (class) group_left b"


def test_aggregations_and_calls() -> None:
    assert render(aggregate("max", sel("m"), ("node", "resource"))) == "max by (node, resource) (m)"
    assert render(aggregate("count", sel("m"))) == "count (m)"
    assert render(call("histogram_quantile", number(0.99), aggregate("sum", sel("b"), ("le",)))) == (
        "histogram_quantile(0.99, sum by (le) (b))")
    assert render(call("vector", number(4621))) == "vector(4621)"


def test_long_expressions_break_at_their_outermost_operators() -> None:
    long = sel("kube_node_status_allocatable", eq("resource", "nvidia_com_gpu" * 4), eq("node", "n" * 40))
    flat = render(long)
    # a broken operand is parenthesised and indented; one that fits its line stays as it is
    assert render_lines(or_(cmp(long, "!=", sel("b")), unless(sel("b"), long))).splitlines() == [
        f"{flat} != b", "or", "(", "  b", "  unless", f"  {flat}", ")"]
    assert render_lines(sel("short")) == "short"
    # a short right operand closes the line of its left one
    assert render_lines(cmp(aggregate("sum", long, ("node",)), ">", number(0))).endswith(") > 0")


_ident = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda name: name not in _KEYWORDS)
_value = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def _exprs(draw: st.DrawFn, depth: int = 3) -> Expr:
    leaf = sel(draw(_ident), eq(draw(_ident), draw(_value)))
    if depth == 0 or draw(st.booleans()):
        return leaf
    op = draw(st.sampled_from(["+", "-", "*", "/", ">", "==", "and", "or", "unless"]))
    return Binary(op, draw(_exprs(depth - 1)), draw(_exprs(depth - 1)))


@settings(max_examples=10, phases=(Phase.explicit, Phase.generate))  # each example runs promtool: no shrinking
@given(st.lists(_exprs(), min_size=20, max_size=20))
def test_promtool_parses_whatever_the_builders_render(exprs: list[Expr]) -> None:
    # One promtool call per batch: every expression, flat and broken over lines, must parse.
    with tempfile.TemporaryDirectory() as tmp:
        done = check_queries([text for e in exprs for text in (render(e), render_lines(e))], Path(tmp))
    assert done.returncode == 0, done.stdout + done.stderr


# ----------------------------------------------------------------------------------------- signals


@pytest.mark.parametrize(("key", "label"), [
    ("nvidia.com/gpu.product", "label_nvidia_com_gpu_product"),
    ("node.kubernetes.io/instance-type", "label_node_kubernetes_io_instance_type"),
    ("nvidia.com/mig-1g.12gb.replicas", "label_nvidia_com_mig_1g_12gb_replicas"),
    ("nodePool", "label_node_pool"),  # kube-state-metrics snake_cases camelCase keys
    ("gpu-pool", "label_gpu_pool"),
])
def test_kube_state_metrics_label_names(key: str, label: str) -> None:
    assert signals.ksm_label(key) == label


@pytest.mark.parametrize(("resource", "label"), [
    ("nvidia.com/gpu", "nvidia_com_gpu"),
    ("nvidia.com/gpu.shared", "nvidia_com_gpu_shared"),
    ("nvidia.com/mig-1g.12gb", "nvidia_com_mig_1g_12gb"),
    ("nvidia.com/mig-3g.40gb", "nvidia_com_mig_3g_40gb"),
])
def test_kube_state_metrics_resource_names(resource: str, label: str) -> None:
    assert signals.ksm_resource(resource) == label
    assert render(signals.nvidia("m")) == 'm{resource=~"nvidia_com_.+"}'
