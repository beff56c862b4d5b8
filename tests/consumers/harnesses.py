"""The consumers' own Go code as test tools: one small Go module per consumer release, built once into a cache.

Each directory `tests/consumers/<consumer>/<version>/` is its own Go module (go.mod, go.sum, main.go) that
imports the consumer's config package at that release from the Go module proxy and loads one file with it. Go
resolves one version per module in a build, so every release gets its own module, which keeps only what is its
own: its go.mod's pins and a main.go naming the steps of its release. What several releases share (the load flow,
output and exit status, the strict decode, each release family's flags and checks) lives in the local module
`glue/` (a `replace` in every go.mod). It requires nothing, so it never moves a version in a harness's build list:
its imports of the consumers' packages resolve to the release the harness pins.

Binaries live in `${GPUPOLICY_CACHE:-~/.cache/gpupolicy}/consumers/<name>-<version>-<key>/harness`, the key
being a digest of the module's sources, the shared module and `go version`; GOMODCACHE and GOCACHE live in the
same cache, so a warm run builds nothing and a changed main.go rebuilds only its own harness.

Run as a script to build every harness and print the time each took:
    .venv/bin/python tests/consumers/harnesses.py [--fresh]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

HERE = Path(__file__).resolve().parent
SHARED = HERE / "glue"
Consumer = Literal["device-plugin", "mig-parted"]


@dataclass(frozen=True)
class Harness:
    """One consumer release's config loader, and the releases whose loading code is byte-identical to it."""

    consumer: Consumer
    version: str
    """The release whose code the module builds (its go.mod says how, where a refused release is stood in for)."""
    covers: tuple[str, ...]
    """Releases it stands for: itself, plus those whose config code `git diff` shows identical (see `why`)."""
    why: str
    cgo: bool = False

    @property
    def name(self) -> str:
        return f"{self.consumer}-{self.version}"

    @property
    def directory(self) -> Path:
        return HERE / self.consumer / self.version


_DP_CODE = "api/config/v1 and cmd/nvidia-device-plugin/main.go (tests excluded)"

#: Device plugin (NVIDIA/k8s-device-plugin): one harness per release family of policy/hardware/releases.py.
#: Which releases the Go module proxy serves decides the representative: it refuses (HTTP 403 "This module
#: version is not available") v0.14.0, v0.14.2-v0.14.4, v0.15.1, v0.16.0-v0.16.2, v0.17.0, v0.17.1, v0.19.2
#: and v0.20.0, and its checksum database has no v0.17.2 or v0.17.3.
DEVICE_PLUGIN: tuple[Harness, ...] = (
    Harness("device-plugin", "v0.12.3", ("v0.12.2", "v0.12.3"),
            f"git diff v0.12.2 v0.12.3 -- {_DP_CODE} is empty (v0.12.0/v0.12.1 refuse a file without version)"),
    Harness("device-plugin", "v0.13.0", ("v0.13.0",), "the only v0.13 release"),
    Harness("device-plugin", "v0.14.5", ("v0.14.4", "v0.14.5"),
            f"git diff v0.14.4 v0.14.5 -- {_DP_CODE} is empty (v0.14.0 parses deviceListStrategy as a list only; "
            "v0.14.1-v0.14.3 differ in one constant)"),
    Harness("device-plugin", "v0.15.0", ("v0.15.0", "v0.15.1"), f"git diff v0.15.0 v0.15.1 -- {_DP_CODE} is empty"),
    Harness("device-plugin", "v0.17.4", ("v0.17.0", "v0.17.1", "v0.17.2", "v0.17.3", "v0.17.4"),
            f"git diff v0.17.0 v0.17.4 -- {_DP_CODE} is empty (v0.16.x lack the imex section and differ in "
            "validateFlags)"),
    Harness("device-plugin", "v0.18.2", ("v0.18.2",),
            "v0.18.0/v0.18.1 differ in cmd/nvidia-device-plugin/main.go"),
    Harness("device-plugin", "v0.19.3", ("v0.19.3",),
            "the newest release the proxy serves; v0.20.0 (refused) honours an explicit MPS "
            "failRequestsGreaterThanOne: false, which v0.19.3 forces to true"),
)

