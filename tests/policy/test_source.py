"""Reading YAML: positions, duplicate keys, YAML 1.1 surprises, documents and hostile input."""

from __future__ import annotations

import pytest

from policy.spec.diagnostics import Span
from policy.spec.source import parse_documents


def only(text: str):
    docs = list(parse_documents(text, filename="f.yaml"))
    assert len(docs) == 1
    return docs[0]


def test_values_and_keys_are_located_one_based() -> None:
    doc = only("a:\n  b: [1, 2]\n  c: x\n")
    assert doc.data == {"a": {"b": [1, 2], "c": "x"}}
    assert doc.source.values[("a", "b", 1)] == Span("f.yaml", 2, 10)
    assert doc.source.keys[("a", "c")] == Span("f.yaml", 3, 3)
    assert doc.source.values[("a", "c")] == Span("f.yaml", 3, 6)


def test_a_missing_path_is_located_at_its_nearest_ancestor() -> None:
    doc = only("a:\n  b: 1\n")
    assert doc.source.span(("a", "zzz", 3)) == Span("f.yaml", 2, 3)


def test_a_duplicate_key_is_an_error_that_names_the_first_occurrence() -> None:
    doc = only("a: 1\nb: 2\na: 3\n")
    [dup] = doc.diagnostics
    assert (dup.code, dup.span, dup.path) == ("duplicate-key", Span("f.yaml", 3, 1), ("a",))
    assert "line 1" in dup.message
    assert doc.data == {"a": 1, "b": 2}


def test_yaml11_booleans_octals_and_base_60_numbers_are_flagged_where_they_stand() -> None:
    doc = only("a: on\nb: No\nc: 0777\nd: 1:20\ne: 'on'\nf: true\ng: 0\nh: 10\n")
    found = {(d.code, d.span.line) for d in doc.diagnostics}
    assert found == {("yaml11-boolean", 1), ("yaml11-boolean", 2), ("yaml11-octal", 3), ("yaml11-sexagesimal", 4)}


def test_an_unquoted_on_key_is_flagged_too() -> None:
    doc = only("on: push\n")
    assert [d.code for d in doc.diagnostics] == ["yaml11-boolean"]


def test_a_syntax_error_is_located_and_nothing_else_is_parsed() -> None:
    doc = only("a: [1, 2\nb: 3\n")
    [err] = doc.diagnostics
    assert err.code == "yaml-syntax" and err.span is not None and err.span.line == 2
    assert doc.data is None


def test_every_document_of_a_stream_is_returned_and_empty_ones_are_skipped() -> None:
    docs = list(parse_documents("a: 1\n---\n---\nb: 2\n", filename="f.yaml"))
    assert [d.data for d in docs] == [{"a": 1}, {"b": 2}]
    assert docs[1].source.values[("b",)] == Span("f.yaml", 4, 4)


def test_merge_keys_are_resolved() -> None:
    doc = only("base: &b {x: 1, y: 2}\nthing:\n  <<: *b\n  y: 3\n")
    assert doc.data["thing"] == {"x": 1, "y": 3}


def test_an_alias_bomb_is_refused_instead_of_expanded() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        prev = chr(ord("a") + i - 1)
        name = chr(ord("a") + i)
        lines.append(f"{name}: &{name} [{', '.join('*' + prev for _ in range(10))}]")
    doc = only("\n".join(lines) + "\n")
    assert doc.data is None
    assert [d.code for d in doc.diagnostics] == ["yaml-syntax"]
    assert "alias bomb" in doc.diagnostics[0].message


def complex_key_bomb(levels: int) -> str:
    """A complex mapping key holding an alias bomb: `? [&a [lol x9], &b [*a x9], ...]` then `: x`."""
    parts = ["&a [" + ", ".join(["lol"] * 9) + "]"]
    for i in range(1, levels):
        name, prev = chr(ord("a") + i), chr(ord("a") + i - 1)
        parts.append(f"&{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "? [" + ", ".join(parts) + "]\n: x\n"


@pytest.mark.parametrize("levels", [5, 6, 9])
def test_a_complex_key_holding_an_alias_bomb_is_refused_unexpanded_and_located(levels: int) -> None:
    text = complex_key_bomb(levels)
    assert len(text) < 400  # 9 levels expand to 387 million nodes: returning at all shows none was built
    doc = only(text)
    assert doc.data is None
    [found] = doc.diagnostics
    assert (found.code, found.span) == ("yaml-syntax", Span("f.yaml", 1, 3))
    assert "a mapping key is a list or a mapping" in found.message and len(found.message) < 200


@pytest.mark.parametrize("text", [
    "spec:\n  nodeClasses:\n    ? {name: a}\n    : x\n",
    "a: 1\n? [b]\n: 2\n",
    "[{? [x]: 1}]\n",
], ids=["mapping key deep in a spec", "sequence key beside a text key", "flow key in a list"])
def test_every_complex_key_is_refused_wherever_it_sits(text: str) -> None:
    doc = only(text)
    assert doc.data is None and [d.code for d in doc.diagnostics] == ["yaml-syntax"]


def test_keys_count_towards_the_node_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from policy.spec import source

    monkeypatch.setattr(source, "_MAX_NODES", 100)
    assert only("".join(f"k{i}: \n" for i in range(49))).data is not None  # 1 + 49 keys + 49 values
    doc = only("".join(f"k{i}: \n" for i in range(51)))
    assert doc.data is None and "alias bomb" in doc.diagnostics[0].message


def test_a_long_duplicate_key_is_quoted_short() -> None:
    key = "k" * 100_000
    doc = only(f"? {key}\n: 1\n? {key}\n: 2\n")  # an explicit key may be longer than 1024 characters
    [found] = doc.diagnostics
    assert found.code == "duplicate-key" and len(found.message) < 500


def test_dates_stay_text() -> None:
    assert only("d: 2026-11-29\n").data == {"d": "2026-11-29"}
