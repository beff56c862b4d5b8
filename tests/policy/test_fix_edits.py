"""A fix's edit writes what it says, as a client applying its JSON Patch would see it: a field under mappings the
object lacks is added with them in one operation, a scalar where a mapping belongs is replaced (as JSON Patch's
add replaces a member), and an edit of a list item the object lacks is refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from json_patch import apply_patch

from policy.admission.fixes import Fix, SetAmount

CONTAINER = ("spec", "templates", 0, "container")


def _pointer(path: tuple[Any, ...]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _applied(doc: dict[str, Any], edit: SetAmount) -> tuple[Any, list[dict[str, Any]]]:
    original = copy.deepcopy(doc)
    edited, ops = Fix((edit,)).apply(doc)
    assert doc == original  # the object the edit was found on is left as it was
    return edited, [{**op, "path": _pointer(op["path"])} for op in ops]


@pytest.mark.parametrize("container", [
    {"image": "x"},  # no resources
    {"image": "x", "resources": {}},  # no limits
    {"image": "x", "resources": {"limits": {"cpu": "1"}}},  # limits without the resource
])
def test_an_amount_is_written_under_whatever_mappings_the_container_lacks(container: dict[str, Any]) -> None:
    doc = {"spec": {"templates": [{"name": "t", "container": container}]}}
    edit = SetAmount(CONTAINER, "main", "nvidia.com/gpu", 1)
    edited, ops = _applied(doc, edit)
    [op] = ops
    assert op["op"] == "add"
    assert apply_patch(doc, ops) == edited
    assert edited["spec"]["templates"][0]["container"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert edited["spec"]["templates"][0]["container"]["image"] == "x"


@pytest.mark.parametrize("resources", [None, "text", 3, ["not", "a", "map"]])
def test_a_scalar_where_a_mapping_belongs_is_replaced_as_json_patch_add_replaces_a_member(resources: Any) -> None:
    doc = {"spec": {"templates": [{"name": "t", "container": {"image": "x", "resources": resources}}]}}
    edited, ops = _applied(doc, SetAmount(CONTAINER, "main", "nvidia.com/gpu", 1))
    assert apply_patch(doc, ops) == edited
    assert edited["spec"]["templates"][0]["container"]["resources"] == {"limits": {"nvidia.com/gpu": 1}}


def test_an_amount_for_a_container_the_object_lacks_is_refused() -> None:
    doc = {"spec": {"templates": [{"name": "t", "steps": []}]}}
    with pytest.raises(ValueError, match="no mapping"):
        Fix((SetAmount(("spec", "templates", 1, "container"), "main", "nvidia.com/gpu", 1),)).apply(doc)
