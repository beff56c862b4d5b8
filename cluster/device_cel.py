"""DeviceClass selectors evaluated against the devices a DRA driver publishes, as the scheduler evaluates them.

The scheduler runs cel-go through k8s.io/dynamic-resource-allocation/cel (compile.go, Device and DeviceMatches):
``device.driver``, ``device.attributes[domain][id]`` and ``device.capacity[domain][id]``, a bare attribute name
being the driver's domain, a domain the device lacks reading as an empty map, and any error aborting the
allocation. This module hands the same ``device`` to cel-expr-python (Google's cel-cpp) with the extensions the
scheduler's environment has that the compiled selectors use (strings: ``replace``, ``lowerAscii``; bindings:
``cel.bind``). Not mirrored, and not used by any selector gpupolicy compiles: the Kubernetes quantity and semver
libraries (capacities and version attributes are handed over as their strings), and the empty map of a domain the
device lacks other than its own driver's (such a lookup is an error here).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from cluster.resources import SliceDevice


class SelectorError(Exception):
    """A selector that does not compile, or whose evaluation fails on a device (the scheduler aborts there)."""


@dataclass(frozen=True)
class Match:
    matches: bool
    error: str | None = None


@functools.cache
def _env() -> Any:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_bindings, ext_strings

    return cel.NewEnv(variables={"device": cel.Type.DYN},
                      extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings()])


@functools.lru_cache(maxsize=256)
def _compiled(expression: str) -> Any:
    try:
        return _env().compile(expression)
    except ImportError:  # a dependency of the package: only a broken install lacks it
        raise SelectorError("cannot be evaluated: cel-expr-python is not installed (pip install "
                            "cel-expr-python)") from None
    except RuntimeError as err:
        raise SelectorError(f"does not compile: {err}") from None


def device_input(driver: str, device: SliceDevice) -> dict[str, Any]:
    """The ``device`` variable: attributes and capacities grouped by domain (compile.go DeviceMatches)."""
    attributes: dict[str, dict[str, Any]] = {driver: {}}
    for name, value in device.attributes.items():
        domain, _, ident = name.rpartition("/")
        attributes.setdefault(domain, {})[ident] = value
    capacity: dict[str, dict[str, Any]] = {driver: {}}
    for name, quantity in device.capacity.items():
        domain, _, ident = name.rpartition("/")
        capacity.setdefault(domain, {})[ident] = quantity
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


def matches(expression: str, driver: str, device: SliceDevice) -> Match:
    """Whether the selector selects the device; an error is no match, with the error said (the scheduler aborts
    the allocation on it)."""
    try:
        compiled = _compiled(expression)
    except SelectorError as err:
        return Match(False, str(err))
    from cel_expr_python import cel

    try:
        result = compiled.eval(data={"device": device_input(driver, device)})
    except RuntimeError as err:
        return Match(False, f"fails: {err}")
    if result.type() == cel.Type.ERROR:
        return Match(False, f"fails: {result.value()}")
    value = result.value()
    if not isinstance(value, bool):
        return Match(False, f"gives {result.type().name()}, not bool")
    return Match(value)
