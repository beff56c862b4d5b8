"""docs/admission.md lists every built-in workload kind with its source, and every KAI annotation that is read."""

from __future__ import annotations

from pathlib import Path

from policy.admission import fractions
from policy.spec.workload_kinds import DEFAULT_WORKLOAD_KINDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "admission.md"


def test_every_built_in_workload_kind_has_its_row_with_every_template_path_and_its_source() -> None:
    rows = {line.split("|")[1].strip(): line for line in DOC.read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")}
    for kind in DEFAULT_WORKLOAD_KINDS:
        row = rows[f"`{kind.kind}` ({kind.group}, {', '.join(kind.versions)})"]
        assert kind.source in row
        assert all(f"`{t.path}`" in row for t in kind.templates)


def test_every_kai_annotation_the_engine_reads_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for key in (*fractions.ASKING, fractions.FRACTION_DEVICES, fractions.FRACTION_CONTAINER, fractions.MPS):
        assert f"`{key}" in text, key
    assert "## 6. Resource claims (DRA)" in text
