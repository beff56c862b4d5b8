"""The harnesses are strict: a compiled config with one mutation is refused, with the consumer's own message
where the consumer refuses it, and by the strict decode where the consumer would silently ignore it."""

from __future__ import annotations

from pathlib import Path

import harnesses
import pytest
import trees
from harnesses import Consumers

pytestmark = pytest.mark.consumers

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "clusters"
[T4] = [c for c in trees.plugin_configs(EXAMPLES / "tke-l20-t4" / "out") if c.class_name == "t4"]
[A100_MPS] = [c for c in trees.plugin_configs(EXAMPLES / "mixed-fleet" / "out") if c.class_name == "a100-mps"]
MIG = trees.mig_config(EXAMPLES / "mixed-fleet" / "out")
PLUGINS = [h.version for h in harnesses.DEVICE_PLUGIN]
PARTED = [h.version for h in harnesses.MIG_PARTED]

# The prefix every release's NewConfig puts before a parse error (api/config/v1/config.go, parseConfig and
# parseConfigFrom), behind the harness's "unable to finalize config" (loadConfig in cmd/nvidia-device-plugin).
PARSE = "unable to finalize config: unable to parse config file: error parsing config file: "


def mutated(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} must occur once in:\n{text}"
    return text.replace(old, new)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("release", PLUGINS)
def test_the_unmutated_t4_config_loads_at_every_release(consumers: Consumers, release: str, tmp_path: Path) -> None:
    result = consumers.device_plugin(release, write(tmp_path, T4.text), T4.env)
    assert result.returncode == 0, result.describe()
    assert result.document["summary"]["resources"] == [
        {"name": "nvidia.com/gpu", "advertised": "nvidia.com/gpu", "replicas": 3}]


# (old, new, exit status, message): 1 is the plugin's own refusal, 2 the strict decode's.
PLUGIN_MUTATIONS = {
    "replicas 1": ("replicas: 3", "replicas: 1", 1,
                   PARSE + "unmarshal error: error unmarshaling JSON: while decoding JSON: number of replicas must be "
                           ">= 2"),
    "wrong version": ("version: v1", "version: v2", 1, PARSE + "unknown version: v2"),
    "replicas as a string": ("replicas: 3", "replicas: '3'", 1, "cannot unmarshal string into Go"),
    "resource name with a capital": ("- name: nvidia.com/gpu", "- Name: nvidia.com/gpu", 1,
                                     "no resource name specified"),
    "resource outside nvidia.com": ("- name: nvidia.com/gpu", "- name: example.com/gpu", 1,
                                    "incorrect format for resource name"),
    "misspelt top-level key": ("sharing:", "sharin:", 2, 'json: unknown field "sharin"'),
    "misspelt flag": ("passDeviceSpecs:", "passDeviceSpec:", 2, 'json: unknown field "passDeviceSpec"'),
    "misspelt key inside timeSlicing": ("renameByDefault:", "renameByDefualt:", 2,
                                        "ignores: [sharing.timeSlicing.renameByDefualt]"),
    "misspelt key inside a resource": ("replicas: 3", "replicas: 3\n      replica: 3", 2,
                                       "ignores: [sharing.timeSlicing.resources[0].replica]"),
}


@pytest.mark.parametrize("release", PLUGINS)
@pytest.mark.parametrize("mutation", sorted(PLUGIN_MUTATIONS))
def test_a_mutated_plugin_config_is_refused_with_the_plugins_message_or_the_strict_decodes(
        consumers: Consumers, mutation: str, release: str, tmp_path: Path) -> None:
    old, new, status, message = PLUGIN_MUTATIONS[mutation]
    result = consumers.device_plugin(release, write(tmp_path, mutated(T4.text, old, new)), T4.env)
    assert result.returncode == status, result.describe()
    assert message in result.stderr, result.describe()
    if status == 2:  # the plugin itself loads it (and says what it makes of it): only the strict decode refuses
        assert result.document is not None and "summary" in result.document, result.describe()


def test_the_strict_decode_refuses_a_duplicate_key_the_plugin_keeps_the_last_of(
        consumers: Consumers, tmp_path: Path) -> None:
    text = mutated(T4.text, "version: v1", "version: v1\nversion: v1")
    result = consumers.device_plugin("v0.19.3", write(tmp_path, text), T4.env)
    assert result.returncode == 2 and 'key "version" already set in map' in result.stderr, result.describe()


