"""Tests for the GPU catalog: the packaged YAML validates, and its facts match the reference notes."""

from __future__ import annotations

import math
import re
from importlib import resources

import pytest

from policy.hardware import catalog

# Products the catalog must know (the brief's coverage list), by the label GFD writes.
REQUIRED_PRODUCTS = (
    "Tesla-T4", "NVIDIA-A10", "NVIDIA-A10G", "NVIDIA-L4", "NVIDIA-L20", "NVIDIA-L40", "NVIDIA-L40S",
    "NVIDIA-A30", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB", "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-A100-80GB-PCIe", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL",
    "NVIDIA-GH200-480GB", "NVIDIA-H200", "NVIDIA-H20", "NVIDIA-B200", "Tesla-V100-SXM2-16GB",
)  # fmt: skip

MINIMAL_MODEL = """
models:
  NVIDIA-X1:
    display_name: NVIDIA X1
    aliases: [X1]
    memory_mib: 1024
    memory_type: GDDR6
    architecture: Ampere
    compute_capability: "8.6"
    mig: null
"""


def packaged_text() -> str:
    return resources.files("policy.hardware").joinpath("catalog.yaml").read_text(encoding="utf-8")


def model(name: str) -> catalog.GpuModel:
    found = catalog.lookup(name)
    assert found is not None, name
    return found


def geometry(name: str) -> catalog.MigGeometry:
    found = model(name).mig
    assert found is not None, name
    return found


def mig_profile(gpu: str, profile: str) -> catalog.MigProfile:
    found = geometry(gpu).profile(profile)
    assert found is not None, (gpu, profile)
    return found


# ---- the packaged file ----------------------------------------------------------------------------------------


def test_the_packaged_catalog_validates_and_is_loaded_once() -> None:
    assert catalog.models() is catalog.models()
    assert catalog.parse_catalog(packaged_text()) == catalog.models()


