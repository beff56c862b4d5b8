"""Fixtures for `gpupolicy cluster`: recorded responses served per test, and the CLI run in-process."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import build_recorded
import pytest
from cluster_support import Cluster, Obj, Result
from recorded_responses import Fault, RecordedResponses, load_scenario, serve

from cli.main import main


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Serve a scenario's recorded responses: recorded objects, plus or instead of given ones, with faults."""
    with ExitStack() as stack:

        def start(scenario: str | None = None, *, add: Mapping[str, list[Obj]] | None = None,
                  replace: Mapping[str, list[Obj]] | None = None, faults: Mapping[str, Fault] | None = None,
                  context: str = "tke-prod") -> Cluster:
            objects = load_scenario(scenario) if scenario else {}
            for resource, items in (add or {}).items():
                objects[resource] = [*objects.get(resource, []), *items]
            objects.update(replace or {})
            server = stack.enter_context(serve(RecordedResponses(objects, build_recorded.TAKEN_AT, dict(faults or {}))))
            return Cluster(server, server.kubeconfig(tmp_path, context=context))

        yield start


@pytest.fixture
def gpupolicy(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run the CLI in-process; returns exit code, stdout and stderr."""

    def run(*args: str | Path) -> Result:
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
