"""Pictures a reviewer opens from the repository: SVG built element by element, the same bytes every time.

- ``mig_gpu``: the memory slices of one GPU and the MIG instance placed on each, with memory per instance and
  per time-sliced replica;
- ``slots``: a class's schedulable slots and the memory behind each, before sharing and after;
- ``scores``: seed 001's weighted score of each candidate, stacked by dimension;
- ``simulation``: makespan and utilization of a batch under each candidate.

Used by `compile` (pictures/<class>.svg in the tree, linked from REPORT.md) and by `plan --pictures`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from policy.hardware import dra, mig
from policy.hardware.catalog import MigGeometry
from policy.resolved.resolve import Offer, ResolvedClass

__all__ = ["Bar", "Instance", "SlotRow", "class_picture", "mig_gpu", "scores", "simulation", "slots"]

SVG_NS = "http://www.w3.org/2000/svg"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
WIDTH = 760
INK = "#1f2933"
MUTED = "#616e7c"
PALETTE = ("#3b82c4", "#e0803a", "#4fa36b", "#b5545c", "#8c6bb1", "#c9a227", "#4bb0b8")
DIMENSION_COLOURS = {"isolation": "#3b82c4", "overhead": "#4fa36b", "compatibility": "#c9a227", "cost": "#8c6bb1"}


# ---------------------------------------------------------------------------------------------------------------
# The element builder
# ---------------------------------------------------------------------------------------------------------------


def _num(value: float) -> str:
    """Coordinates with at most one decimal and no trailing zeros, so the bytes never depend on float noise."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _text_width(content: str, size: float, *, bold: bool = False) -> float:
    """A generous estimate of a text's width: DejaVu Sans, the first font asked for, averages about 0.55 em a
    character (0.62 em bold) over mixed text; no font metrics are at hand when the picture is built."""
    return len(content) * size * (0.7 if bold else 0.62)


def _fit(content: str, size: float, room: float, *, bold: bool = False) -> str:
    """``content``, cut with an ellipsis where it would not fit ``room`` pixels."""
    if _text_width(content, size, bold=bold) <= room:
        return content
    keep = max(int(room / (size * (0.7 if bold else 0.62))) - 1, 0)
    return content[:keep].rstrip() + "…"


class _Canvas:
    """An SVG document written line by line, as ElementTree would write the same elements after ``ET.indent``:
    attributes in the order given, text and attribute values escaped as it escapes them, an element with no
    text or children closed as ``<tag ... />``. ElementTree built the tree and then serialized it, a seventh of
    a 1,000-class compile's render (docs/performance.md); tests/compiler/test_pictures.py checks the bytes
    against ElementTree's on generated drawings."""

    def __init__(self, height: float, title: str) -> None:
        self._lines = [_open("svg", {"xmlns": SVG_NS, "version": "1.1", "width": _num(WIDTH),
                                     "height": _num(height), "viewBox": f"0 0 {_num(WIDTH)} {_num(height)}",
                                     "font-family": FONT}), _leaf("  ", "title", {}, title)]
        self.rect(0, 0, WIDTH, height, "#ffffff")
        self.text(16, 26, _fit(title, 15, WIDTH - 32, bold=True), size=15, weight="bold")

    def rect(self, x: float, y: float, w: float, h: float, fill: str, *, stroke: str | None = None,
             dashed: bool = False, tip: str | None = None) -> None:
        attrs = {"x": _num(x), "y": _num(y), "width": _num(max(w, 0)), "height": _num(max(h, 0)), "fill": fill}
        if stroke:
            attrs.update({"stroke": stroke, "stroke-width": "1"})
        if dashed:
            attrs["stroke-dasharray"] = "4 3"
        if tip:
            self._lines += ["  " + _open("rect", attrs), _leaf("    ", "title", {}, tip), "  </rect>"]
        else:
            self._lines.append(_leaf("  ", "rect", attrs, ""))

    def text(self, x: float, y: float, content: str, *, size: float = 12, anchor: str = "start",
             weight: str = "normal", fill: str = INK) -> None:
        attrs = {"x": _num(x), "y": _num(y), "font-size": _num(size), "fill": fill}
        if anchor != "start":
            attrs["text-anchor"] = anchor
        if weight != "normal":
            attrs["font-weight"] = weight
        self._lines.append(_leaf("  ", "text", attrs, content))

    def line(self, x1: float, y1: float, x2: float, y2: float, *, stroke: str = MUTED) -> None:
        self._lines.append(_leaf("  ", "line", {"x1": _num(x1), "y1": _num(y1), "x2": _num(x2), "y2": _num(y2),
                                                "stroke": stroke, "stroke-width": "1"}, ""))

    def bytes(self) -> bytes:
        return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', *self._lines, "</svg>", ""]).encode("utf-8")


