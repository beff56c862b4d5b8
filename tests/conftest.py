"""Shared fixtures: the repository root, example policies (optionally edited), and --update-golden."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from policy.spec.model import ClusterGPUPolicy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "clusters"

# pytest's default import mode puts this directory (tests/) on sys.path because of this conftest; its
# sub-directories compiler/, policy/ and webhook/ would then import as namespace packages and shadow the
# real ones, which the editable install finds only after sys.path.  The repository root on sys.path lets
# the regular packages win (a regular package beats a namespace portion wherever it is on the path).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# Hypothesis: no per-example deadline (a loaded 2-core CI machine is slow, not wrong), and in CI a fixed
# seed, so a failure there is reproducible from the log.
from hypothesis import settings  # noqa: E402

settings.register_profile("default", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# The real kube-apiserver + etcd fixture (`kube_api`) and its marker's collection hook.
pytest_plugins = ["kube_api"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite the golden trees (examples/clusters/*/out) instead of comparing them")


@pytest.fixture(scope="session")
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def example_policy() -> Callable[..., ClusterGPUPolicy]:
    """example_policy(name, (old, new), ...): the checked policy of examples/clusters/<name>/cluster.yaml,
    after replacing each `old` text (which must occur exactly once) by `new`."""
    from policy.load import load_policy

    def load(name: str, *edits: tuple[str, str]) -> ClusterGPUPolicy:
        path = EXAMPLES / name / "cluster.yaml"
        text = path.read_text(encoding="utf-8")
        for old, new in edits:
            assert text.count(old) == 1, f"{old!r} must occur once in {path}"
            text = text.replace(old, new)
        result = load_policy(text, filename=str(path))
        assert result.ok and result.policy is not None, [d.message for d in result.diagnostics]
        return result.policy

    return load
