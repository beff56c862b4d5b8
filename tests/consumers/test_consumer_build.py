"""Building the harnesses: a missing Go toolchain or module proxy is a loud failure naming what is missing, the
cache is keyed by the sources, and every harness module pins the release it claims."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import harnesses
import pytest

pytestmark = pytest.mark.consumers


def test_without_go_on_path_the_build_fails_saying_what_to_install(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a real PATH with no go on it
    with pytest.raises(harnesses.BuildError, match=r"need the Go toolchain \(go 1.26 or newer on PATH\)"):
        harnesses.build(harnesses.for_release("device-plugin", "v0.13.0"))


def test_without_the_module_proxy_the_build_fails_with_gos_own_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # An empty cache and no proxy: what a machine without network access sees on its first run.
    monkeypatch.setenv("GPUPOLICY_CACHE", str(tmp_path))
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(harnesses.BuildError) as failure:
        harnesses.build(harnesses.for_release("device-plugin", "v0.13.0"))
    assert "go build of device-plugin-v0.13.0" in str(failure.value)
    assert "module lookup disabled by GOPROXY=off" in str(failure.value)
    assert not list(tmp_path.glob("consumers/device-plugin-v0.13.0-*/harness"))  # nothing half-built is cached


def test_the_cache_key_follows_the_sources_and_the_toolchain() -> None:
    harness = harnesses.for_release("device-plugin", "v0.19.3")
    assert harnesses.key(harness, "go version go1.26.8") == harnesses.key(harness, "go version go1.26.8")
    assert harnesses.key(harness, "go version go1.26.8") != harnesses.key(harness, "go version go1.27.0")
    other = harnesses.for_release("device-plugin", "v0.18.2")
    assert harnesses.key(harness, "go version go1.26.8") != harnesses.key(other, "go version go1.26.8")


MODULE = {"device-plugin": "github.com/NVIDIA/k8s-device-plugin", "mig-parted": "github.com/NVIDIA/mig-parted"}


def _required(harness: harnesses.Harness) -> str:
    go_mod = (harness.directory / "go.mod").read_text(encoding="utf-8")
    [required] = re.findall(rf"^\s*{re.escape(MODULE[harness.consumer])} (v\S+)", go_mod, re.MULTILINE)
    return required


@pytest.mark.parametrize("harness", harnesses.HARNESSES, ids=[h.name for h in harnesses.HARNESSES])
def test_every_harness_module_requires_its_release_and_has_a_go_sum(harness: harnesses.Harness) -> None:
    go_mod = (harness.directory / "go.mod").read_text(encoding="utf-8")
    assert (harness.directory / "go.sum").is_file() and (harness.directory / "main.go").is_file()
    required = _required(harness)
    # The module is the release itself, or a release with identical code that the comment names and explains.
    assert required == harness.version or (required in go_mod.split("\nmodule ")[0] and "identical" in go_mod)
    assert harness.version in harness.covers


@pytest.mark.parametrize("harness", harnesses.HARNESSES, ids=[h.name for h in harnesses.HARNESSES])
def test_every_binary_links_the_release_its_module_pins_and_the_local_glue(
        consumers: harnesses.Consumers, harness: harnesses.Harness) -> None:
    # The shared glue module requires nothing, so the build list stays the release module's own: the binary's
    # recorded dependencies (`go version -m`) name the pinned consumer release and the glue replaced locally.
    listed = subprocess.run([harnesses.go_binary(), "version", "-m", str(consumers.binary(harness))],
                            capture_output=True, text=True, check=True).stdout
    deps = dict(re.findall(r"^\s+dep\s+(\S+)\s+(\S+)", listed, re.MULTILINE))
    assert deps[MODULE[harness.consumer]] == _required(harness)
    assert re.search(r"^\s+dep\s+gpupolicy.dev/consumers/glue\s+v0.0.0\s*$", listed, re.MULTILINE)
    assert re.search(r"^\s+=>\s+../../glue\s", listed, re.MULTILINE)


def test_for_release_names_the_covered_releases_when_none_covers_a_tag() -> None:
    with pytest.raises(LookupError, match=r"no device-plugin harness covers v0.20.0 \(covered: v0.12.2, v0.12.3, "):
        harnesses.for_release("device-plugin", "v0.20.0")