_ATTRIBUTE_ENTITIES = {'"': "&quot;", "\r": "&#13;", "\n": "&#10;", "\t": "&#09;"}


def _open(tag: str, attrs: dict[str, str]) -> str:
    return f"<{tag}{_attributes(attrs)}>"


def _leaf(indent: str, tag: str, attrs: dict[str, str], text: str) -> str:
    if not text:
        return f"{indent}<{tag}{_attributes(attrs)} />"
    return f"{indent}<{tag}{_attributes(attrs)}>{escape(text)}</{tag}>"


def _attributes(attrs: dict[str, str]) -> str:
    return "".join([_attribute(key, value) for key, value in attrs.items()])


@functools.lru_cache(maxsize=8192)  # coordinates, sizes and colours repeat across a fleet's pictures
def _attribute(key: str, value: str) -> str:
    return f' {key}="{escape(value, _ATTRIBUTE_ENTITIES)}"'


# ---------------------------------------------------------------------------------------------------------------
# MIG: one GPU's slices
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    profile: str
    start: int
    size: int
    memory_mib: int
    compute_slices: int
    replicas: int = 1
    hosts: str = ""
    """What runs there (the plan's workloads), if known."""


def mig_gpu(title: str, units: int, compute_slices: int, gpus: Sequence[tuple[str, Sequence[Instance]]], *,
            subtitle: str = "") -> bytes:
    """One row per GPU layout: memory slices 0..units-1 as columns, each instance a box over its slices,
    coloured by profile."""
    left, width = 16, WIDTH - 32
    column = width / units
    hosts = any(i.hosts for _, instances in gpus for i in instances)
    row_height = 176 + (18 if hosts else 0)
    canvas = _Canvas(64 + row_height * len(gpus) + 22, title)
    if subtitle:
        canvas.text(16, 46, subtitle, size=11, fill=MUTED)
    profiles = sorted({i.profile for _, instances in gpus for i in instances})
    for g, (caption, instances) in enumerate(gpus):
        top = 64 + row_height * g
        canvas.text(16, top + 12, caption, size=12, weight="bold")
        _slices_row(canvas, top + 20, left, column, units)
        for instance in sorted(instances, key=lambda i: i.start):
            _instance_box(canvas, instance, top + 20, left, column, compute_slices,
                          PALETTE[profiles.index(instance.profile) % len(PALETTE)])
    canvas.text(16, 64 + row_height * len(gpus) + 8, "columns: memory slices (placement units); boxes: GPU "
                "instances at starts the driver accepts", size=10, fill=MUTED)
    return canvas.bytes()


def _slices_row(canvas: _Canvas, top: float, left: float, column: float, units: int) -> None:
    for unit in range(units):
        canvas.rect(left + unit * column, top, column, 120, "#f3f4f6", stroke="#d2d6dc")
        canvas.text(left + (unit + 0.5) * column, top + 136, str(unit), size=10, anchor="middle", fill=MUTED)


def _instance_box(canvas: _Canvas, instance: Instance, top: float, left: float, column: float,
                  compute_slices: int, colour: str) -> None:
    x, w = left + instance.start * column + 2, instance.size * column - 4
    share = instance.memory_mib // instance.replicas
    tip = (f"{instance.profile} at slice {instance.start}: {instance.compute_slices}/{compute_slices} of the SMs, "
           f"{instance.memory_mib} MiB" + (f", {instance.replicas} replicas of {share} MiB each"
                                           if instance.replicas > 1 else ""))
    canvas.rect(x, top + 4, w, 112, colour, stroke=INK, tip=tip)
    middle = x + w / 2
    canvas.text(middle, top + 30, instance.profile, size=13, anchor="middle", weight="bold", fill="#ffffff")
    canvas.text(middle, top + 50, f"{instance.memory_mib} MiB", size=11, anchor="middle", fill="#ffffff")
    canvas.text(middle, top + 68, f"{instance.compute_slices}/{compute_slices} SMs", size=11, anchor="middle",
                fill="#ffffff")
    if instance.replicas > 1:
        canvas.text(middle, top + 86, f"x{instance.replicas} replicas", size=11, anchor="middle", fill="#ffffff")
        canvas.text(middle, top + 102, f"{share} MiB*", size=11, anchor="middle", fill="#ffffff")
    if instance.hosts:
        canvas.text(middle, top + 154, instance.hosts, size=10, anchor="middle")


