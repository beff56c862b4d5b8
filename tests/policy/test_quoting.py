"""Quoting values from the input back into answers: `bounded` shortens, `quotable` refuses data it would cut.

`quotable` answers from the data's JSON first (diagnostics._no_long_string) and walks the data only when that
cannot tell; both ways must agree with walking every string, which is what this checks on generated data.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.spec import diagnostics
from policy.spec.diagnostics import MAX_LINE_CHARS, MAX_QUOTED_CHARS, bounded, quotable

# Characters that matter: blanks that break a run (ASCII and not), what JSON escapes, multi-byte UTF-8.
ALPHABET = st.sampled_from(['a', 'b', ' ', '"', '\\', '\n', '\t', '\u00a0', '\u2028', 'é', '/', '\x00'])
TEXT = st.one_of(
    st.text(ALPHABET, max_size=40),
    st.builds(lambda piece, n: piece * n, st.text(ALPHABET, min_size=1, max_size=12), st.integers(1, 500)),
)
DATA = st.recursive(st.one_of(TEXT, st.integers(), st.booleans(), st.none()),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
                    max_leaves=12)


def walked(data: Any) -> bool:
    """Every string in ``data``, keys included, left whole by `bounded`."""
    if isinstance(data, str):
        return bounded(data) == data
    if isinstance(data, dict):
        return all(walked(k) and walked(v) for k, v in data.items())
    if isinstance(data, list):
        return all(walked(v) for v in data)
    return True


@settings(max_examples=400, deadline=None)
@given(DATA)
def test_quotable_keeps_exactly_the_data_whose_every_string_bounded_leaves_whole(data: Any) -> None:
    assert (quotable(data) is data) is walked(data)


@pytest.mark.parametrize("text", [
    "a" * (MAX_QUOTED_CHARS + 1),                      # one overlong run
    ('x' * 100 + '"') * 10,                            # quotes inside the run: escaped, still one run
    ("word " * (MAX_LINE_CHARS // 5 + 1)),             # no long run, but past the line cap
    "\u00a0".join(["y" * 200] * 3),                    # a blank that \S in bytes does not see: the walk decides
    "z" * MAX_QUOTED_CHARS,                            # the longest string the quick answer clears
    "\\" * (MAX_QUOTED_CHARS // 2 + 1),                 # escaped: shorter than its JSON, the walk decides
])
def test_what_bounded_would_cut_is_not_quotable(text: str) -> None:
    assert (quotable({"path": text}) is None) is (bounded(text) != text)


def test_the_quick_answer_is_taken_for_a_fix_of_names_and_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    # A real fix: its JSON is past MAX_QUOTED_CHARS bytes (compact JSON has no blank to break a run), while no
    # string in it comes near.
    edits = [{"kind": "set-node-selector", "path": "/spec/nodeSelector/node-pool", "value": "h100-train"},
             {"kind": "add-toleration", "path": "/spec/tolerations/-", "key": "dedicated", "operator": "Equal",
              "value": "training", "effect": "NoSchedule"}]
    patch = [{"op": "add", "path": "/spec/nodeSelector", "value": {"node-pool": "h100-train"}},
             {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "dedicated", "operator": "Equal",
                                                                    "value": "training", "effect": "NoSchedule"}}]
    fix = {"edits": edits, "jsonPatch": patch}
    assert len(orjson.dumps(fix)) > MAX_QUOTED_CHARS
    assert diagnostics._no_long_string(fix)
    monkeypatch.setattr(diagnostics, "bounded", lambda text: pytest.fail("walked a fix the quick check clears"))
    assert quotable(fix) is fix