def test_every_product_and_alias_is_unique_ignoring_case() -> None:
    names = [n.lower() for m in catalog.models() for n in (m.product, *m.aliases)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("product", REQUIRED_PRODUCTS)
def test_every_required_gpu_is_in_the_catalog_under_its_gfd_product_label(product: str) -> None:
    assert model(product).product == product


def test_non_mig_gpus_have_no_geometry_and_mig_gpus_have_one() -> None:
    for name in ("T4", "A10", "A10G", "L4", "L20", "L40", "L40S", "V100-16GB"):
        assert not model(name).mig_capable
    for name in ("A30", "A100-40GB", "A100-80GB", "H100", "H100-NVL", "GH200", "H200", "H20", "B200"):
        assert model(name).mig_capable


# ---- facts from gpu-memory.md and device-plugin.md ------------------------------------------------------------


def test_t4_has_no_mig_and_15360_mib() -> None:
    t4 = model("Tesla-T4")
    assert (t4.mig, t4.memory_mib, t4.compute_capability, t4.architecture) == (None, 15360, "7.5", "Turing")


def test_l20_has_46068_mib_and_compute_capability_8_9() -> None:
    l20 = model("L20")
    assert (l20.product, l20.memory_mib, l20.compute_capability) == ("NVIDIA-L20", 46068, "8.9")
    assert l20.architecture == "Ada Lovelace"


@pytest.mark.parametrize(
    ("name", "memory_mib"),
    [("A10G", 23028), ("L4", 23034), ("L40S", 46068), ("A30", 24576), ("A100-SXM4-40GB", 40960),
     ("A100-80GB", 81920), ("H100", 81559), ("H100-PCIe", 81559), ("H100-NVL", 95830), ("H20", 97871),
     ("GH200", 97871), ("H200", 143771), ("B200", 183359), ("V100-32GB", 32768)],
)  # fmt: skip
def test_memory_is_what_current_drivers_report(name: str, memory_mib: int) -> None:
    assert model(name).memory_mib == memory_mib


def test_mps_client_cap_is_48_from_compute_capability_7_5_and_16_below() -> None:
    assert model("V100-16GB").mps_max_clients == 16
    assert model("T4").mps_max_clients == 48
    assert {m.mps_max_clients for m in catalog.models() if m.compute_capability != "7.0"} == {48}
    assert catalog.mps_max_clients("7.5") == 48
    assert catalog.mps_max_clients("7.0") == 16
    assert catalog.mps_max_clients("10.0") == 48


# ---- MIG facts from mig.md ------------------------------------------------------------------------------------


def test_h20_uses_nvidia_96gb_names_not_the_h100_nvl_ones() -> None:
    h20 = geometry("NVIDIA-H20")
    small = mig_profile("H20", "1g.12gb")
    assert (small.gi_profile_id, small.max_count, small.size) == (19, 7, 1)
    assert [p.name for p in h20.profiles] == [
        "1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb",
    ]  # fmt: skip
    assert h20.profile("3g.47gb") is None
    assert h20.profile("7g.94gb") is None
    assert h20.pci_device_ids == ("0x232910DE",)


def test_a100_40gb_1g_10gb_is_the_two_slot_id_15_profile() -> None:
    profile = mig_profile("A100-40GB", "1g.10gb")
    assert (profile.gi_profile_id, profile.size, profile.max_count, profile.starts) == (15, 2, 4, (0, 2, 4, 6))


def test_a100_80gb_1g_10gb_is_the_one_slot_id_19_profile() -> None:
    profile = mig_profile("A100-80GB", "1g.10gb")
    assert (profile.gi_profile_id, profile.size, profile.max_count) == (19, 1, 7)
    assert profile.starts == (0, 1, 2, 3, 4, 5, 6)


def test_the_8_slot_family_shares_one_placement_table() -> None:
    expected = [(19, 1, 1, 7), (20, 1, 1, 1), (15, 1, 2, 4), (14, 2, 2, 3), (9, 3, 4, 2), (5, 4, 4, 1), (0, 7, 8, 1)]
    for m in catalog.models():
        if m.mig is not None and m.mig.placement_units == 8:
            table = [(p.gi_profile_id, p.compute_slices, p.size, p.max_count) for p in m.mig.profiles]
            assert (m.mig.compute_slices, table) == (7, expected), m.product


def test_a30_has_its_own_ids_and_four_slots() -> None:
    a30 = geometry("A30")
    assert (a30.compute_slices, a30.placement_units, a30.pci_device_ids) == (4, 4, ("0x20B710DE",))
    assert [(p.name, p.gi_profile_id) for p in a30.profiles] == [
        ("1g.6gb", 14), ("1g.6gb+me", 21), ("2g.12gb", 5), ("2g.12gb+me", 6), ("4g.24gb", 0),
    ]  # fmt: skip


def test_media_extension_and_full_gpu_profiles_hold_the_single_ofa() -> None:
    exclusive = {p.name for p in geometry("A100-80GB").profiles if p.uses_exclusive_engine}
    assert exclusive == {"1g.10gb+me", "7g.80gb"}
    exclusive = {p.name for p in geometry("A30").profiles if p.uses_exclusive_engine}
    assert exclusive == {"1g.6gb+me", "2g.12gb+me", "4g.24gb"}


def test_pci_device_ids_are_written_as_mig_parted_device_filters() -> None:
    assert geometry("A100-SXM4-80GB").pci_device_ids == ("0x20B210DE",)
    assert geometry("A100-PCIE-40GB").pci_device_ids == ("0x20B110DE", "0x20F110DE")
    for m in catalog.models():
        for pci in m.mig.pci_device_ids if m.mig else ():
            assert re.fullmatch(r"0x[0-9A-F]{4}10DE", pci)


def test_measured_profile_memory_is_the_lgip_gib_column_floored_to_mib() -> None:
    assert mig_profile("H100", "1g.10gb").memory_mib == 9984  # 9.75 GiB
    assert mig_profile("H100", "1g.20gb").memory_mib == 20090  # 19.62 GiB
    assert mig_profile("A100-40GB", "1g.5gb").memory_mib == 4864  # 4.75 GiB
    assert not mig_profile("H100", "7g.80gb").memory_estimated
    assert mig_profile("H20", "1g.12gb").memory_estimated


def test_every_profile_name_follows_go_nvlib_naming_from_its_memory() -> None:
    # go-nvlib names a GI by rounding memory/total up to an eighth, times ceil(total GiB), half away from zero
    # (mig.md §1). Checking that against our memory figures catches a mistyped name or number.
    for m in catalog.models():
        for p in m.mig.profiles if m.mig else ():
            eighths = math.ceil(p.memory_mib * 8 / m.memory_mib)
            gigabytes = math.floor(eighths * math.ceil(m.memory_mib / 1024) / 8 + 0.5)
            assert re.match(rf"\d+g\.{gigabytes}gb", p.name), (m.product, p.name, gigabytes)


def test_every_mig_profile_fits_within_its_gpu() -> None:
    for m in catalog.models():
        if m.mig is None:
            continue
        for p in m.mig.profiles:
            assert p.memory_mib <= m.memory_mib
            assert p.starts[-1] + p.size <= m.mig.placement_units
            assert p.compute_slices <= m.mig.compute_slices


# ---- lookup and suggestions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "product"),
    [("NVIDIA-L20", "NVIDIA-L20"), ("l20", "NVIDIA-L20"), ("t4", "Tesla-T4"), ("A100-SXM4-40GB",
     "NVIDIA-A100-SXM4-40GB"), ("a100-80gb", "NVIDIA-A100-SXM4-80GB"), ("H100", "NVIDIA-H100-80GB-HBM3"),
     ("h20", "NVIDIA-H20"), ("NVIDIA-A100-80GB-PCIE", "NVIDIA-A100-80GB-PCIe")],
)  # fmt: skip
def test_lookup_finds_products_and_aliases_ignoring_case(name: str, product: str) -> None:
    assert model(name).product == product


