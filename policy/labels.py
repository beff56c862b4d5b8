"""Node labels NVIDIA's components read or write, and which of them gpupolicy's output needs on a class's nodes."""

from __future__ import annotations

#: The GPU Operator's config-manager picks a node's device-plugin config by this label (device-plugin.md §4, §7).
DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
#: mig-manager applies the mig-parted config this label names (mig.md §5).
MIG_CONFIG = "nvidia.com/mig.config"
#: mig-manager reports its progress here: pending, rebooting, success or failed (mig.md §5).
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
#: The MPS control daemon runs only where this is "true" (Helm chart nodeSelector, device-plugin.md §5.2).
MPS_CAPABLE = "nvidia.com/mps.capable"
#: The mig-parted config that turns MIG off; the GPU Operator labels unlabelled MIG-capable nodes with it.
MIG_ALL_DISABLED = "all-disabled"

#: Label prefixes GPU Feature Discovery owns: where it does not run, no node carries them.
GFD_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig-", "nvidia.com/mig.capable", "nvidia.com/mig.strategy",
                "nvidia.com/mps.", "nvidia.com/cuda.")
#: Labels GFD rewrites when sharing is configured: a class selected by them selects different nodes before
#: and after its own config rolls out (k8s-device-plugin internal/lm, the -SHARED rule).
GFD_MUTABLE = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    MPS_CAPABLE,
)
#: The MIG manager pauses a GPU client by setting its gpu.deploy label to this, and sets it back to "true" after
#: (mig-parted pkg/mig/reconfigure; mig.md §5). A client must leave the node while it holds this value.
GPU_DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_FOR_MIG_CHANGE = "paused-for-mig-change"
#: The GPU Operator runs its device plugin on a node unless this is "false" (its per-node deploy labels).
DEVICE_PLUGIN_DEPLOY = f"{GPU_DEPLOY_PREFIX}device-plugin"
#: nvidia.com/mig.config.state once the MIG manager applied (or found applied) the selected config.
MIG_STATE_SUCCESS = "success"
#: Driver version labels of GFD: the plugin-repo GFD (v0.15+) writes the full string, every GFD the parts.
DRIVER_VERSION_FULL = "nvidia.com/cuda.driver-version.full"
DRIVER_VERSION_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
