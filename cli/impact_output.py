"""`gpupolicy diff`'s outputs: Markdown for a pull-request comment or step summary, and JSON for tools."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policy.audit.impact import Capacity, ClassChange, Impact, TenantChange
    from policy.audit.scan import Result

NO_CHANGE = "No change: BASE and HEAD compile to the same tree and the same capacity.\n"
MAX_LISTED = 50  # workloads or pods listed per section of a comment; the rest are counted


def render_json(impact: Impact, names: tuple[str, str]) -> str:
    def result(r: Result) -> dict[str, Any]:
        return {"namespace": r.ref.namespace, "kind": r.ref.kind, "name": r.ref.name, "result": r.outcome,
                "rules": sorted({d.code for d in r.diagnostics}), "folded": len(r.folded)}

    document = {
        "base": names[0], "head": names[1], "changed": impact.changed,
        "classes": [asdict(c) for c in impact.classes],
        "tenants": [{**asdict(t), "slots": list(t.slots)} for t in impact.tenants],
        "tree": [{"path": p, "change": c} for p, c in impact.tree],
        "disruptions": [{**asdict(d), "drain": [asdict(r) for r in d.drain]} for d in impact.disruptions],
        "workloads": None if impact.workloads is None else {
            "judged": impact.workloads, "newViolations": [result(r) for r in impact.new_violations],
            "resolvedViolations": [result(r) for r in impact.resolved_violations],
            "overcommitted": [asdict(o) for o in impact.overcommits]},
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def render_markdown(impact: Impact, names: tuple[str, str]) -> str:
    head = f"## gpupolicy diff: `{names[0]}` → `{names[1]}`\n\n"
    if not impact.changed:
        return head + NO_CHANGE
    parts = [head, *_classes(impact.classes), *_tenants(impact.tenants), *_disruptions(impact),
             *_workloads(impact), *_tree(impact)]
    return "".join(parts)


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def _offers(capacity: tuple[Capacity, ...]) -> str:
    if not capacity:
        return "—"
    return "<br>".join(f"{_count(c.slots)} × `{c.resource}` ({c.mode}, {c.memory_per_slot_mib:,} MiB/slot)"
                       for c in capacity)


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A Markdown section: its title, then a table with one line per row."""
    return [f"### {title}\n\n", "| " + " | ".join(columns) + " |\n", "|" + "---|" * len(columns) + "\n",
            *("| " + " | ".join(row) + " |\n" for row in rows)]


def _classes(classes: tuple[ClassChange, ...]) -> list[str]:
    changed = [c for c in classes if c.change != "unchanged"]
    if not changed:
        return ["Node classes: no change.\n\n"]
    lines = _table("Node classes", ("class", "change", "nodes × GPUs", "mode", "slots before", "slots after"), [
        (f"`{c.name}`", c.change, _pair(f"{_count(c.nodes[0])} × {c.gpus_per_node[0]}",
                                        f"{_count(c.nodes[1])} × {c.gpus_per_node[1]}"),
         _pair(*c.modes), _offers(c.capacity[0]), _offers(c.capacity[1])) for c in changed])
    migs = [c for c in changed if c.mig_layouts[0] != c.mig_layouts[1]]
    lines.append("\n")
    lines.extend(f"MIG layout of `{c.name}`: {c.mig_layouts[0] or 'none'} → {c.mig_layouts[1] or 'none'}\n\n"
                 for c in migs)
    return lines


def _pair(before: str, after: str) -> str:
    return before or "—" if before == after else f"{before or '—'} → {after or '—'}"


def _tenants(tenants: tuple[TenantChange, ...]) -> list[str]:
    changed = [t for t in tenants if t.change != "unchanged"]
    if not changed:
        return ["Tenants: no change in what they can reach.\n\n"]
    rows = [(f"`{t.name}`", _count(t.slots[0]), _count(t.slots[1]), _reach(t.reach[0]), _reach(t.reach[1]))
            for t in changed]
    return [*_table("Tenants", ("tenant", "slots before", "slots after", "reaches before", "reaches after"), rows),
            "\n"]


def _reach(capacity: tuple[Capacity, ...]) -> str:
    if not capacity:
        return "nothing"
    return "<br>".join(f"`{c.node_class}` {_count(c.slots)} × `{c.resource}` ({c.memory_per_slot_mib:,} MiB)"
                       for c in capacity)


def _disruptions(impact: Impact) -> list[str]:
    if not impact.disruptions:
        return ["Nodes: no disruption.\n\n"]
    lines = [*_table("Disruption on nodes", ("class", "what", "nodes", "GPUs", "detail"), [
        (f"`{d.node_class}`", d.kind, _count(d.nodes), _count(d.gpus), d.detail) for d in impact.disruptions]), "\n"]
    for d in impact.disruptions:
        if d.kind == "device-plugin-restart" or impact.workloads is None:
            continue
        shown = ", ".join(f"`{p.namespace}/{p.name}`" for p in d.drain[:MAX_LISTED])
        more = f" and {len(d.drain) - MAX_LISTED} more" if len(d.drain) > MAX_LISTED else ""
        what = f"GPU pods to drain before `{d.node_class}` is re-partitioned" if d.kind == "mig-repartition" else \
            f"Running pods that select `{d.node_class}`'s nodes by a changed label"
        lines.append(f"{what} ({len(d.drain)}): {shown or 'none'}{more}\n\n")
    return lines


def _workloads(impact: Impact) -> list[str]:
    if impact.workloads is None:
        return []
    lines = [f"### Running workloads ({impact.workloads} judged)\n\n"]
    for title, results in (("New violations under HEAD", impact.new_violations),
                           ("Violations HEAD resolves", impact.resolved_violations)):
        lines.append(f"**{title}: {len(results)}**\n\n")
        lines.extend(f"- {r.outcome} `{r.ref.namespace}/{r.ref.kind}/{r.ref.name}`"
                     f"{f' (+{len(r.folded)} owned)' if r.folded else ''}: "
                     f"{', '.join(sorted({d.code for d in r.diagnostics}))}\n" for r in results[:MAX_LISTED])
        if len(results) > MAX_LISTED:
            lines.append(f"- … and {len(results) - MAX_LISTED} more\n")
        lines.append("\n")
    for o in impact.overcommits:
        lines.append(f"**No longer fits**: running pods ask `{o.node_class}` for {o.requested} `{o.resource}`; "
                     f"it offers {_count(o.slots[0])} → {_count(o.slots[1])}\n\n")
    return lines


def _tree(impact: Impact) -> list[str]:
    if not impact.tree:
        return ["Compiled tree: no change.\n"]
    counts = {k: sum(1 for _, c in impact.tree if c == k) for k in ("added", "changed", "removed")}
    lines = [f"<details><summary>Compiled tree: {counts['added']} added, {counts['changed']} changed, "
             f"{counts['removed']} removed</summary>\n\n"]
    lines.extend(f"- {change}: `{path}`\n" for path, change in impact.tree)
    return [*lines, "\n</details>\n"]
