"""Generated YAML reads back exactly, in one stable layout: sorted, unwrapped, literal blocks, quoted look-alikes."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from compiler.serialize import dump_json, dump_yaml, is_ambiguous


def test_strings_yaml_1_1_or_go_yaml_would_misread_are_double_quoted() -> None:
    text = dump_yaml({"a": "on", "b": "true", "c": "0777", "d": "1.30", "e": "y", "f": "0o17", "g": "~", "h": ""})
    assert text.decode() == 'a: "on"\nb: "true"\nc: "0777"\nd: "1.30"\ne: "y"\nf: "0o17"\ng: "~"\nh: ""\n'


def test_keys_that_look_like_booleans_are_quoted_too() -> None:
    assert dump_yaml({"on": 1, "n": 2}).decode() == '"n": 2\n"on": 1\n'


def test_plain_strings_stay_plain() -> None:
    for text in ("nvidia.com/gpu", "v0.14.5", "1g.12gb", "compute,utility", "--config-file=/x.yaml"):
        assert not is_ambiguous(text), text
        assert dump_yaml({"k": text}).decode() == f"k: {text}\n"


def test_multi_line_strings_become_literal_blocks() -> None:
    text = dump_yaml({"config": "version: v1\nflags:\n  migStrategy: none\n"}).decode()
    assert text == "config: |\n  version: v1\n  flags:\n    migStrategy: none\n"


def test_keys_are_sorted_and_long_lines_are_never_wrapped() -> None:
    long = "x " * 200 + "end"
    text = dump_yaml({"b": long, "a": 1}).decode()
    assert text.splitlines() == ["a: 1", f"b: '{long}'"] or text.splitlines() == ["a: 1", f"b: {long}"]


def test_a_dict_used_twice_is_written_twice_never_as_an_alias() -> None:
    labels = {"app": "x"}
    text = dump_yaml({"metadata": {"labels": labels}, "selector": labels}).decode()
    assert "&" not in text and "*" not in text
    assert text.count("app: x") == 2


def test_output_is_utf8_with_lf_and_exactly_one_final_newline() -> None:
    data = dump_yaml({"description": "推理节点"})
    assert data == "description: 推理节点\n".encode()
    assert b"\r" not in data
    assert dump_json({"b": 1, "a": [1]}) == b'{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'


@given(st.dictionaries(st.text(min_size=1), st.one_of(st.text(), st.integers(), st.booleans(), st.none())))
def test_any_mapping_of_scalars_reads_back_identically(data: dict[str, object]) -> None:
    text = dump_yaml(data)
    assert yaml.safe_load(text) == data
    assert text.endswith(b"\n")
