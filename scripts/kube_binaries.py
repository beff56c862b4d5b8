#!/usr/bin/env python3
"""Build (or reuse) the kube-apiserver and etcd binaries the real-API-server tests start.

    python scripts/kube_binaries.py [--release v1.34] [--quiet]

prints the directory holding `kube-apiserver` and `etcd`: ${GPUPOLICY_CACHE:-~/.cache/gpupolicy}/kube/<version>/bin.

Kubernetes publishes no library build of its API server, so the Go module under scripts/kube/<release>/ (ours:
a go.mod, its go.sum and a tools.go naming the two programs, no upstream code) requires k8s.io/kubernetes at a
patch release and replaces each of its staging modules (required at v0.0.0 through ./staging replaces, which a
dependent module ignores) by the matching published v0.<minor>.<patch> tag; etcd is the release that
Kubernetes' own go.mod requires.  `go build` then compiles both from the Go module proxy, verified against the
committed go.sum.  The module cache and build cache live beside the binaries, keyed by version, so a rerun is
warm and two releases never share a half-written cache.

A stamp (the versions and the go.sum digest) is written after both binaries answer `--version`; a cache
whose stamp differs is rebuilt.  A failed build exits non-zero with the tail of its log: the tests that need
the server then fail, never skip.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "scripts" / "kube"
#: The release the tests run against unless told otherwise: the oldest with everything the examples use
#: (resource.k8s.io/v1 is GA from 1.34).
DEFAULT_RELEASE = "v1.34"


@dataclass(frozen=True)
class Build:
    """One pinned pair of programs, read from scripts/kube/<release>/go.mod."""

    module: Path
    kubernetes: str  # v1.34.12
    etcd: str  # v3.6.4

    @property
    def directory(self) -> Path:
        return cache_root() / "kube" / self.kubernetes

    @property
    def bin(self) -> Path:
        return self.directory / "bin"

    @property
    def stamp(self) -> str:
        # what the binaries are built from; not the Go version: a static binary stays good when Go is upgraded
        # (or absent, on a machine that only runs the tests from a cache it was handed)
        go_sum = hashlib.sha256((self.module / "go.sum").read_bytes()).hexdigest()
        return f"kubernetes {self.kubernetes}\netcd {self.etcd}\ngo.sum {go_sum}\n"


def cache_root() -> Path:
    configured = os.environ.get("GPUPOLICY_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gpupolicy"


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("`go` is not on PATH: the real-API-server tests build kube-apiserver and etcd with Go "
                         "(1.25 or later, as k8s.io/kubernetes v1.34 requires)")
    return subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.strip()


class BuildError(RuntimeError):
    pass


def pinned(release: str) -> Build:
    module = MODULES / release
    go_mod = module / "go.mod"
    if not go_mod.is_file():
        known = sorted(p.name for p in MODULES.iterdir() if (p / "go.mod").is_file())
        raise BuildError(f"no Go module for {release} under {MODULES} (have: {', '.join(known)})")
    text = go_mod.read_text()

    def required(path: str) -> str:
        # the direct requirement, not a replace line (`=> path vX`) nor an indirect one
        match = re.search(rf"^\s+{re.escape(path)} (v\S+)$", text, re.MULTILINE)
        if match is None:
            raise BuildError(f"{go_mod} does not require {path}")
        return match.group(1)

    return Build(module, required("k8s.io/kubernetes"), required("go.etcd.io/etcd/server/v3"))


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One builder per cache directory: a second pytest run (or CI step) waits, then finds the binaries."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ready(build: Build) -> bool:
    stamp = build.directory / "stamp"
    return (stamp.is_file() and stamp.read_text() == build.stamp
            and all(os.access(build.bin / name, os.X_OK) for name in ("kube-apiserver", "etcd")))


def version_flags(version: str) -> str:
    # What the release scripts (hack/lib/version.sh) stamp into component-base, so /version and kubectl's skew
    # check see the real release; the commit and build date stay at their defaults, keeping the build reproducible.
    major, minor = version.removeprefix("v").split(".")[:2]
    package = "k8s.io/component-base/version"
    return (f"-X {package}.gitVersion={version} -X {package}.gitMajor={major} -X {package}.gitMinor={minor} "
            f"-X {package}.gitTreeState=clean")


def go_build(build: Build, package: str, output: Path, ldflags: str, log: Path) -> float:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    environment.update({
        "GOMODCACHE": str(build.directory / "gomod"),
        "GOCACHE": str(build.directory / "gocache"),
        # -mod=readonly: build exactly the committed go.sum, never edit it; -modcacherw: the cache can be removed
        "GOFLAGS": "-mod=readonly -modcacherw -trimpath",
        "GOTOOLCHAIN": "local",  # no toolchain download: the machine's Go or a clear failure
        "CGO_ENABLED": "0",  # static binaries: no C toolchain needed, none linked
    })
    if "GOPROXY" in os.environ:
        environment["GOPROXY"] = os.environ["GOPROXY"]
    started = time.monotonic()
    with log.open("a") as sink:
        sink.write(f"$ go build -o {output.name} {package}\n")
        sink.flush()
        result = subprocess.run(["go", "build", "-ldflags", f"-s -w {ldflags}", "-o", str(output), package],
                                cwd=build.module, env=environment, stdout=sink, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise BuildError(f"go build {package} failed ({result.returncode}); the end of {log}:\n{tail}")
    return time.monotonic() - started


def check_version(binary: Path, expected: str) -> None:
    answer = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    if answer.returncode != 0 or expected not in answer.stdout:
        raise BuildError(f"{binary} --version answered {answer.stdout.strip() or answer.stderr.strip()!r}, "
                         f"expected {expected}")


def ensure(release: str = DEFAULT_RELEASE, *, quiet: bool = False) -> Path:
    """The bin directory holding kube-apiserver and etcd of the release, built first if it is not cached."""
    build = pinned(release)
    if ready(build):
        return build.bin
    with locked(build.directory):
        if ready(build):  # built by whoever held the lock before us
            return build.bin
        build.bin.mkdir(parents=True, exist_ok=True)
        log = build.directory / "build.log"
        log.write_text(f"{go_version()}\n")
        if not quiet:
            print(f"building kube-apiserver {build.kubernetes} and etcd {build.etcd} into {build.bin} "
                  f"(log: {log}; cold, this takes a while)", file=sys.stderr, flush=True)
        timings = []
        for name, package, ldflags, expected in (
            ("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", version_flags(build.kubernetes),
             f"Kubernetes {build.kubernetes}"),
            # the root package of go.etcd.io/etcd/server/v3 is etcd's main (server/main.go)
            ("etcd", "go.etcd.io/etcd/server/v3", "", f"etcd Version: {build.etcd.removeprefix('v')}"),
        ):
            partial = build.bin / f".{name}.partial"
            timings.append(f"{name} {go_build(build, package, partial, ldflags, log):.0f}s")
            check_version(partial, expected)
            partial.replace(build.bin / name)
        (build.directory / "stamp").write_text(build.stamp)
        if not quiet:
            print(f"built {', '.join(timings)}", file=sys.stderr, flush=True)
    return build.bin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", default=os.environ.get("GPUPOLICY_KUBE_RELEASE", DEFAULT_RELEASE),
                        help=f"a directory under scripts/kube/ (default {DEFAULT_RELEASE})")
    parser.add_argument("--quiet", action="store_true", help="print nothing but the directory, errors aside")
    args = parser.parse_args(argv)
    try:
        print(ensure(args.release, quiet=args.quiet))
    except (BuildError, subprocess.SubprocessError, OSError) as error:
        print(f"kube_binaries: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