#: mig-parted (NVIDIA/mig-parted), at the k8s-mig-manager releases the compiled trees deploy. The proxy refuses
#: v0.12.1 (and every v0.11-v0.14 tag but v0.13.1); the v0.12.1 module builds v0.10.0 instead (see its go.mod).
#: k8s-mig-manager is built from the same repository and tag, and parses through the same assert package.
MIG_PARTED: tuple[Harness, ...] = (
    Harness("mig-parted", "v0.12.1", ("v0.12.0", "v0.12.1"),
            "git diff v0.10.0 v0.12.1 -- api/spec/v1 pkg/types cmd/nvidia-mig-parted/assert "
            "cmd/nvidia-mig-parted/util is empty; built with the go-nvlib v0.7.1 and go-nvml v0.12.4-1 that "
            "v0.12.0 and v0.12.1 pin", cgo=True),
    Harness("mig-parted", "v0.13.1", ("v0.13.0", "v0.13.1", "v0.14.0", "v0.14.1", "v0.14.2"),
            "git diff v0.13.0 v0.14.2 on the same paths is empty and all pin go-nvlib v0.8.1 and go-nvml "
            "v0.13.0-1", cgo=True),
)

#: No harness for NVIDIA's DRA driver (github.com/NVIDIA/k8s-dra-driver-gpu v25.3.0-v25.12.0, sigs.k8s.io/
#: dra-driver-nvidia-gpu v0.4.0) nor HAMi (github.com/Project-HAMi/HAMi, pinned commits): the Go module proxy
#: answers 403 "This module version is not available" for every release tried (docs/testing.md lists them).
HARNESSES: tuple[Harness, ...] = DEVICE_PLUGIN + MIG_PARTED


def for_release(consumer: Consumer, tag: str) -> Harness:
    """The harness that loads files as `tag` of `consumer` does; LookupError naming the covered ones if none."""
    for harness in HARNESSES:
        if harness.consumer == consumer and tag in harness.covers:
            return harness
    covered = ", ".join(t for h in HARNESSES if h.consumer == consumer for t in h.covers)
    raise LookupError(f"no {consumer} harness covers {tag} (covered: {covered}); add a module to tests/consumers/"
                      f"{consumer}/ if the Go module proxy serves it")


class BuildError(RuntimeError):
    """A harness did not build: Go is missing, the proxy refused a module, or the code does not compile."""


@dataclass(frozen=True)
class Built:
    harness: Harness
    path: Path
    seconds: float
    cached: bool


@dataclass(frozen=True)
class Result:
    """One run of a harness: its exit status, its streams and, when it printed one, its JSON document."""

    returncode: int
    stdout: str
    stderr: str
    document: Any = field(default=None)

    def describe(self) -> str:
        return f"exit {self.returncode}\nstdout: {self.stdout.strip()}\nstderr: {self.stderr.strip()}"


def cache_root() -> Path:
    """Where binaries, the module cache and the build cache live ($GPUPOLICY_CACHE, else ~/.cache/gpupolicy)."""
    base = os.environ.get("GPUPOLICY_CACHE") or str(Path.home() / ".cache" / "gpupolicy")
    return Path(base) / "consumers"


def go_binary() -> str:
    """The go command, or BuildError saying how to get one (the harnesses are part of the suite: no skip)."""
    found = shutil.which("go")
    if found is None:
        raise BuildError("the consumer harnesses need the Go toolchain (go 1.26 or newer on PATH) and the Go module "
                         "proxy; install Go, or run the other tests with -m 'not consumers'")
    return found


def _go_version(go: str) -> str:
    return subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.strip()


def _sources(directory: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(directory.rglob("*")):
        if path.is_file() and (path.suffix == ".go" or path.name in ("go.mod", "go.sum")):
            yield str(path.relative_to(HERE)), path.read_bytes()


def key(harness: Harness, go_version: str) -> str:
    """A digest of everything a harness binary is made of: its module, the shared module and the toolchain."""
    digest = hashlib.sha256(go_version.encode())
    for name, data in (*_sources(harness.directory), *_sources(SHARED)):
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:12]


