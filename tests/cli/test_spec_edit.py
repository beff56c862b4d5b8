"""Editing a spec's sharing blocks in place: the comments around them stay where the user put them."""

from __future__ import annotations

from cli.spec_edit import edit_spec

SPEC = """\
# header
spec:
  devicePlugin:  # found
    version: v0.17.1
  nodeClasses:
    # class a
    - name: a
      # TODO: choose the sharing mode
      sharing: exclusive
    # class b
    - name: b
      sharing:
        timeSlicing:
          replicas: 4  # what the nodes run
    # class c
    - name: c
      sharing:
        mps: {replicas: 2}

    # the end
"""


def test_replaced_blocks_keep_the_comments_that_follow_them() -> None:
    sizing = {"timeSlicing": {"sizing": {"memoryPerReplica": "4621Mi", "reserve": "10%"}}}
    out = edit_spec(SPEC, {0: sizing, 1: "exclusive", 2: {"mig": {"strategy": "mixed", "layout": {"1g.12gb": 7}}}},
                    {"hami": {"namespace": "kube-system"}})
    assert out == """\
# header
spec:
  devicePlugin:  # found
    version: v0.17.1
  hami:
    namespace: kube-system
  nodeClasses:
    # class a
    - name: a
      # TODO: choose the sharing mode
      sharing:
        timeSlicing:
          sizing:
            memoryPerReplica: 4621Mi
            reserve: 10%
    # class b
    - name: b
      sharing: exclusive
    # class c
    - name: c
      sharing:
        mig:
          strategy: mixed
          layout:
            1g.12gb: 7

    # the end
"""


def test_a_sharing_already_recommended_is_left_as_written() -> None:
    assert edit_spec(SPEC, {1: {"timeSlicing": {"replicas": 4}}, 2: {"mps": {"replicas": 2}}}) == SPEC


def test_a_flush_sequence_style_is_kept() -> None:
    flush = "spec:\n  nodeClasses:\n  - name: a  # one\n    sharing: exclusive\n  - name: b\n    sharing: exclusive\n"
    assert edit_spec(flush, {1: {"mps": {"replicas": 2}}}) == (
        "spec:\n  nodeClasses:\n  - name: a  # one\n    sharing: exclusive\n  - name: b\n    sharing:\n"
        "      mps:\n        replicas: 2\n")


FOUR_SPACES = """\
---
spec:
    kubernetesVersion:   "1.30"
    nodeClasses:
        -   name: a
            sharing: {mps: {replicas: 2}}   # flow style, on one line
            nodes:    1
        -   sharing: exclusive
            name: b
"""


def test_only_the_replaced_lines_change_whatever_the_layout() -> None:
    out = edit_spec(FOUR_SPACES, {0: "exclusive", 1: {"timeSlicing": {"replicas": 3}}})
    assert out == """\
---
spec:
    kubernetesVersion:   "1.30"
    nodeClasses:
        -   name: a
            sharing: exclusive
            nodes:    1
        -   sharing:
              timeSlicing:
                replicas: 3
            name: b
"""


def test_crlf_line_endings_stay_crlf_on_every_line() -> None:
    out = edit_spec(FOUR_SPACES.replace("\n", "\r\n"), {0: "exclusive"})
    assert out.count("\n") == out.count("\r\n") == FOUR_SPACES.count("\n")
    assert "            sharing: exclusive\r\n" in out


def test_a_tab_before_a_comment_that_loading_allows_is_kept() -> None:
    spec = "spec:\n  nodeClasses:\n    - name: a\t# tabbed\n      sharing: exclusive\n"
    assert edit_spec(spec, {0: {"mps": {"replicas": 2}}}) == (
        "spec:\n  nodeClasses:\n    - name: a\t# tabbed\n      sharing:\n        mps:\n          replicas: 2\n")


def test_a_class_without_sharing_gets_it_after_its_last_entry() -> None:
    spec = "spec:\n  nodeClasses:\n    - name: a\n      nodes: 1\n  # after\n"
    assert edit_spec(spec, {0: "exclusive"}) == (
        "spec:\n  nodeClasses:\n    - name: a\n      nodes: 1\n      sharing: exclusive\n  # after\n")
