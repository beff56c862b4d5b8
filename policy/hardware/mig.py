"""MIG placement search: whether a multiset of GPU instance profiles fits one GPU, where, and if not, why."""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby

from policy.hardware.catalog import MigGeometry, MigProfile

__all__ = ["Layout", "Placement", "PlacementResult", "Split", "feasible_layouts", "fewest_gpus", "maximal_layouts",
           "place", "split"]

# A layout as data: (profile name, count) pairs with count > 0, in the GPU's profile order.
Layout = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Placement:
    """One GPU instance at `start`, occupying memory slices [start, start + size)."""

    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class PlacementResult:
    """The answer of `place`.

    `placements` is a witness (sorted by start) when `fits`; `unplaceable` names the first profile, in search order
    (largest first), that cannot be added to what was placed before it. `would_fit` lists, sorted, the profiles that
    could still be added: to the whole layout when it fits, to the placeable part when it does not, and close
    spellings when a name is unknown.
    """

    fits: bool
    placements: tuple[Placement, ...]
    unplaceable: str | None
    reason: str
    would_fit: tuple[str, ...]


def place(gpu: MigGeometry, layout: Mapping[str, int]) -> PlacementResult:
    """Decide whether `layout` (profile name -> count) fits one GPU, by exact search.

    The rule is the driver's (mig.md §3): each instance takes a start from its profile's starts, occupied slices are
    pairwise disjoint, per-profile counts stay within max_count, the summed engines within the GPU's engine pool
    and the summed compute slices within the GPU's. Zero counts are ignored; an unknown profile name gives
    fits=False. Raises ValueError for a negative or non-integer count (a caller bug, not user input).
    """
    counts = _counts(layout)
    unknown = next((name for name in counts if gpu.profile(name) is None), None)
    if unknown is not None:
        return _unknown_profile(gpu, unknown)
    instances = _ordered([p for name, n in counts.items() for p in [_profile(gpu, name)] * n])
    starts = _search(gpu, instances)
    if starts is None:
        return _does_not_fit(gpu, instances)
    placements = tuple(sorted((Placement(p.name, s, p.size) for p, s in zip(instances, starts, strict=True)),
                              key=lambda pl: pl.start))
    return PlacementResult(
        fits=True,
        placements=placements,
        unplaceable=None,
        reason=_fits_reason(placements),
        would_fit=_would_fit(gpu, instances),
    )


@functools.cache
def feasible_layouts(gpu: MigGeometry) -> tuple[Layout, ...]:
    """Every non-empty layout that fits `gpu`, each as (name, count) pairs in the GPU's profile order."""
    found: list[Layout] = []
    _extend(gpu, 0, (), (), found)
    return tuple(found)


@functools.cache
def maximal_layouts(gpu: MigGeometry) -> tuple[Layout, ...]:
    """The feasible layouts to which no further instance can be added."""
    return tuple(
        layout for layout in feasible_layouts(gpu) if not _would_fit(gpu, _ordered(_expand(gpu, layout)))
    )


@dataclass(frozen=True)
class Split:
    """MIG instances of a whole node spread over its GPUs: `groups` are (GPU indices, layout) pairs, each layout
    one that fits a GPU, the indices ascending and disjoint; GPUs no group names hold no instance."""

    gpus: int
    groups: tuple[tuple[tuple[int, ...], dict[str, int]], ...]

    @property
    def even(self) -> bool:
        """Every GPU takes the same layout (a spec then writes one layout instead of groups)."""
        return len(self.groups) == 1 and len(self.groups[0][0]) == self.gpus


