"""Tests for MIG placement: mig.md's verified outcomes, and agreement with a naive brute force on every GPU."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.hardware import catalog, mig

MIG_MODELS = tuple(m for m in catalog.models() if m.mig is not None)


def gpu(name: str) -> catalog.MigGeometry:
    found = catalog.lookup(name)
    assert found is not None and found.mig is not None, name
    return found.mig


A100_80 = gpu("A100-SXM4-80GB")
A100_40 = gpu("A100-SXM4-40GB")
A30 = gpu("A30")
RTX_PRO_6000 = gpu("RTX-PRO-6000")


# ---- an independent oracle ------------------------------------------------------------------------------------


def brute_force_fits(geometry: catalog.MigGeometry, layout: Mapping[str, int]) -> bool:
    """Naive feasibility: try every choice of starts, checking each rule directly.

    Identical instances are interchangeable and can never share a start, so trying every set of distinct starts
    per profile (combinations) covers every assignment.
    """
    profiles = {p.name: p for p in geometry.profiles}
    if any(name not in profiles or n > profiles[name].max_count for name, n in layout.items()):
        return False
    if sum(profiles[name].compute_slices * n for name, n in layout.items()) > geometry.compute_slices:
        return False
    for kind, pool in geometry.engine_pool:
        if sum(dict(profiles[name].engines).get(kind, 0) * n for name, n in layout.items()) > pool:
            return False
    options = [[(profiles[name], c) for c in itertools.combinations(profiles[name].starts, n)]
               for name, n in layout.items() if n]
    return any(disjoint(choice) for choice in itertools.product(*options))


def disjoint(choice: tuple[tuple[catalog.MigProfile, tuple[int, ...]], ...]) -> bool:
    used: set[int] = set()
    for profile, starts in choice:
        for start in starts:
            cells = set(range(start, start + profile.size))
            if cells & used:
                return False
            used |= cells
    return True


def bounded_layouts(geometry: catalog.MigGeometry, overflow: int = 0) -> Iterator[dict[str, int]]:
    """Every multiset with counts up to max_count whose sizes add up to at most the GPU's slots + `overflow`."""
    ranges = [range(p.max_count + 1) for p in geometry.profiles]
    limit = geometry.placement_units + overflow
    for counts in itertools.product(*ranges):
        if sum(p.size * n for p, n in zip(geometry.profiles, counts, strict=True)) <= limit:
            yield {p.name: n for p, n in zip(geometry.profiles, counts, strict=True) if n}


def assert_valid_witness(geometry: catalog.MigGeometry, layout: Mapping[str, int], result: mig.PlacementResult) -> None:
    assert result.fits and result.unplaceable is None
    placed = sorted(p.profile for p in result.placements)
    assert placed == sorted(name for name, n in layout.items() for _ in range(n))
    used: set[int] = set()
    for placement in result.placements:
        profile = geometry.profile(placement.profile)
        assert profile is not None
        assert placement.start in profile.starts and placement.size == profile.size
        cells = set(range(placement.start, placement.start + placement.size))
        assert not cells & used
        used |= cells


def fits(geometry: catalog.MigGeometry, layout: Mapping[str, int]) -> bool:
    return mig.place(geometry, layout).fits


# ---- verified outcomes from mig.md §3 -------------------------------------------------------------------------


def test_3g_2g_and_two_1g_fit_only_with_the_3g_at_start_4() -> None:
    layout = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    result = mig.place(A100_80, layout)
    assert_valid_witness(A100_80, layout, result)
    assert result.placements == (
        mig.Placement("2g.20gb", 0, 2), mig.Placement("1g.10gb", 2, 1),
        mig.Placement("1g.10gb", 3, 1), mig.Placement("3g.40gb", 4, 4),
    )  # fmt: skip
    # With the 3g forced to start 0 nothing fits: the search must not stop at the first start it tries.
    pinned = tuple(replace(p, starts=(0,)) if p.name == "3g.40gb" else p for p in A100_80.profiles)
    at_zero = replace(A100_80, profiles=pinned)
    assert not fits(at_zero, layout)
    assert not brute_force_fits(at_zero, layout)


