"""NVIDIA driver releases MIG needs, per GPU and per profile (NVIDIA MIG user guide: "Deployment Considerations"
of the 620 guide for the GPUs, "Supported MIG Profiles" notes for the profiles, "Partitioning" for the A100 4g+3g
combination; collected in the project's plugin-release notes §6)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Driver = tuple[int, ...]


def parse_driver(text: str) -> Driver:
    """``550.54.15`` -> (550, 54, 15); a branch such as ``535`` -> (535,)."""
    return tuple(int(part) for part in text.split("."))


@dataclass(frozen=True)
class Gate:
    needs: str
    """The oldest driver that has it: a full version, or a branch (R525 as ``525``)."""
    what: str

    def satisfied_by(self, driver: Driver) -> bool | None:
        """True or False, or None when a bare branch cannot tell (535 against 535.161.07)."""
        needed = parse_driver(self.needs)
        if driver[: len(needed)] == needed[: len(driver)] and len(driver) < len(needed):
            return None
        return driver >= needed


# (product words that must all appear, minimum driver): the first MIG driver of each GPU.
_GPUS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("A100",), "450.80.02"), (("A800",), "450.80.02"), (("A30",), "460.73.01"), (("H100",), "525.85.12"),
    (("H800",), "525.85.12"), (("H20",), "535.161.07"), (("H200",), "550.90.07"), (("GH200",), "550.90.07"),
    (("B200",), "570.133.20"), (("B300",), "580.82.07"), (("RTX", "PRO", "6000"), "575.51.03"),
    (("RTX", "PRO", "5000"), "575.57.08"),
)
# (product words, profile, branch): profiles that arrived after the GPU's first MIG driver.
_PROFILES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("A100", "40GB"), "1g.5gb+me", "470"), (("A100", "40GB"), "1g.10gb", "525"),
    (("A30",), "1g.6gb+me", "470"), (("A30",), "2g.12gb+me", "525"),
)


def _is(product: str, words: tuple[str, ...]) -> bool:
    """Whether every word is a dash-separated token of the product (H20 is not a token of NVIDIA-H200)."""
    tokens = set(product.upper().replace("_", "-").split("-"))
    return all(w in tokens for w in words)


def mig_gates(product: str, layouts: Iterable[dict[str, int]]) -> list[Gate]:
    """What MIG layouts (one per GPU group) of this GPU need from the driver."""
    layouts = list(layouts)
    gates = [Gate(needs, f"MIG on {product}") for words, needs in _GPUS if _is(product, words)][:1]
    wanted = {profile for layout in layouts for profile in layout}
    gates += [Gate(branch, f"MIG profile {profile} on {product}") for words, profile, branch in _PROFILES
              if profile in wanted and _is(product, words)]
    if _is(product, ("A100",)) or _is(product, ("A800",)):
        for layout in layouts:
            if any(p.startswith("4g.") for p in layout) and any(p.startswith("3g.") for p in layout):
                gates.append(Gate("510", f"a 4g and a 3g instance on one {product}"))
                break
    return gates
