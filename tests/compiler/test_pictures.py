"""The pictures read as drawn: no label straddles a box, a footnote only explains what is drawn, and the score
picture says what the table says.  Text widths are estimated from the font size (no font metrics here), generously
for DejaVu Sans, the first font the pictures ask for."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import pictures, planning
from policy.load import load_policy
from policy.plan import candidates, figures, inventory, recommend

ROOT = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
FIGURES = figures.Figures()


@dataclass(frozen=True)
class Box:
    x0: float
    y0: float
    x1: float
    y1: float

    def inside(self, other: Box) -> bool:
        return other.x0 <= self.x0 and self.x1 <= other.x1 and other.y0 <= self.y0 and self.y1 <= other.y1

    def meets(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


def _text_box(element: ET.Element) -> Box:
    size = float(element.get("font-size", "12"))
    bold = element.get("font-weight") == "bold"
    width = len(element.text or "") * size * (0.7 if bold else 0.62)
    x, y = float(element.get("x", "0")), float(element.get("y", "0"))
    anchor = element.get("text-anchor", "start")
    x0 = x - width / 2 if anchor == "middle" else x - width if anchor == "end" else x
    return Box(x0, y - size * 0.8, x0 + width, y + size * 0.2)


def _rect_box(element: ET.Element) -> Box:
    x, y = float(element.get("x", "0")), float(element.get("y", "0"))
    return Box(x, y, x + float(element.get("width", "0")), y + float(element.get("height", "0")))


def layout_problems(data: bytes) -> list[str]:
    """Every text that straddles the edge of a box (neither inside it nor clear of it) or leaves the canvas.  A
    text inside a box is drawn over it, and that box over the boxes drawn before it: only boxes drawn after the
    one holding the text can cut it."""
    root = ET.fromstring(data)
    canvas = Box(0, 0, float(root.get("width", "0")), float(root.get("height", "0")))
    drawn: list[Box] = []
    texts: list[tuple[ET.Element, int]] = []
    for element in root.iter():
        if element.tag == f"{SVG}rect" and float(element.get("width", "0")) > 0:
            drawn.append(_rect_box(element))
        elif element.tag == f"{SVG}text":
            texts.append((element, len(drawn)))
    out = []
    for element, before in texts:
        box = _text_box(element)
        if not box.inside(canvas):
            out.append(f"{element.text!r} leaves the canvas")
        holder = max((i for i in range(before) if box.inside(drawn[i])), default=-1)
        out += [f"{element.text!r} straddles the box at ({r.x0:g}, {r.y0:g})" for r in drawn[holder + 1:]
                if box.meets(r) and not box.inside(r)]
    return out


def _texts(data: bytes) -> list[str]:
    return [t.text or "" for t in ET.fromstring(data).iter(f"{SVG}text")]


def _dashed(data: bytes) -> int:
    return sum(1 for r in ET.fromstring(data).iter(f"{SVG}rect") if r.get("stroke-dasharray"))


# --- the plan's pictures ----------------------------------------------------------------------------------------


def _plan(spec: str, inventory_path: str, nodes: int | None = None) -> recommend.Plan:
    text = (ROOT / "examples/clusters" / spec / "cluster.yaml").read_text()
    if nodes is not None:
        text = text.replace("nodes: 1", f"nodes: {nodes}")
    resolved = load_policy(text, filename="cluster.yaml").resolved
    path = ROOT / inventory_path
    parse = inventory.parse_csv if path.suffix == ".csv" else inventory.parse_yaml
    entries, _ = parse(path.read_text(), filename=path.name)
    workloads, _ = inventory.merge((), entries)
    return recommend.make_plan(candidates.targets_for_policy(resolved), workloads, FIGURES)


def _seed001_plan() -> recommend.Plan:
    tasks = simulate_tasks()
    return recommend.make_plan([candidates.seed001_card()], inventory.Inventory(tasks), FIGURES)


def simulate_tasks() -> tuple[inventory.Workload, ...]:
    from policy.plan import simulate

    return tuple(inventory.Workload(t.name, "batch", 1, t.memory_mib, t.activity, runtime_s=t.work_s)
                 for t in simulate.seed001_tasks(24, 42))


def _exclusive_plan() -> recommend.Plan:
    """Compute-bound processes on many GPUs: exclusive is recommended, the before row names two-digit GPUs."""
    text = "workloads: [{name: train, replicas: 24, memory: 10Gi, smActivity: 0.95}]"
    entries, _ = inventory.parse_yaml(text, filename="inv.yaml")
    workloads, _ = inventory.merge((), entries)
    target = candidates.target_for_model("L20")
    return recommend.make_plan([target], workloads, FIGURES)


PLANS = {
    "seed-003": lambda: _plan("tke-l20-t4", "examples/plan/tke-l20-t4/inventory.yaml"),
    "seed-003-4-nodes": lambda: _plan("tke-l20-t4", "examples/plan/tke-l20-t4/inventory.yaml", nodes=4),
    "h20-production": lambda: _plan("h20-mig", "examples/plan/h20-production/inventory.csv"),
    "seed-001": _seed001_plan,
    "exclusive": _exclusive_plan,
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_plan_pictures_have_no_label_across_a_box(name: str) -> None:
    for file, data in planning.plan_pictures(PLANS[name]()).items():
        assert layout_problems(data) == [], file


def test_the_exclusive_picture_explains_no_dashed_boxes() -> None:
    plan = _exclusive_plan()
    assert plan.classes[0].best.candidate.mode == "exclusive"
    data = planning.plan_pictures(plan)["l20-recommended.svg"]
    assert _dashed(data) == 0
    assert not any("dashed" in t or "not enforced" in t for t in _texts(data))


def test_a_time_sliced_picture_explains_its_dashed_boxes() -> None:
    data = planning.plan_pictures(PLANS["seed-003"]())["l20-recommended.svg"]
    assert _dashed(data) > 0
    assert any("(dashed boxes)" in t for t in _texts(data))


def test_the_score_picture_shows_the_table_s_scores() -> None:
    """A candidate that cannot host the batch scores 0 in the table and in the picture (its parts too)."""
    plan = _seed001_plan()
    (card,) = plan.classes
    data = planning.plan_pictures(plan)["seed-001-card-scores.svg"]
    texts = _texts(data)
    for e in card.evaluations[: planning.DEFAULT_TOP]:
        label = next(i for i, t in enumerate(texts) if t == e.candidate.label)
        assert texts[label + 1].split()[0] == f"{e.score:.1f}", e.candidate.label
    unhostable = [e for e in card.evaluations if not e.hostable]
    assert unhostable and all(sum(e.contributions.values()) == 0 for e in unhostable)


# --- the compiled trees' capacity pictures ------------------------------------------------------------------------


EXAMPLES = sorted((ROOT / "examples/clusters").glob("*/cluster.yaml"))


@pytest.mark.parametrize("spec", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_capacity_pictures_have_no_label_across_a_box(spec: Path) -> None:
    result = load_policy(spec.read_text(), filename=str(spec))
    assert result.ok
    for rc in result.resolved.classes:
        data = pictures.class_picture(rc)
        assert layout_problems(data) == [], rc.name
        assert (_dashed(data) > 0) == any("(dashed boxes)" in t for t in _texts(data)), rc.name


# ---------------------------------------------------------------- the writer against ElementTree's bytes


class _ElementTreeCanvas:
    """The canvas as it was built before: an ElementTree, indented and serialized by the standard library."""

    def __init__(self, height: float, title: str) -> None:
        self.root = ET.Element("svg", {"xmlns": pictures.SVG_NS, "version": "1.1", "width": "760",
                                       "height": pictures._num(height),
                                       "viewBox": f"0 0 760 {pictures._num(height)}", "font-family": pictures.FONT})
        ET.SubElement(self.root, "title").text = title

    def rect(self, attrs: dict[str, str], tip: str | None) -> None:
        element = ET.SubElement(self.root, "rect", attrs)
        if tip:
            ET.SubElement(element, "title").text = tip

    def leaf(self, tag: str, attrs: dict[str, str], text: str) -> None:
        ET.SubElement(self.root, tag, attrs).text = text

    def bytes(self) -> bytes:
        ET.indent(self.root, space="  ")
        return ('<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(self.root, encoding="unicode")
                + "\n").encode("utf-8")


_TEXT = st.text(st.sampled_from(list("ab <>&\"'\t\r\n\u00e9\u2028\U0001f600 ")), max_size=12)
_NUMBER = st.floats(-2000, 2000, allow_nan=False)
_DRAWING = st.lists(st.one_of(
    st.tuples(st.just("rect"), _NUMBER, _NUMBER, _NUMBER, _NUMBER, _TEXT, st.one_of(st.none(), _TEXT),
              st.booleans(), st.one_of(st.none(), _TEXT)),
    st.tuples(st.just("text"), _NUMBER, _NUMBER, _TEXT, st.sampled_from(["start", "middle", "end"]),
              st.sampled_from(["normal", "bold"]), _TEXT),
    st.tuples(st.just("line"), _NUMBER, _NUMBER, _NUMBER, _NUMBER, _TEXT),
), max_size=8)


@settings(max_examples=300, deadline=None)
@given(title=_TEXT, height=_NUMBER, drawing=_DRAWING)
def test_the_svg_writer_writes_elementtree_s_bytes(title: str, height: float, drawing: list[tuple]) -> None:
    canvas = pictures._Canvas(height, title)
    reference = _ElementTreeCanvas(height, title)
    reference.rect({"x": "0", "y": "0", "width": "760", "height": pictures._num(max(height, 0)),
                    "fill": "#ffffff"}, None)
    fitted = pictures._fit(title, 15, 760 - 32, bold=True)
    reference.leaf("text", {"x": "16", "y": "26", "font-size": "15", "fill": pictures.INK, "font-weight": "bold"},
                   fitted)
    num = pictures._num
    for kind, *args in drawing:
        if kind == "rect":
            x, y, w, h, fill, stroke, dashed, tip = args
            canvas.rect(x, y, w, h, fill, stroke=stroke, dashed=dashed, tip=tip)
            attrs = {"x": num(x), "y": num(y), "width": num(max(w, 0)), "height": num(max(h, 0)), "fill": fill}
            if stroke:
                attrs.update({"stroke": stroke, "stroke-width": "1"})
            if dashed:
                attrs["stroke-dasharray"] = "4 3"
            reference.rect(attrs, tip)
        elif kind == "text":
            x, y, content, anchor, weight, fill = args
            canvas.text(x, y, content, anchor=anchor, weight=weight, fill=fill)
            attrs = {"x": num(x), "y": num(y), "font-size": "12", "fill": fill}
            if anchor != "start":
                attrs["text-anchor"] = anchor
            if weight != "normal":
                attrs["font-weight"] = weight
            reference.leaf("text", attrs, content)
        else:
            x1, y1, x2, y2, stroke = args
            canvas.line(x1, y1, x2, y2, stroke=stroke)
            reference.leaf("line", {"x1": num(x1), "y1": num(y1), "x2": num(x2), "y2": num(y2), "stroke": stroke,
                                    "stroke-width": "1"}, "")
    assert canvas.bytes() == reference.bytes()
