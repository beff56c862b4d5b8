"""The Kubernetes CEL library functions the test support implements (tests/cel_vap.py), each checked against the
examples of its own documentation, and declared only from the Kubernetes version that accepts it.

Sources, at the releases Kubernetes 1.30 runs (k8s.io/apiserver v0.30.0, cel-go v0.17.8); kubernetes.io's
"Common Expression Language in Kubernetes" page (docs/reference/using-api/cel) renders the same examples:
- lists: k8s.io/apiserver@v0.30.0 pkg/cel/library/lists.go, the doc comment of Lists();
- quantity: k8s.io/apiserver@v0.30.0 pkg/cel/library/quantity.go, the doc comment of Quantity();
- join and split: google/cel-go@v0.17.8 ext/strings.go, the doc comment of Strings();
- versions: k8s.io/apiserver@v0.30.0 pkg/cel/environment/base.go (quantity and optionals introduced in 1.28,
  strings version 2 with join in 1.29; a new expression is compiled against the previous minor's environment).
"""

from __future__ import annotations

from typing import Any

import pytest
from cel_k8s import CelError
from cel_vap import compile_in, parse_quantity


def run(expression: str, minor: int = 30) -> Any:
    result = compile_in(expression, minor).eval(data={})
    if result.type().name() == "ERROR":
        raise CelError(str(result.value()))
    return result.plain_value()


# Every example the policies' functions document, with its documented result ("error" for an error). Examples
# of overloads the policies never use (durations, lastIndexOf, isSorted, split with a limit) are left out: the
# test support does not declare them.
DOCUMENTED: list[tuple[str, str, Any]] = [
    # lists.go: sum
    ("lists.go", "[1, 3].sum()", 4),
    ("lists.go", "[1.0, 3.0].sum()", 4.0),
    ("lists.go", "[].sum()", 0),
    # lists.go: min / max
    ("lists.go", "[1, 3].min()", 1),
    ("lists.go", "[1, 3].max()", 3),
    ("lists.go", "[].min()", "error"),
    ("lists.go", "[1].min()", 1),
    # lists.go: indexOf
    ("lists.go", "[1, 2, 2, 3].indexOf(2)", 1),
    ("lists.go", "[].indexOf('string')", -1),
    # quantity.go: quantity
    ("quantity.go", "quantity('1.5G') == quantity('1500M')", True),
    ("quantity.go", "quantity('200k') == quantity('200000')", True),
    ("quantity.go", "quantity('200K')", "error"),
    ("quantity.go", "quantity('Three')", "error"),
    # quantity.go: isQuantity
    ("quantity.go", "isQuantity('1.3G')", True),
    ("quantity.go", "isQuantity('1.3Gi')", True),
    ("quantity.go", "isQuantity('1,3G')", False),
    ("quantity.go", "isQuantity('10000k')", True),
    ("quantity.go", "isQuantity('200K')", False),
    ("quantity.go", "isQuantity('Three')", False),
    # quantity.go: isInteger / asInteger
    ("quantity.go", 'quantity("50000000G").isInteger()', True),
    ("quantity.go", 'quantity("50k").isInteger()', True),
    ("quantity.go", 'quantity("9999999999999999999999999999999999999G").asInteger()', "error"),
    ("quantity.go", 'quantity("9999999999999999999999999999999999999G").isInteger()', False),
    ("quantity.go", 'quantity("50k").asInteger() == 50000', True),
    # quantity.go: comparisons
    ("quantity.go", 'quantity("200M").compareTo(quantity("0.2G"))', 0),
    ("quantity.go", 'quantity("50M").compareTo(quantity("50Mi"))', -1),
    ("quantity.go", 'quantity("50Mi").compareTo(quantity("50M"))', 1),
    ("quantity.go", 'quantity("150Mi").isGreaterThan(quantity("100Mi"))', True),
    ("quantity.go", 'quantity("50Mi").isGreaterThan(quantity("100Mi"))', False),
    ("quantity.go", 'quantity("50M").isLessThan(quantity("100M"))', True),
    ("quantity.go", 'quantity("100M").isLessThan(quantity("50M"))', False),
    # strings.go: join (version 2) and split
    ("strings.go", "['hello', 'mellow'].join()", "hellomellow"),
    ("strings.go", "['hello', 'mellow'].join(' ')", "hello mellow"),
    ("strings.go", "[].join()", ""),
    ("strings.go", "[].join('/')", ""),
    ("strings.go", "'hello hello hello'.split(' ')", ["hello", "hello", "hello"]),
]


@pytest.mark.parametrize(("source", "expression", "expected"), DOCUMENTED, ids=[e for _, e, _ in DOCUMENTED])
def test_each_library_function_gives_its_documented_result(source: str, expression: str, expected: Any) -> None:
    if expected == "error":
        with pytest.raises(CelError):
            run(expression)
    else:
        assert run(expression) == expected


def test_a_bare_suffix_is_zero_as_the_parser_reads_it_not_an_error_as_the_comment_says() -> None:
    # quantity.go's comment lists quantity('Mi') as an error and isQuantity('Mi') as false, but the function calls
    # resource.ParseQuantity, whose parseQuantityString takes an empty numerator as 0 and 'Mi' as its suffix
    # (k8s.io/apimachinery@v0.30.0 pkg/api/resource/quantity.go: "if we stripped all numerator positions, always
    # return 0"), and the library's own tests (quantity_test.go) never try it. The API server runs the code.
    assert run("isQuantity('Mi')") is True
    assert run("quantity('Mi') == quantity('0')") is True


def test_quantities_keep_nano_precision_rounding_their_magnitude_up() -> None:
    # resource.Quantity keeps at most nine decimal places (scale Nano) and rounds away from zero.
    assert parse_quantity("1.0000000001") == parse_quantity("1000000001n")
    assert parse_quantity("-1.0000000001") == -parse_quantity("1000000001n")
    assert parse_quantity("1Ki") == 1024 and parse_quantity("1e3") == 1000 and parse_quantity("1500m") * 2 == 3


def test_quantity_reads_its_text_as_it_is() -> None:
    # quantity() gets the text itself: only Quantity.UnmarshalJSON trims white space.
    assert run("isQuantity(' 1')") is False


@pytest.mark.parametrize(("expression", "since"), [
    ("quantity('1').asInteger() == 1", 29),
    ("isQuantity('1')", 29),
    ("{'a': 1}.?a.orValue(0) == 1", 29),
    ("['a', 'b'].join(',') == 'a,b'", 30),
    ("[1, 2].sum() == 3", 0),
    ("'a,b'.split(',').size() == 2", 0),
])
def test_each_function_compiles_from_the_first_version_whose_api_server_accepts_it(expression: str,
                                                                                   since: int) -> None:
    assert run(expression, max(since, 30)) is True
    if since > 0:
        assert run(expression, since) is True
        with pytest.raises(CelError, match="compile"):
            compile_in(expression, since - 1)


@pytest.mark.parametrize("expression", ["quantity('1').sign()", "quantity('1').add(1)", "[1].isSorted()",
                                        "[1].lastIndexOf(1)", "'a b'.split(' ', 1)", "[[1]].flatten()"])
def test_what_the_policies_do_not_use_is_not_declared(expression: str) -> None:
    with pytest.raises(CelError, match="compile"):
        compile_in(expression, 35)
