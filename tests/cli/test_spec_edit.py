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