def split(gpu: MigGeometry, totals: Mapping[str, int], gpus: int) -> Split | None:
    """A way to hold `totals` (profile -> instances on the whole node) on `gpus` GPUs of this geometry, each GPU's
    share a layout `place` accepts; None when there is none (or a profile is unknown to the GPU).

    Exact: an even split when one fits, else a search over the GPU's feasible layouts, largest first, taking
    them in non-increasing order so each multiset of layouts is tried once. Deterministic: the same totals give
    the same split.
    """
    counts = _counts(totals)
    if gpus < 1 or any(gpu.profile(name) is None for name in counts):
        return None
    if not counts:
        return Split(gpus, ())
    if all(n % gpus == 0 for n in counts.values()):
        even = {name: n // gpus for name, n in counts.items()}
        if place(gpu, even).fits:
            return Split(gpus, ((tuple(range(gpus)), even),))
    names = [p.name for p in gpu.profiles]
    wanted = tuple(counts.get(name, 0) for name in names)
    # Every GPU with instances first: on a node whose capacity shows only MIG devices, an idle GPU would be a
    # whole one advertised as nvidia.com/gpu, which the node does not show.
    chosen = _spread(_shares(gpu), _budgets(gpu), wanted, gpus, 0, set(), fill=True) or \
        _spread(_shares(gpu), _budgets(gpu), wanted, gpus, 0, set(), fill=False)
    if chosen is None:
        return None
    grouped: dict[tuple[int, ...], list[int]] = {}
    for index, share in enumerate(chosen):
        if any(share):
            grouped.setdefault(share, []).append(index)
    return Split(gpus, tuple((tuple(indices), {name: n for name, n in zip(names, share, strict=True) if n})
                             for share, indices in grouped.items()))


def fewest_gpus(gpu: MigGeometry, totals: Mapping[str, int], most: int = 64) -> Split | None:
    """The split of `totals` over the fewest GPUs (at most `most`) that can hold them; None when not even `most` can.

    The search starts at the count no budget of one GPU allows fewer of (`_floor`).
    """
    counts = _counts(totals)
    if any(gpu.profile(name) is None for name in counts):
        return None
    names = [p.name for p in gpu.profiles]
    floor = _floor(_budgets(gpu), tuple(counts.get(name, 0) for name in names))
    return next((found for n in range(max(floor, 1), most + 1) if (found := split(gpu, counts, n)) is not None),
                None)


@functools.cache
def _shares(gpu: MigGeometry) -> tuple[tuple[int, ...], ...]:
    """Every feasible layout as counts in the GPU's profile order, the most memory slices first."""
    order = {p.name: i for i, p in enumerate(gpu.profiles)}
    vectors = []
    for layout in feasible_layouts(gpu):
        vector = [0] * len(gpu.profiles)
        for name, n in layout:
            vector[order[name]] = n
        vectors.append(tuple(vector))
    sizes = [p.size for p in gpu.profiles]
    return tuple(sorted(vectors, key=lambda v: (-sum(n * s for n, s in zip(v, sizes, strict=True)), v)))


#: One budget of a GPU: what each profile (in the GPU's order) takes of it, and how much one GPU has.
_Budget = tuple[tuple[int, ...], int]


@functools.cache
def _budgets(gpu: MigGeometry) -> tuple[_Budget, ...]:
    """The per-GPU budgets `place` enforces (mig.md §3): memory slices, compute slices, each engine pool, and each
    profile's max_count; a node's instances need at least the GPUs each budget alone asks for."""
    profiles = gpu.profiles
    found: list[_Budget] = [(tuple(p.size for p in profiles), gpu.placement_units),
                            (tuple(p.compute_slices for p in profiles), gpu.compute_slices)]
    found += [(tuple(dict(p.engines).get(kind, 0) for p in profiles), pool) for kind, pool in gpu.engine_pool]
    found += [(tuple(int(i == j) for j in range(len(profiles))), p.max_count) for i, p in enumerate(profiles)]
    return tuple(found)


def _floor(budgets: tuple[_Budget, ...], wanted: tuple[int, ...]) -> int:
    """The fewest GPUs whose budgets add up to what `wanted` takes (a bound, not always reachable)."""
    return max(-(-sum(w * n for w, n in zip(weights, wanted, strict=True)) // limit)
               for weights, limit in budgets if limit > 0)


def _spread(shares: tuple[tuple[int, ...], ...], budgets: tuple[_Budget, ...], wanted: tuple[int, ...], gpus: int,
            first: int, failed: set[tuple[tuple[int, ...], int, int]], *, fill: bool) -> list[tuple[int, ...]] | None:
    """Layouts (indices into `shares` from `first` on, non-increasing) for the `gpus` GPUs summing to `wanted`:
    each GPU gets one with `fill`, else some may stay idle (the all-zero share). `failed` remembers what cannot be
    done, for one value of `fill`."""
    if not any(wanted):
        return None if fill and gpus else [tuple(0 for _ in wanted)] * gpus
    if gpus == 0 or (wanted, gpus, first) in failed or _floor(budgets, wanted) > gpus:
        return None
    for i in range(first, len(shares)):
        share = shares[i]
        if all(s <= w for s, w in zip(share, wanted, strict=True)):
            left = tuple(w - s for w, s in zip(wanted, share, strict=True))
            rest = _spread(shares, budgets, left, gpus - 1, i, failed, fill=fill)
            if rest is not None:
                return [share, *rest]
    failed.add((wanted, gpus, first))
    return None


# ---------------------------------------------------------------------------------------------------------------
# Search
# ---------------------------------------------------------------------------------------------------------------


def _counts(layout: Mapping[str, int]) -> dict[str, int]:
    for name, count in layout.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count for MIG profile {name!r} must be a non-negative integer, got {count!r}")
    return {name: count for name, count in layout.items() if count > 0}


def _profile(gpu: MigGeometry, name: str) -> MigProfile:
    profile = gpu.profile(name)
    if profile is None:
        raise KeyError(name)  # unreachable: place() rejects unknown names first
    return profile


def _ordered(instances: Sequence[MigProfile]) -> tuple[MigProfile, ...]:
    # Largest first, then the most constrained (fewest starts): the search then fails fast. Identical profiles
    # end up adjacent, which the symmetry breaking in _backtrack relies on.
    return tuple(sorted(instances, key=lambda p: (-p.size, len(p.starts), p.name)))


def _search(gpu: MigGeometry, instances: tuple[MigProfile, ...]) -> tuple[int, ...] | None:
    """Starts for `instances` (in their order) that satisfy every rule, or None when there are none."""
    if not _within_budgets(gpu, instances):
        return None
    return _backtrack(instances)


def _within_budgets(gpu: MigGeometry, instances: Sequence[MigProfile]) -> bool:
    # Cheap necessary conditions first; they also make the common rejections instant.
    if sum(p.size for p in instances) > gpu.placement_units:
        return False
    if sum(p.compute_slices for p in instances) > gpu.compute_slices:
        return False
    if any(n > p.max_count for p, n in _grouped(instances)):
        return False
    return all(_engines_used(instances, kind) <= pool for kind, pool in gpu.engine_pool)


def _backtrack(instances: tuple[MigProfile, ...]) -> tuple[int, ...] | None:
    starts: list[int] = []

    def extend(i: int, occupied: int) -> bool:
        if i == len(instances):
            return True
        profile = instances[i]
        # Identical instances are interchangeable: give them increasing starts so each set is tried once.
        floor = starts[-1] + 1 if i and instances[i - 1] == profile else 0
        for start in profile.starts:
            bits = ((1 << profile.size) - 1) << start
            if start < floor or occupied & bits:
                continue
            starts.append(start)
            if extend(i + 1, occupied | bits):
                return True
            starts.pop()
        return False

    return tuple(starts) if extend(0, 0) else None


def _would_fit(gpu: MigGeometry, instances: tuple[MigProfile, ...]) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in gpu.profiles if _search(gpu, _ordered((*instances, p))) is not None))