# ---------------------------------------------------------------------------------------------------------------
# Slots before and after
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlotRow:
    label: str
    devices: int
    """Devices (GPUs or MIG instances) per node."""
    replicas: int
    """Slots per device."""
    memory_mib: int
    """Memory one slot can count on."""
    enforced: bool = True
    scope: str = "per node"
    """What the devices are counted over, for the slot count under the label."""


LABEL_ROOM = (200, 360)
"""The boxes start where the longest row label ends, at least 200 and at most 360 pixels in."""


def slots(title: str, rows: Sequence[SlotRow], *, subtitle: str = "") -> bytes:
    """One row per resource: each device a box, split into its slots, each labelled with its memory."""
    unenforced = any(not row.enforced for row in rows)
    height = 70 + 74 * len(rows) + (26 if unenforced else 8)
    canvas = _Canvas(height, title)
    if subtitle:
        canvas.text(16, 46, _fit(subtitle, 11, WIDTH - 32), size=11, fill=MUTED)
    counts = [f"{row.devices * row.replicas} slot(s) {row.scope}" for row in rows]
    widest = max((max(_text_width(row.label, 12, bold=True), _text_width(count, 11))
                  for row, count in zip(rows, counts, strict=True)), default=0.0)
    left = min(max(LABEL_ROOM[0], 16 + widest + 16), LABEL_ROOM[1])
    width = WIDTH - left - 16
    for r, (row, count) in enumerate(zip(rows, counts, strict=True)):
        top = 62 + 74 * r
        canvas.text(16, top + 26, _fit(row.label, 12, left - 32, bold=True), size=12, weight="bold")
        canvas.text(16, top + 44, _fit(count, 11, left - 32), size=11, fill=MUTED)
        _slot_row(canvas, row, top, left, width, PALETTE[r % len(PALETTE)])
    if unenforced:
        canvas.text(16, height - 10, "* not enforced: the slots of one device share its memory with no limit "
                    "(dashed boxes)", size=10, fill=MUTED)
    return canvas.bytes()


def _slot_row(canvas: _Canvas, row: SlotRow, top: float, left: float, width: float, colour: str) -> None:
    devices = max(row.devices, 1)
    gap = 6 if devices > 1 else 0
    box = (width - gap * (devices - 1)) / devices
    mark = "" if row.enforced else "*"
    cell = box / row.replicas
    inside = f"{row.memory_mib} MiB{mark}"
    labelled = devices * row.replicas <= 16 and _text_width(inside, 10) <= cell - 6
    for d in range(min(devices, 64)):
        x = left + d * (box + gap)
        canvas.rect(x, top + 8, box, 50, "#f3f4f6", stroke="#d2d6dc")
        for s in range(row.replicas):
            canvas.rect(x + s * cell + 1, top + 10, cell - 2, 46, colour, stroke=INK, dashed=not row.enforced,
                        tip=f"{row.memory_mib} MiB" + ("" if row.enforced else " (not enforced)"))
            if labelled:
                canvas.text(x + (s + 0.5) * cell, top + 38, inside, size=10, anchor="middle", fill="#ffffff")
    if not labelled:
        canvas.text(left + width, top + 70, f"{row.memory_mib} MiB per slot{mark}", size=10, anchor="end",
                    fill=MUTED)


# ---------------------------------------------------------------------------------------------------------------
# Scores and simulations
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    label: str
    parts: tuple[tuple[str, float], ...]
    """(dimension, value) stacked left to right."""
    note: str = ""


def scores(title: str, bars: Sequence[Bar], *, scale: float = 100.0, subtitle: str = "") -> bytes:
    """Horizontal stacked bars, one per candidate; the legend names the dimensions."""
    height = 96 + 26 * len(bars)
    canvas = _Canvas(height, title)
    if subtitle:
        canvas.text(16, 46, subtitle, size=11, fill=MUTED)
    left = 300
    totals = [f"{scale:.1f}" + (f"  {bar.note}" if bar.note else "") for bar in bars]
    width = WIDTH - left - 16 - 6 - max((_text_width(t, 11) for t in totals), default=0.0)
    names = list(dict.fromkeys(name for bar in bars for name, _ in bar.parts))
    for n, name in enumerate(names):
        x = left + n * 110
        canvas.rect(x, 56, 12, 12, DIMENSION_COLOURS.get(name, PALETTE[n % len(PALETTE)]))
        canvas.text(x + 16, 66, name, size=11)
    for b, bar in enumerate(bars):
        top = 80 + 26 * b
        canvas.text(16, top + 15, _fit(bar.label, 11, left - 24), size=11)
        x = left
        for n, (name, value) in enumerate(bar.parts):
            w = width * value / scale
            canvas.rect(x, top + 3, w, 16, DIMENSION_COLOURS.get(name, PALETTE[n % len(PALETTE)]),
                        tip=f"{name}: {value:.1f}")
            x += w
        total = sum(v for _, v in bar.parts)
        canvas.text(x + 6, top + 15, f"{total:.1f}" + (f"  {bar.note}" if bar.note else ""), size=11)
    canvas.line(left, 76, left, height - 12)
    return canvas.bytes()


