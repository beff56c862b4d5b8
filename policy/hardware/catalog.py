"""The GPU hardware catalog: frozen records loaded and validated from the packaged catalog.yaml."""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    StringConstraints,
    ValidationError,
    model_validator,
)

__all__ = [
    "CatalogError",
    "GpuModel",
    "MigGeometry",
    "MigProfile",
    "lookup",
    "misspelt",
    "models",
    "parse_catalog",
    "strip_shared",
    "suggest",
]

SHARED_SUFFIX = "-SHARED"


# ---------------------------------------------------------------------------------------------------------------
# Public records
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance (GI) profile of one GPU model.

    `size` and `starts` are in placement units (memory slices); an instance at start s occupies [s, s + size).
    `engines` lists the scarce engines the instance takes from `MigGeometry.engine_pool`, as (kind, count) pairs.
    `uses_exclusive_engine` is true when it takes an engine the GPU has only one of (the OFA): such a profile
    excludes every other holder of that engine.
    """

    name: str
    gi_profile_id: int
    compute_slices: int
    size: int
    memory_mib: int
    max_count: int
    starts: tuple[int, ...]
    uses_exclusive_engine: bool
    engines: tuple[tuple[str, int], ...] = ()
    memory_estimated: bool = False
    nvml_enum: int = 0
    """NVML's GPU instance profile enum (NVML_GPU_INSTANCE_PROFILE_*), which is not the GI profile ID: device-plugin
    releases name and walk profiles by it (policy/hardware/releases.py)."""


@dataclass(frozen=True)
class MigGeometry:
    """How one GPU model can be partitioned: its budgets and every GI profile, in nvidia-smi's table order."""

    compute_slices: int
    placement_units: int
    pci_device_ids: tuple[str, ...]
    profiles: tuple[MigProfile, ...]
    engine_pool: tuple[tuple[str, int], ...] = ()

    def profile(self, name: str) -> MigProfile | None:
        """The profile with exactly this name (names are case-sensitive, as in mig-parted), or None."""
        return next((p for p in self.profiles if p.name == name), None)


@dataclass(frozen=True)
class GpuModel:
    """One GPU as GPU Feature Discovery labels it; `memory_mib` is the `nvidia.com/gpu.memory` label value."""

    product: str
    aliases: tuple[str, ...]
    display_name: str
    memory_mib: int
    architecture: str
    compute_capability: str
    mps_max_clients: int
    mig: MigGeometry | None
    memory_type: str = ""

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None


class CatalogError(ValueError):
    """The catalog text is not valid YAML or breaks the catalog schema."""


# ---------------------------------------------------------------------------------------------------------------
# Schema of catalog.yaml (private: only this module reads the file)
# ---------------------------------------------------------------------------------------------------------------

_Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
# go-nvlib's profile grammar (mig.md §4): [<C>c.]<G>g.<GB>gb, then +attr[,attr] or -attr[,attr].
_ProfileName = Annotated[
    str, StringConstraints(pattern=r"^(\d+c\.)?\d+g\.\d+gb([+-][A-Za-z][A-Za-z0-9.]*(,[A-Za-z][A-Za-z0-9.]*)*)?$")
]
# mig-parted device-filter form: device ID in the high 16 bits, NVIDIA's vendor 10DE in the low 16.
_PciId = Annotated[str, StringConstraints(pattern=r"^0x[0-9A-F]{4}10DE$")]
# A MIG profile name: [<C>c.]<G>g.<GB>gb[+attr|-attr]; resource names spell "+" as "." (nvidia.com/mig-1g.10gb.me).
_PROFILE_NAME = re.compile(r"^(?:\d+c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb(?P<attr>[-+.][a-z].*)?$")
_ComputeCapability = Annotated[str, StringConstraints(pattern=r"^\d+\.\d$")]
_Architecture = Literal["Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"]
_MemoryType = Literal["GDDR6", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e"]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _SlotSpec(_Spec):
    nvml_enum: NonNegativeInt
    compute_slices: PositiveInt
    size: PositiveInt
    max_count: PositiveInt
    starts: list[NonNegativeInt] = Field(min_length=1)
    engines: dict[str, PositiveInt] = Field(default_factory=dict)


class _TableSpec(_Spec):
    compute_slices: PositiveInt
    placement_units: PositiveInt
    engine_pool: dict[str, PositiveInt]
    profiles: dict[NonNegativeInt, _SlotSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _slots_fit_the_gpu(self) -> _TableSpec:
        for gi_id, slot in self.profiles.items():
            if slot.starts != sorted(set(slot.starts)):
                raise ValueError(f"profile {gi_id}: starts must be strictly increasing")
            if slot.starts[-1] + slot.size > self.placement_units:
                raise ValueError(f"profile {gi_id}: start {slot.starts[-1]} + size {slot.size} overruns the GPU")
            if slot.compute_slices > self.compute_slices:
                raise ValueError(f"profile {gi_id}: more compute slices than the GPU has")
        enums = [slot.nvml_enum for slot in self.profiles.values()]
        if len(set(enums)) != len(enums):
            raise ValueError("two GI profiles share one NVML profile enum")
            for kind, count in slot.engines.items():
                if count > self.engine_pool.get(kind, 0):
                    raise ValueError(f"profile {gi_id}: needs {count} {kind}, the pool has fewer")
        return self


class _ProfileSpec(_Spec):
    name: _ProfileName
    memory_mib: PositiveInt
    estimated: bool = False


class _MigSpec(_Spec):
    placement_table: str
    pci_device_ids: list[_PciId] = Field(min_length=1)
    profiles: dict[NonNegativeInt, _ProfileSpec]


class _ModelSpec(_Spec):
    display_name: str = Field(min_length=1)
    aliases: list[_Label]
    memory_mib: PositiveInt
    memory_type: _MemoryType
    architecture: _Architecture
    compute_capability: _ComputeCapability
    mig: _MigSpec | None  # required key: a GPU without MIG says `mig: null`


class _CatalogSpec(_Spec):
    placement_tables: dict[str, _TableSpec]
    models: dict[_Label, _ModelSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> _CatalogSpec:
        _check_unique_names(self.models)
        for product, model in self.models.items():
            if model.mig is not None:
                _check_mig(product, model.memory_mib, model.mig, self.placement_tables)
        return self


def _check_unique_names(specs: dict[str, _ModelSpec]) -> None:
    owner: dict[str, str] = {}
    for product, spec in specs.items():
        for name in (product, *spec.aliases):
            key = name.lower()
            if key.endswith(SHARED_SUFFIX.lower()):
                raise ValueError(f"{product}: {name!r} ends with {SHARED_SUFFIX}, which GFD reserves for sharing")
            if key in owner:
                raise ValueError(f"{name!r} of {product} duplicates a name of {owner[key]} (case-insensitive)")
            owner[key] = product


def _check_mig(product: str, memory_mib: int, mig: _MigSpec, tables: dict[str, _TableSpec]) -> None:
    table = tables.get(mig.placement_table)
    if table is None:
        raise ValueError(f"{product}: unknown placement_table {mig.placement_table!r}")
    if set(mig.profiles) != set(table.profiles):
        raise ValueError(f"{product}: profiles must list exactly the GI IDs {sorted(table.profiles)}")
    names = [p.name for p in mig.profiles.values()]
    if len(set(names)) != len(names):
        raise ValueError(f"{product}: duplicate MIG profile names")
    for gi_id, profile in mig.profiles.items():
        match = _PROFILE_NAME.match(profile.name)
        if match is None or int(match["g"]) != table.profiles[gi_id].compute_slices:
            raise ValueError(f"{product}: {profile.name} does not match the compute slices of GI profile {gi_id}")
        if profile.memory_mib > memory_mib:
            raise ValueError(f"{product}: {profile.name} has more memory than the GPU")


# ---------------------------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------------------------


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml parses it 10x faster
    """A SafeLoader that rejects duplicate mapping keys, which PyYAML would otherwise let the last one win."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_catalog(text: str) -> tuple[GpuModel, ...]:
    """Parse and validate catalog YAML text into records, in file order.

    Raises CatalogError when the YAML is malformed (duplicate keys included) or breaks the schema.
    """
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
        spec = _CatalogSpec.model_validate(data)
    except (yaml.YAMLError, ValidationError) as err:
        raise CatalogError(f"invalid GPU catalog: {err}") from err
    return tuple(_to_model(product, m, spec.placement_tables) for product, m in spec.models.items())


def _to_model(product: str, spec: _ModelSpec, tables: dict[str, _TableSpec]) -> GpuModel:
    return GpuModel(
        product=product,
        aliases=tuple(spec.aliases),
        display_name=spec.display_name,
        memory_mib=spec.memory_mib,
        architecture=spec.architecture,
        compute_capability=spec.compute_capability,
        mps_max_clients=mps_max_clients(spec.compute_capability),
        mig=None if spec.mig is None else _to_geometry(spec.mig, tables[spec.mig.placement_table]),
        memory_type=spec.memory_type,
    )


def _to_geometry(spec: _MigSpec, table: _TableSpec) -> MigGeometry:
    pool = tuple(sorted(table.engine_pool.items()))
    singletons = {kind for kind, count in pool if count == 1}
    profiles = tuple(
        MigProfile(
            name=spec.profiles[gi_id].name,
            gi_profile_id=gi_id,
            compute_slices=slot.compute_slices,
            size=slot.size,
            memory_mib=spec.profiles[gi_id].memory_mib,
            max_count=slot.max_count,
            starts=tuple(slot.starts),
            uses_exclusive_engine=bool(singletons & slot.engines.keys()),
            engines=tuple(sorted(slot.engines.items())),
            memory_estimated=spec.profiles[gi_id].estimated,
            nvml_enum=slot.nvml_enum,
        )
        for gi_id, slot in table.profiles.items()
    )
    return MigGeometry(
        compute_slices=table.compute_slices,
        placement_units=table.placement_units,
        pci_device_ids=tuple(spec.pci_device_ids),
        profiles=profiles,
        engine_pool=pool,
    )


def mps_max_clients(compute_capability: str) -> int:
    """The device plugin's MPS client cap: 48 from compute capability 7.5, else 16.

    Source: NVIDIA/k8s-device-plugin `cmd/mps-control-daemon/mps/device.go` (compares against 7.5, so V100 gets 16).
    """
    major, minor = (int(part) for part in compute_capability.split("."))
    return 48 if (major, minor) >= (7, 5) else 16


# ---------------------------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------------------------


@functools.cache
def models() -> tuple[GpuModel, ...]:
    """Every GPU model of the packaged catalog, loaded and validated once."""
    text = resources.files("policy.hardware").joinpath("catalog.yaml").read_text(encoding="utf-8")
    return parse_catalog(text)


@functools.cache
def _index() -> dict[str, GpuModel]:
    # Products also without their NVIDIA- prefix, which drivers before R470 left out (gpu-memory.md).
    index = {name.lower().removeprefix("nvidia-"): m for m in models() for name in (m.product, *m.aliases)}
    index.update({name.lower(): m for m in models() for name in (m.product, *m.aliases)})
    return index


def lookup(name: str) -> GpuModel | None:
    """The model whose product label or alias equals `name`, ignoring case; None otherwise.

    A product label with GFD's `-SHARED` suffix is not found: call `strip_shared` first if that is meant.
    The `NVIDIA-` prefix is optional, since drivers before R470 left it out (gpu-memory.md).
    """
    key = name.lower()
    return _index().get(key) or _index().get(key.removeprefix("nvidia-"))


def misspelt(name: str) -> str | None:
    """The product whose label or alias `name` is one typo away from, when it is not in the catalog: a letter typed for
    a digit (L2O for L20), punctuation mistyped, two neighbours swapped, or a character other than a digit dropped
    or added. A digit changed, added or dropped names another GPU (A10 and A40, L4 and L40, H20 and H200), and so
    does a letter typed for a letter (T4 and P4)."""
    if lookup(name) is not None:
        return None
    wanted = name.lower()
    found = []
    for model in models():
        for spelling in (model.product, *model.aliases):
            key = spelling.lower()
            pairs = ((wanted, key), (wanted.removeprefix("nvidia-"), key.removeprefix("nvidia-")))
            kinds = [kind for a, b in pairs if (kind := _typo(a, b)) is not None]
            if kinds:
                found.append((min(kinds), model.product))
    return min(found)[1] if found else None


def _typo(a: str, b: str) -> int | None:
    """How `a` is one typo from `b`: 0 a character mistyped, 1 two swapped, 2 one dropped or added; else None."""
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            x, y = a[diff[0]], b[diff[0]]
            return 0 if x.isdigit() != y.isdigit() or not (x.isalnum() or y.isalnum()) else None
        swapped = len(diff) == 2 and diff[1] == diff[0] + 1 and (a[diff[0]], a[diff[1]]) == (b[diff[1]], b[diff[0]])
        return 1 if swapped else None
    if abs(len(a) - len(b)) != 1:
        return None
    short, long = sorted((a, b), key=len)
    i = next((i for i in range(len(short)) if short[i] != long[i]), len(short))
    return 2 if short[i:] == long[i + 1:] and not long[i].isdigit() else None


def nearest_profile(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate MIG profile closest to ``name``: same attributes, then same compute slices, then the
    closest memory (1g.5gb on an H100 is 1g.10gb; 3g.47gb on an H20 is 3g.48gb). None without candidates."""
    wanted = _PROFILE_NAME.match(name)
    scored = []
    for candidate in candidates:
        have = _PROFILE_NAME.match(candidate)
        if have is None:
            continue
        if wanted is None:
            scored.append(((True, True, 0, 0), candidate))
            continue
        slices = int(have["g"]) - int(wanted["g"])
        attrs_differ = (have["attr"] or "").lstrip("+.") != (wanted["attr"] or "").lstrip("+.")
        scored.append(((attrs_differ, slices != 0, abs(slices), abs(int(have["gb"]) - int(wanted["gb"]))), candidate))
    return min(scored)[1] if scored else None


def strip_shared(product: str) -> str:
    """The product label without the `-SHARED` suffix GFD appends when replicas > 1 (device-plugin.md §6)."""
    return product.removesuffix(SHARED_SUFFIX)


_FAMILY = re.compile(r"^(?:[a-z]{1,2}\d{1,4}[a-z]?)$")


def suggest(name: str, limit: int = 3) -> tuple[str, ...]:
    """Up to `limit` products or aliases that look like `name`, closest first (for "did you mean").

    A family token in the name (A100, H100, L4) decides first: edit distance alone would offer A10 for
    A100 or an A100 for "H100-SXM5-80GB".  Without one, the closest spellings win."""
    family = [t for t in re.split(r"[-_ .]+", name.lower()) if _FAMILY.match(t)]
    same = [m for m in models() if family and family[0] in _tokens(m)]
    if same:
        def likeness(model: GpuModel) -> float:
            return max(difflib.SequenceMatcher(None, name.lower(), n.lower()).ratio()
                       for n in (model.product, *model.aliases))
        return tuple(m.product for m in sorted(same, key=lambda m: (-likeness(m), m.product)))
    spellings = {n.lower(): n for m in models() for n in (m.product, *m.aliases)}
    matches = difflib.get_close_matches(name.lower(), list(spellings), n=limit, cutoff=0.6)
    return tuple(spellings[key] for key in matches)


def families(capable_of_mig: bool = False) -> tuple[str, ...]:
    """Family names (A100, H20, L4...) of the catalog's models, for messages that list what exists."""
    found = {_family(m.product) for m in models() if m.mig_capable or not capable_of_mig}
    return tuple(sorted(f for f in found if f))


@functools.cache
def family_names() -> frozenset[str]:
    """Lower-case family names (a100, h100...), each of which may stand for several models."""
    return frozenset(f.lower() for f in families())


def _family(product: str) -> str:
    return next((t.upper() for t in re.split(r"[-_ .]+", product.lower()) if _FAMILY.match(t)), "")


def _tokens(model: GpuModel) -> set[str]:
    return {t for n in (model.product, *model.aliases) for t in re.split(r"[-_ .]+", n.lower())}