def _extend(gpu: MigGeometry, i: int, chosen: tuple[MigProfile, ...], layout: Layout, found: list[Layout]) -> None:
    if i == len(gpu.profiles):
        if layout:
            found.append(layout)
        return
    _extend(gpu, i + 1, chosen, layout, found)
    profile = gpu.profiles[i]
    for count in range(1, profile.max_count + 1):
        chosen = (*chosen, profile)
        # Feasibility is closed under removing instances, so the first failing count ends this branch.
        if _search(gpu, _ordered(chosen)) is None:
            return
        _extend(gpu, i + 1, chosen, (*layout, (profile.name, count)), found)


def _expand(gpu: MigGeometry, layout: Layout) -> list[MigProfile]:
    return [p for name, n in layout for p in [_profile(gpu, name)] * n]


def _grouped(instances: Sequence[MigProfile]) -> list[tuple[MigProfile, int]]:
    ordered = sorted(instances, key=lambda p: p.name)
    return [(p, len(list(group))) for p, group in groupby(ordered)]


def _engines_used(instances: Sequence[MigProfile], kind: str) -> int:
    return sum(dict(p.engines).get(kind, 0) for p in instances)


# ---------------------------------------------------------------------------------------------------------------
# Explanations
# ---------------------------------------------------------------------------------------------------------------