def test_two_3g_and_a_1g_do_not_fit_because_the_3g_use_all_memory_slices() -> None:
    result = mig.place(A100_80, {"3g.40gb": 2, "1g.10gb": 1})
    assert (result.fits, result.unplaceable) == (False, "1g.10gb")
    assert result.reason == "3g.40gb x2 uses all 8 memory slices; 1g.10gb has no free start"
    assert result.would_fit == ()


@pytest.mark.parametrize("other", ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"])
def test_7g_fits_with_nothing_else(other: str) -> None:
    assert fits(A100_80, {"7g.80gb": 1})
    layout = {"7g.80gb": 1}
    layout[other] = layout.get(other, 0) + 1
    result = mig.place(A100_80, layout)
    assert not result.fits
    assert result.unplaceable == other


def test_two_1g_me_exceed_their_maximum_of_one() -> None:
    result = mig.place(A100_80, {"1g.10gb+me": 2})
    assert (result.fits, result.unplaceable) == (False, "1g.10gb+me")
    assert result.reason == "1g.10gb+me x2 exceeds its maximum of 1 per GPU"
    assert "1g.10gb+me" not in result.would_fit and "1g.10gb" in result.would_fit


def test_1g_me_and_7g_both_need_the_only_ofa() -> None:
    result = mig.place(A100_80, {"1g.10gb+me": 1, "7g.80gb": 1})
    assert (result.fits, result.unplaceable) == (False, "1g.10gb+me")
    assert result.reason == "7g.80gb already holds the GPU's only OFA, which 1g.10gb+me also needs"


@pytest.mark.parametrize(
    ("layout", "starts"),
    [({"2g.20gb": 3, "1g.20gb": 1}, [("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.20gb", 6)]),
     ({"1g.10gb": 6, "1g.20gb": 1}, [*(("1g.10gb", s) for s in range(6)), ("1g.20gb", 6)]),
     ({"2g.20gb": 2, "1g.20gb": 2}, [("2g.20gb", 0), ("2g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)]),
     ({"1g.20gb": 3, "1g.10gb": 2}, [("1g.20gb", 0), ("1g.20gb", 2), ("1g.10gb", 4), ("1g.10gb", 5), ("1g.20gb", 6)]),
     ({"4g.40gb": 1, "3g.40gb": 1}, [("4g.40gb", 0), ("3g.40gb", 4)])],
)  # fmt: skip
def test_slot_7_is_reached_by_the_double_memory_1g_and_the_layout_fits(
    layout: dict[str, int], starts: list[tuple[str, int]]
) -> None:
    result = mig.place(A100_80, layout)
    assert_valid_witness(A100_80, layout, result)
    assert [(p.profile, p.start) for p in result.placements] == starts


def test_a100_40gb_has_127_feasible_layouts_44_of_them_maximal() -> None:
    assert (len(mig.feasible_layouts(A100_40)), len(mig.maximal_layouts(A100_40))) == (127, 44)


def test_a30_has_19_feasible_layouts_8_of_them_maximal() -> None:
    assert (len(mig.feasible_layouts(A30)), len(mig.maximal_layouts(A30))) == (19, 8)


def test_rtx_pro_6000_has_114_feasible_layouts_64_of_them_maximal() -> None:
    assert (len(mig.feasible_layouts(RTX_PRO_6000)), len(mig.maximal_layouts(RTX_PRO_6000))) == (114, 64)


def test_the_layout_counts_agree_with_the_brute_force() -> None:
    for geometry in (A100_40, A30, RTX_PRO_6000):
        feasible = [layout for layout in bounded_layouts(geometry) if layout and brute_force_fits(geometry, layout)]
        assert len(feasible) == len(mig.feasible_layouts(geometry))
        assert {tuple(sorted(f.items())) for f in feasible} == {
            tuple(sorted(layout)) for layout in mig.feasible_layouts(geometry)
        }


def test_a30_media_extension_profiles_exclude_each_other() -> None:
    result = mig.place(A30, {"1g.6gb+me": 1, "2g.12gb+me": 1})
    assert (result.fits, result.unplaceable) == (False, "1g.6gb+me")
    assert "only OFA" in result.reason
    assert fits(A30, {"1g.6gb+me": 1, "2g.12gb": 1, "1g.6gb": 1})


def test_rtx_pro_6000_me_all_takes_every_media_engine() -> None:
    assert fits(RTX_PRO_6000, {"2g.48gb": 1, "1g.24gb": 2})
    assert fits(RTX_PRO_6000, {"1g.24gb+me.all": 1, "1g.24gb-me": 3})
    result = mig.place(RTX_PRO_6000, {"1g.24gb+me.all": 1, "1g.24gb": 1})
    assert not result.fits
    assert result.reason == "1g.24gb holds 1 of the GPU's 4 NVDEC engines; 1g.24gb+me.all needs 4"


# ---- API behaviour --------------------------------------------------------------------------------------------


def test_an_unknown_profile_does_not_fit_and_gets_close_suggestions() -> None:
    result = mig.place(gpu("H20"), {"1g.12gb": 2, "1g.10gb": 1})
    assert (result.fits, result.unplaceable, result.placements) == (False, "1g.10gb", ())
    assert result.reason.startswith("1g.10gb is not a MIG profile of this GPU, which has 1g.12gb, ")
    assert "1g.12gb" in result.would_fit


def test_the_seed_articles_h20_names_are_unknown_on_h20() -> None:
    assert mig.place(gpu("H20"), {"3g.47gb": 1}).unplaceable == "3g.47gb"
    assert fits(gpu("H20"), {"3g.48gb": 2})
    assert fits(gpu("H20"), {"1g.12gb": 7})


def test_profile_names_resolve_per_gpu() -> None:
    # 1g.10gb is two slots on A100-40GB (max 4) but one slot on A100-80GB (max 7).
    assert fits(A100_80, {"1g.10gb": 7})
    assert not fits(A100_40, {"1g.10gb": 5})
    assert fits(A100_40, {"1g.10gb": 4})


def test_zero_counts_are_ignored_and_an_empty_layout_fits() -> None:
    assert mig.place(A100_80, {}).fits
    assert mig.place(A100_80, {"7g.80gb": 1, "1g.10gb": 0}).fits


@pytest.mark.parametrize("count", [-1, 1.5, True, "2"])
def test_a_count_that_is_not_a_non_negative_integer_is_a_caller_error(count: object) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        mig.place(A100_80, {"1g.10gb": count})  # type: ignore[dict-item]


def test_would_fit_lists_what_can_still_be_added_to_a_fitting_layout() -> None:
    result = mig.place(A100_80, {"3g.40gb": 1})
    assert result.would_fit == ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb")
    assert mig.place(A100_80, {"4g.40gb": 1, "3g.40gb": 1}).would_fit == ()


def test_an_unreachable_start_is_explained() -> None:
    result = mig.place(A100_80, {"1g.10gb": 7, "1g.20gb": 1})
    assert (result.fits, result.unplaceable) == (False, "1g.10gb")
    assert result.reason == (
        "1g.20gb + 1g.10gb x6 uses all 8 memory slices; 1g.10gb has no free start"
    )


# ---- agreement with brute force -------------------------------------------------------------------------------


@pytest.mark.parametrize("product", sorted({m.product for m in MIG_MODELS}))
def test_place_agrees_with_brute_force_on_every_bounded_layout(product: str) -> None:
    geometry = gpu(product)
    # Half a GPU of overflow also exercises every kind of rejection, not only layouts that nearly fit.
    for layout in bounded_layouts(geometry, overflow=geometry.placement_units // 2):
        result = mig.place(geometry, layout)
        assert result.fits == brute_force_fits(geometry, layout), (product, layout)
        if result.fits:
            assert_valid_witness(geometry, layout, result)
        else:
            assert result.unplaceable in layout and result.reason, (product, layout)


@st.composite
def gpu_and_layout(draw: st.DrawFn) -> tuple[catalog.MigGeometry, dict[str, int]]:
    geometry = draw(st.sampled_from([m.mig for m in MIG_MODELS if m.mig is not None]))
    chosen = draw(st.lists(st.sampled_from(geometry.profiles), max_size=len(geometry.profiles), unique=True))
    return geometry, {p.name: draw(st.integers(0, p.max_count + 1)) for p in chosen}


@settings(max_examples=300, deadline=None)
@given(gpu_and_layout())
def test_place_is_exact_and_its_answers_are_consistent(case: tuple[catalog.MigGeometry, dict[str, int]]) -> None:
    geometry, layout = case
    result = mig.place(geometry, layout)
    assert result.fits == brute_force_fits(geometry, layout)
    if not result.fits:
        assert result.unplaceable in layout and result.reason
        return
    assert_valid_witness(geometry, layout, result)
    for name, count in layout.items():  # feasibility survives removing any one instance
        if count:
            assert fits(geometry, {**layout, name: count - 1})
    for name in result.would_fit:  # every suggestion really fits, by the oracle
        assert brute_force_fits(geometry, {**layout, name: layout.get(name, 0) + 1})


# ---- a node's MIG devices spread over its GPUs ------------------------------------------------------------------


A100_PCIE_40 = gpu("A100-PCIE-40GB")


def brute_force_splits(geometry: catalog.MigGeometry, totals: Mapping[str, int], gpus: int) -> bool:
    """Naive: is there any choice of `gpus` feasible layouts (or idle GPUs) adding up to `totals`?"""
    layouts = [dict(layout) for layout in mig.feasible_layouts(geometry)] + [{}]
    for chosen in itertools.combinations_with_replacement(layouts, gpus):
        added: dict[str, int] = {}
        for layout in chosen:
            for name, n in layout.items():
                added[name] = added.get(name, 0) + n
        if added == {k: v for k, v in totals.items() if v}:
            return True
    return False


def test_four_1g_5gb_and_two_2g_10gb_need_two_a100_40gb_split_evenly() -> None:
    # NVIDIA's MIG user guide, A100-40GB profile table (mig.md §1): 1g.5gb takes 1 of the 7 compute slices and
    # 2g.10gb 2, so the 8 compute slices of these six devices cannot be one GPU's.
    assert not mig.place(A100_PCIE_40, {"1g.5gb": 4, "2g.10gb": 2}).fits
    found = mig.fewest_gpus(A100_PCIE_40, {"1g.5gb": 4, "2g.10gb": 2})
    assert found == mig.Split(2, (((0, 1), {"1g.5gb": 2, "2g.10gb": 1}),)) and found.even


def test_devices_no_even_split_holds_go_to_gpus_in_groups() -> None:
    found = mig.split(A100_40, {"1g.5gb": 5, "3g.20gb": 1}, 2)
    assert found == mig.Split(2, (((0,), {"1g.5gb": 4, "3g.20gb": 1}), ((1,), {"1g.5gb": 1})))
    assert not found.even


def test_a_split_on_more_gpus_than_needed_leaves_the_rest_idle_and_an_unknown_profile_has_none() -> None:
    assert mig.split(A100_40, {"7g.40gb": 1}, 3) == mig.Split(3, (((0,), {"7g.40gb": 1}),))
    assert mig.split(A100_40, {"1g.12gb": 1}, 1) is None
    assert mig.fewest_gpus(A100_40, {"1g.12gb": 1}) is None
    assert mig.fewest_gpus(A100_40, {"7g.40gb": 9}, most=8) is None


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_fewest_gpus_is_what_a_brute_force_finds(data: st.DataObject) -> None:
    geometry = data.draw(st.sampled_from([A30, A100_40]))
    names = [p.name for p in geometry.profiles]
    totals = data.draw(st.dictionaries(st.sampled_from(names), st.integers(1, 4), min_size=1, max_size=3))
    found = mig.fewest_gpus(geometry, totals, most=12)
    assert found is not None  # every profile fits an empty GPU, so a GPU per instance (12 at most here) always works
    added: dict[str, int] = {}
    for indices, layout in found.groups:
        assert mig.place(geometry, layout).fits
        for name, n in layout.items():
            added[name] = added.get(name, 0) + n * len(indices)
    assert added == totals
    assert sorted(i for indices, _ in found.groups for i in indices) == list(range(found.gpus))  # none idle
    if found.gpus > 1 and found.gpus <= 3:
        assert not brute_force_splits(geometry, totals, found.gpus - 1)
