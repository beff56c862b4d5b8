"""Vendor the GPU Operator's ClusterPolicy CRD schemas into schemas/gpu-operator/ (a maintainer's script).

Usage: python scripts/vendor_operator_crds.py GIT_DIR
  GIT_DIR: a clone of https://github.com/NVIDIA/gpu-operator with its release tags.

For every release in policy/operator.py's table it reads the chart's CRD at that tag
(deployments/gpu-operator/crds/nvidia.com_clusterpolicies[_crd].yaml), keeps the openAPIV3Schema of the served
version without its descriptions (what validation needs, a twentieth of the size), and writes one JSON Schema per
distinct schema, named after the oldest release that has it. index.json maps each release to its file, with the
commit and path it came from, so every file can be traced to its source.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from policy.operator import RELEASES  # noqa: E402

OUT = ROOT / "schemas" / "gpu-operator"
PATHS = ("deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml",
         "deployments/gpu-operator/crds/nvidia.com_clusterpolicies_crd.yaml")
SOURCE = "https://github.com/NVIDIA/gpu-operator"


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "-C", git_dir, *args], capture_output=True, text=True, check=True).stdout


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def main(git_dir: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {}
    written: dict[str, str] = {}
    for release in RELEASES:
        tag = release.version
        names = _git(git_dir, "ls-tree", "--name-only", tag, "deployments/gpu-operator/crds/").split()
        path = next(p for p in PATHS if p in names)
        crd = yaml.safe_load(_git(git_dir, "show", f"{tag}:{path}"))
        served = next(v for v in crd["spec"]["versions"] if v.get("served") and v.get("storage"))
        schema = _strip(served["schema"]["openAPIV3Schema"])
        digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()
        if digest not in written:
            name = f"clusterpolicy-{tag}.json"
            document = {"$comment": f"openAPIV3Schema of ClusterPolicy {served['name']} from {SOURCE} {path} at "
                                    f"{tag}, descriptions removed (scripts/vendor_operator_crds.py)", **schema}
            (OUT / name).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
            written[digest] = name
        commit = _git(git_dir, "rev-list", "-n", "1", tag).strip()
        index[tag] = {"schema": written[digest], "source": SOURCE, "path": path, "commit": commit}
    (OUT / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