def _unknown_profile(gpu: MigGeometry, name: str) -> PlacementResult:
    names = [p.name for p in gpu.profiles]
    return PlacementResult(
        fits=False,
        placements=(),
        unplaceable=name,
        reason=f"{name} is not a MIG profile of this GPU, which has {', '.join(names)}",
        would_fit=tuple(sorted(difflib.get_close_matches(name, names, n=3, cutoff=0.6))),
    )


def _does_not_fit(gpu: MigGeometry, instances: tuple[MigProfile, ...]) -> PlacementResult:
    # The longest placeable prefix in search order names the culprit: the first instance that cannot join it.
    k = next(k for k in range(1, len(instances) + 1) if _search(gpu, instances[:k]) is None)
    placed, culprit = instances[: k - 1], instances[k - 1]
    return PlacementResult(
        fits=False,
        placements=(),
        unplaceable=culprit.name,
        reason=_why_not(gpu, placed, culprit),
        would_fit=_would_fit(gpu, placed),
    )


def _why_not(gpu: MigGeometry, placed: tuple[MigProfile, ...], culprit: MigProfile) -> str:
    same = sum(1 for p in placed if p == culprit)
    if same >= culprit.max_count:
        return f"{culprit.name} x{same + 1} exceeds its maximum of {culprit.max_count} per GPU"
    pool = dict(gpu.engine_pool)
    for kind, need in culprit.engines:
        used = _engines_used(placed, kind)
        if used + need > pool[kind]:
            return _engine_reason(placed, culprit, kind, pool[kind])
    if sum(p.size for p in placed) == gpu.placement_units:
        return f"{_summary(placed)} uses all {gpu.placement_units} memory slices; {culprit.name} has no free start"
    slices = sum(p.compute_slices for p in placed)
    if slices + culprit.compute_slices > gpu.compute_slices:
        return (f"{_summary(placed)} takes {slices} of the GPU's {gpu.compute_slices} compute slices; "
                f"{culprit.name} needs {culprit.compute_slices} more")
    return (f"{_summary(placed)} leaves no free start for {culprit.name}, which needs {_slices(culprit.size)} "
            f"starting at {_starts(culprit.starts)}")


def _engine_reason(placed: Sequence[MigProfile], culprit: MigProfile, kind: str, pool: int) -> str:
    holders = _summary([p for p in placed if dict(p.engines).get(kind)])
    if pool == 1:
        return f"{holders} already holds the GPU's only {kind}, which {culprit.name} also needs"
    used, need = _engines_used(placed, kind), dict(culprit.engines)[kind]
    return f"{holders} holds {used} of the GPU's {pool} {kind} engines; {culprit.name} needs {need}"


def _summary(instances: Sequence[MigProfile]) -> str:
    if not instances:
        return "an empty GPU"
    groups = [(p.name, len(list(g))) for p, g in groupby(instances)]
    return " + ".join(name if n == 1 else f"{name} x{n}" for name, n in groups)


def _fits_reason(placements: tuple[Placement, ...]) -> str:
    if not placements:
        return "an empty layout always fits"
    return "fits as " + ", ".join(f"{p.profile}@{p.start}" for p in placements)


def _slices(n: int) -> str:
    return "1 memory slice" if n == 1 else f"{n} memory slices"


def _starts(starts: tuple[int, ...]) -> str:
    return str(starts[0]) if len(starts) == 1 else "one of " + ", ".join(map(str, starts))