def go_environment(harness: Harness) -> dict[str, str]:
    """The build's environment: caches under cache_root(), this toolchain only, the committed go.sum only."""
    root = cache_root()
    env = dict(os.environ)
    env.update({
        "GOMODCACHE": str(root / "gomod"),
        "GOCACHE": str(root / "gobuild"),
        "GOFLAGS": "-mod=readonly -buildvcs=false -trimpath",
        "GOTOOLCHAIN": "local",
        "GOWORK": "off",
        # go-nvml (mig-parted) is cgo; nothing else needs a C compiler.
        "CGO_ENABLED": "1" if harness.cgo else "0",
    })
    env.setdefault("GOPROXY", "https://proxy.golang.org")
    return env


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two sessions (or xdist workers) build each harness once
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(harness: Harness) -> Built:
    """The harness binary, built now unless the cache has it; BuildError with Go's own output on failure."""
    go = go_binary()
    target = cache_root() / f"{harness.name}-{key(harness, _go_version(go))}" / "harness"
    if target.is_file():
        return Built(harness, target, 0.0, cached=True)
    with _locked(cache_root() / "build.lock"):
        if target.is_file():
            return Built(harness, target, 0.0, cached=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            built = Path(scratch) / "harness"
            done = subprocess.run([go, "build", "-o", str(built), "."], cwd=harness.directory,
                                  env=go_environment(harness), capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise BuildError(f"go build of {harness.name} ({harness.directory}) failed with exit "
                                 f"{done.returncode}:\n{done.stderr.strip()}")
            os.replace(built, target)  # atomic: a half-written binary is never found in the cache
        return Built(harness, target, time.monotonic() - started, cached=False)


def run(binary: Path, args: Sequence[str], env: Mapping[str, str] | None = None, *, timeout: float = 60) -> Result:
    """Run a built harness with exactly `env` (plus PATH), as a container runs with exactly its env."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    done = subprocess.run([str(binary), *args], env=environment, capture_output=True, text=True, check=False,
                          timeout=timeout)
    document = None
    if done.stdout.strip():
        with contextlib.suppress(json.JSONDecodeError):
            document = json.loads(done.stdout)
    return Result(done.returncode, done.stdout, done.stderr, document)

class Consumers:
    """The harnesses of one test session, each built (or found in the cache) on first use; a build that fails
    fails the test asking for it, with Go's own output."""

    def __init__(self) -> None:
        self._built: dict[str, Path] = {}
        self.builds: list[Built] = []

    def binary(self, harness: Harness) -> Path:
        if harness.name not in self._built:
            try:
                built = build(harness)
            except BuildError as error:
                import pytest  # only the test session gets here; the script builds without pytest

                pytest.fail(str(error), pytrace=False)
            self.builds.append(built)
            self._built[harness.name] = built.path
        return self._built[harness.name]

    def load(self, harness: Harness, args: Sequence[str],
             env: Mapping[str, str] | None = None) -> Result:
        """Run `harness` on args (its config file and flags) with exactly `env`."""
        return run(self.binary(harness), args, env)

    def device_plugin(self, tag: str, config: Path, env: Mapping[str, str] | None = None) -> Result:
        """Load `config` as device-plugin release `tag` does, in a container with env `env`."""
        return self.load(for_release("device-plugin", tag), [f"--config-file={config}"], env)

    def mig_parted(self, tag: str, config: Path, *selected: str) -> Result:
        """Parse `config` as mig-parted release `tag` does, selecting each of `selected` as a node label would."""
        args = ["-f", str(config)]
        for name in selected:
            args += ["-c", name]
        return self.load(for_release("mig-parted", tag), args)



def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="build every consumer harness and print the time each took")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the cache first (binaries, modules and build cache): a cold build")
    args = parser.parse_args(argv)
    if args.fresh and cache_root().exists():
        subprocess.run(["chmod", "-R", "u+w", str(cache_root())], check=True)  # the module cache is read-only
        shutil.rmtree(cache_root())
    total = time.monotonic()
    for harness in HARNESSES:
        built = build(harness)
        state = "cached" if built.cached else f"built in {built.seconds:.1f} s"
        print(f"{harness.name:26} {state:18} {built.path}")
    print(f"all {len(HARNESSES)} harnesses ready in {time.monotonic() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