def test_lookup_returns_none_for_unknown_and_shared_names() -> None:
    assert catalog.lookup("NVIDIA-A10G-SHARED") is None
    assert catalog.lookup("NVIDIA-Z9") is None


def test_strip_shared_removes_only_the_gfd_suffix() -> None:
    assert catalog.strip_shared("NVIDIA-A10G-SHARED") == "NVIDIA-A10G"
    assert catalog.strip_shared("NVIDIA-A10G") == "NVIDIA-A10G"
    assert model(catalog.strip_shared("Tesla-T4-SHARED")).product == "Tesla-T4"


def test_suggest_offers_close_spellings_for_a_typo() -> None:
    assert "NVIDIA-L20" in catalog.suggest("NVIDIA-L2O")
    # A family token decides first, then likeness to any spelling: H100-SXM5 is the SXM part, whose product
    # label is NVIDIA-H100-80GB-HBM3 (alias H100-SXM), not the NVL or PCIe card.
    assert catalog.suggest("H100-SXM5")[0] == "NVIDIA-H100-80GB-HBM3"
    assert len(catalog.suggest("A1OO", limit=2)) <= 2
    assert catalog.suggest("completely-unrelated") == ()


def test_a_bare_family_name_suggests_every_variant_of_that_family() -> None:
    # "A100" alone is ambiguous (40 or 80 GB, SXM4 or PCIe: different memory and MIG profile names), and edit
    # distance alone would have offered the unrelated A10.
    assert set(catalog.suggest("A100")) == {
        "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB", "NVIDIA-A100-80GB-PCIe"}
    assert "NVIDIA-A10" not in catalog.suggest("A100")


def test_the_nvidia_prefix_is_optional_in_lookups() -> None:
    assert catalog.lookup("NVIDIA-H100-SXM5-80GB") == catalog.lookup("H100-SXM5-80GB") is not None


# ---- the schema rejects bad data ------------------------------------------------------------------------------


def test_a_minimal_catalog_parses() -> None:
    (only,) = catalog.parse_catalog("placement_tables: {}\n" + MINIMAL_MODEL)
    assert (only.product, only.aliases, only.mig_capable, only.mps_max_clients) == ("NVIDIA-X1", ("X1",), False, 48)


def test_a_duplicate_product_key_is_an_error() -> None:
    text = "placement_tables: {}\n" + MINIMAL_MODEL + MINIMAL_MODEL.replace("models:\n", "")
    with pytest.raises(catalog.CatalogError, match="duplicate key 'NVIDIA-X1'"):
        catalog.parse_catalog(text)


def test_an_alias_used_twice_is_an_error_even_in_another_case() -> None:
    second = MINIMAL_MODEL.replace("models:\n", "").replace("NVIDIA-X1:", "NVIDIA-X2:").replace("[X1]", "[x1]")
    with pytest.raises(catalog.CatalogError, match="duplicates a name of NVIDIA-X1"):
        catalog.parse_catalog("placement_tables: {}\n" + MINIMAL_MODEL + second)


def test_an_unknown_field_is_an_error() -> None:
    text = "placement_tables: {}\n" + MINIMAL_MODEL.replace("mig: null", "mig: null\n    tdp_watts: 275")
    with pytest.raises(catalog.CatalogError, match="tdp_watts"):
        catalog.parse_catalog(text)


def test_an_unquoted_compute_capability_is_an_error() -> None:
    text = "placement_tables: {}\n" + MINIMAL_MODEL.replace('"8.6"', "8.6")
    with pytest.raises(catalog.CatalogError, match="compute_capability"):
        catalog.parse_catalog(text)


def test_a_mig_block_must_name_every_profile_of_its_table() -> None:
    text = packaged_text().replace("        0: {name: 4g.24gb, memory_mib: 24002}\n", "")
    with pytest.raises(catalog.CatalogError, match="NVIDIA-A30: profiles must list exactly"):
        catalog.parse_catalog(text)


def test_a_profile_name_must_match_its_compute_slices() -> None:
    text = packaged_text().replace("{name: 4g.24gb, memory_mib: 24002}", "{name: 3g.24gb, memory_mib: 24002}")
    with pytest.raises(catalog.CatalogError, match=r"3g\.24gb does not match"):
        catalog.parse_catalog(text)


def test_a_placement_that_overruns_the_gpu_is_an_error() -> None:
    text = packaged_text().replace("9: {nvml_enum: 2, compute_slices: 3, size: 4, max_count: 2, starts: [0, 4]}",
                                   "9: {nvml_enum: 2, compute_slices: 3, size: 4, max_count: 2, starts: [0, 5]}")
    with pytest.raises(catalog.CatalogError, match="overruns"):
        catalog.parse_catalog(text)