def simulation(title: str, rows: Sequence[tuple[str, float | None, float, str]], *, subtitle: str = "") -> bytes:
    """Per candidate (label, makespan in s or None, utilization 0-1, note): two bars side by side."""
    height = 96 + 26 * len(rows)
    canvas = _Canvas(height, title)
    if subtitle:
        canvas.text(16, 46, subtitle, size=11, fill=MUTED)
    longest = max((m for _, m, _, _ in rows if m is not None), default=1.0) or 1.0
    canvas.text(300, 68, "makespan", size=11, weight="bold")
    canvas.text(540, 68, "utilization", size=11, weight="bold")
    for r, (label, makespan, utilization, note) in enumerate(rows):
        top = 80 + 26 * r
        canvas.text(16, top + 15, _fit(label, 11, 300 - 24), size=11)
        if makespan is None:
            canvas.text(300, top + 15, note or "does not finish", size=11, fill="#b5545c")
        else:
            canvas.rect(300, top + 3, 160 * makespan / longest, 16, PALETTE[0], tip=f"{makespan:.2f} s")
            canvas.text(300 + 160 * makespan / longest + 6, top + 15, f"{makespan:.1f} s", size=11)
        canvas.rect(540, top + 3, 160 * utilization, 16, PALETTE[2], tip=f"{utilization:.1%}")
        canvas.text(540 + 160 * utilization + 6, top + 15, f"{utilization:.1%}", size=11)
    return canvas.bytes()


# ---------------------------------------------------------------------------------------------------------------
# A compiled class
# ---------------------------------------------------------------------------------------------------------------


def class_picture(rc: ResolvedClass) -> bytes:
    """The capacity picture of one class: its MIG layout on one GPU, or its slots before and after sharing."""
    mig_spec = rc.spec.sharing.mig
    geometry = rc.gpu.mig if rc.gpu is not None else None
    if mig_spec is not None and geometry is not None:
        rows = []
        for gpus, layout in mig_spec.layouts(rc.gpu_count):
            placed = mig.place(geometry, layout)
            if not placed.fits:
                continue
            caption = "every GPU" if len(gpus) == rc.gpu_count else f"GPUs {', '.join(map(str, gpus))}"
            rows.append((caption, [_instance(geometry, p, mig_spec.time_slicing.get(p.profile, 1))
                                   for p in placed.placements]))
        if rows:
            note = "; * replicas of one instance share its memory unchecked" if mig_spec.time_slicing else ""
            return mig_gpu(f"{rc.name}: MIG layout per {rc.product}", geometry.placement_units,
                           geometry.compute_slices, rows,
                           subtitle=f"{rc.gpu_count} GPU(s) per node, {mig_spec.strategy} strategy{note}")
    memory = rc.memory_mib or 0
    before = SlotRow(f"before: {rc.gpu_count} x nvidia.com/gpu", rc.gpu_count, 1, memory)
    after = [SlotRow(f"after: {_asked_for(o)}", o.devices_per_node, o.replicas,
                     o.slot_memory_mib, o.memory_enforced)
             for o in rc.offers]
    return slots(f"{rc.name}: slots per node, {rc.product}", [before, *after],
                 subtitle=f"sharing: {rc.mode}; memory per slot as a pod can count on it")


def _instance(geometry: MigGeometry, placement: mig.Placement, replicas: int) -> Instance:
    profile = geometry.profile(placement.profile)
    assert profile is not None
    return Instance(profile.name, placement.start, placement.size, profile.memory_mib, profile.compute_slices,
                    replicas)


def _asked_for(offer: Offer) -> str:
    """What pods ask for the slots by; a claim-only DRA offer's DeviceClass, which only claims name."""
    if offer.claim_only:
        return f"claims of DeviceClass {offer.resource.removeprefix(dra.IMPLICIT_PREFIX)}"
    return offer.resource