@pytest.mark.parametrize("release", PLUGINS)
def test_an_mps_config_is_mps_from_v0_15_and_silently_nothing_before(
        consumers: Consumers, release: str, tmp_path: Path) -> None:
    # sharing.mps arrived in v0.15.0 (api/config/v1/sharing.go); older releases ignore the key, share nothing.
    result = consumers.device_plugin(release, write(tmp_path, A100_MPS.text), A100_MPS.env)
    if harnesses.for_release("device-plugin", release).version in ("v0.12.3", "v0.13.0", "v0.14.5"):
        assert result.returncode == 2, result.describe()
        assert "ignores: [flags.mpsRoot sharing.mps]" in result.stderr, result.describe()
        assert result.document["summary"]["sharingStrategy"] == "none"
    else:
        assert result.returncode == 0, result.describe()
        assert result.document["summary"]["sharingStrategy"] == "mps"
        assert result.document["summary"]["failRequestsGreaterThanOne"] is True


@pytest.mark.parametrize("release", ["v0.15.0", "v0.17.4", "v0.18.2", "v0.19.3"])
def test_mps_without_an_mps_root_or_with_mixed_mig_is_refused_by_the_plugin(
        consumers: Consumers, release: str, tmp_path: Path) -> None:
    # validateFlags (cmd/nvidia-device-plugin/main.go, v0.15.0 on); the compiled DaemonSet sets MPS_ROOT.
    text = mutated(A100_MPS.text, "  mpsRoot: /run/nvidia/mps\n", "")
    rootless = consumers.device_plugin(release, write(tmp_path, text), {})
    assert rootless.returncode == 1, rootless.describe()
    assert "using MPS requires --mps-root to be specified" in rootless.stderr
    mixed = consumers.device_plugin(release, write(tmp_path, A100_MPS.text), {**A100_MPS.env, "MIG_STRATEGY": "mixed"})
    assert mixed.returncode == 1 and "using --mig-strategy=mixed is not supported with MPS" in mixed.stderr


# (old, new, exit status, message) on the mixed-fleet mig-parted config.
PARTED_MUTATIONS = {
    "misspelt mig-devices": ("    mig-devices:\n      1g.10gb: 7", "    mig-device:\n      1g.10gb: 7", 1,
                             "unexpected field: mig-device"),
    "wrong version": ("version: v1", "version: v2", 1, "unknown version: v2"),
    "unknown top-level key": ("version: v1", "version: v1\nmig-config: {}", 1, "unexpected field: mig-config"),
    "profile in capitals": ("1g.10gb: 7", "1G.10GB: 7", 1, "error validating values in 'mig-devices' field"),
    "negative count": ("1g.10gb: 7", "1g.10gb: -1", 1, "invalid count for '-1'"),
    "mig-enabled as a string": ("  - devices: all\n    mig-enabled: false",
                                "  - devices: all\n    mig-enabled: 'no'", 1, "cannot unmarshal string into Go"),
    "duplicate profile key": ("1g.10gb: 7", "1g.10gb: 7\n      1g.10gb: 6", 2, 'key "1g.10gb" already set in map'),
}


@pytest.mark.parametrize("release", PARTED)
@pytest.mark.parametrize("mutation", sorted(PARTED_MUTATIONS))
def test_a_mutated_mig_config_is_refused_with_mig_parteds_message_or_the_strict_decodes(
        consumers: Consumers, mutation: str, release: str, tmp_path: Path) -> None:
    assert MIG is not None
    old, new, status, message = PARTED_MUTATIONS[mutation]
    result = consumers.mig_parted(release, write(tmp_path, mutated(MIG.text, old, new)))
    assert result.returncode == status, result.describe()
    assert message in result.stderr, result.describe()


@pytest.mark.parametrize("release", PARTED)
def test_selecting_a_config_the_file_lacks_is_mig_parteds_error(
        consumers: Consumers, release: str, tmp_path: Path) -> None:
    assert MIG is not None
    result = consumers.mig_parted(release, write(tmp_path, MIG.text), "h100-mig-typo")
    assert result.returncode == 1 and "selected mig-config not present: h100-mig-typo" in result.stderr
