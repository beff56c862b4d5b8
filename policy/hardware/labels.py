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
#: ... once it gave up on the config; it then restores the paused clients too (reconfigure-mig.sh on failure).
MIG_STATE_FAILED = "failed"
#: Driver version labels of GFD: the plugin-repo GFD (v0.15+) writes the full string, every GFD the parts.
DRIVER_VERSION_FULL = "nvidia.com/cuda.driver-version.full"
DRIVER_VERSION_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")

#: The field manager the API server records for the GPU Operator's node-label writes: controller-runtime's client
#: sends the binary's name as its user agent (NVIDIA/gpu-operator@v25.3.0:docker/Dockerfile:78 installs it as
#: /usr/bin/gpu-operator), and the API server names an Update's or Patch's manager after the user agent's first
#: part.
OPERATOR_FIELD_MANAGER = "gpu-operator"
#: Labels the GPU Operator writes only as defaults, on a GPU node that lacks them, and never changes once set:
#: nvidia.com/mig.config=all-disabled on a MIG-capable node when migManager.config.default is all-disabled
#: (NVIDIA/gpu-operator@v25.3.0:controllers/state_manager.go:536-545; @v26.7.0:controllers/nodelabeling_controller.go
#: :311-314), and the nvidia.com/gpu.deploy.<operand>=true state labels ("If a required state label already exists
#: on the node, honor the current value", @v25.3.0:controllers/state_manager.go:375-386). A node that just joined
#: may carry them before gpupolicy's reconciler sees it: they are defaults to override, not another owner's choice.
OPERATOR_DEFAULTS = {MIG_CONFIG: MIG_ALL_DISABLED, DEVICE_PLUGIN_DEPLOY: "true"}
