"""NVIDIA driver releases that what a class runs needs: MIG per GPU and per profile, and the MPS control daemon's
per-client memory limit.

MIG: the NVIDIA MIG user guide: "Deployment Considerations" of the 620 guide for the GPUs, "Supported MIG Profiles"
notes for the profiles, "Partitioning" for the A100 4g+3g combination (collected in the project's plugin-release
notes §6).

MPS: the device plugin's MPS control daemon (v0.15.0+) pins every client to total memory / replicas with the control
command ``set_default_device_pinned_mem_limit`` and fails to start when a command fails
(k8s-device-plugin@v0.20.0:cmd/mps-control-daemon/mps/daemon.go:119-124, the same since v0.15.0). Per-client memory
limits arrived with CUDA 11.5 ("MPS Enhancements (Client memory limits)", NVIDIA developer blog "Revealing New
Features in the CUDA 11.5 Toolkit"), which shipped with the R495 driver branch (CUDA 11.5 GA needs Linux driver
>= 495.29.05, CUDA toolkit release notes); older drivers' control daemons do not have the command.

Time-slicing needs nothing beyond what the device plugin itself needs: neither the plugin (any release up to
v0.20.0) nor the GPU Operator sets a time-slice interval (``nvidia-smi compute-policy --set-timeslice``), so no
driver feature is involved (docs/sharing-modes.md, "Time-slice interval").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Driver = tuple[int, ...]


def parse_driver(text: str) -> Driver:
    """``550.54.15`` -> (550, 54, 15); a branch such as ``535`` -> (535,). ValueError for anything else."""
    parts = text.strip().split(".")
    if not all(part.isdigit() for part in parts):
        raise ValueError(f"{text!r} is not a driver version such as 550.54.15")
    return tuple(int(part) for part in parts)


@dataclass(frozen=True)
class Gate:
    needs: str
    """The oldest driver that has it: a full version, or a branch (R525 as ``525``)."""
    what: str
    otherwise: str = "choose other profiles"
    """What to do instead of upgrading the driver."""

    @property
    def release(self) -> str:
        """How people name it: R525 for a branch, the full version otherwise."""
        return self.needs if "." in self.needs else f"R{self.needs}"

    def satisfied_by(self, driver: Driver) -> bool | None:
        """True or False, or None when a bare branch cannot tell (535 against 535.161.07)."""
        needed = parse_driver(self.needs)
        if driver[: len(needed)] == needed[: len(driver)] and len(driver) < len(needed):
            return None
        return driver >= needed


#: The MPS control daemon's per-client memory limit (module docstring).
MPS_MEMORY_LIMIT = Gate("495", "the MPS control daemon's per-client memory limit (set_default_device_pinned_mem_limit)",
                        "share the GPUs with time-slicing instead (no memory limit)")

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


def class_gates(product: str, layouts: Iterable[dict[str, int]], *, mps_memory_limit: bool) -> tuple[Gate, ...]:
    """Everything a class's nodes need from the driver: its MIG layouts' gates (none without layouts: MIG off needs
    nothing), and the MPS memory limit where the class runs the device plugin's MPS control daemon."""
    layouts = list(layouts)
    return (*(mig_gates(product, layouts) if layouts else ()), *((MPS_MEMORY_LIMIT,) if mps_memory_limit else ()))
