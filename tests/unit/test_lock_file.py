"""The lock file that ``make`` installs satisfies pyproject.toml: a dependency added or a range moved
without ``make lock`` fails here, not later on a machine that installs the ranges."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CHECKOUT = Path(__file__).parents[2]


def _pins() -> dict[str, str]:
    text = (CHECKOUT / "requirements.lock").read_text()
    return {canonicalize_name(name): version for name, version in re.findall(r"^([\w.-]+)==([^\s;]+)", text, re.M)}


def _requirements() -> list[Requirement]:
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    named = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [Requirement(r) for r in named if canonicalize_name(Requirement(r).name) != "nightshift"]


def test_every_dependency_is_pinned_within_its_range() -> None:
    pins = _pins()
    wrong = []
    for requirement in _requirements():
        locked = pins.get(canonicalize_name(requirement.name))
        if locked is None or not requirement.specifier.contains(locked, prereleases=True):
            wrong.append(f"{requirement} (locked: {locked})")
    assert wrong == []


def test_every_dependency_has_a_range_not_a_pin() -> None:
    """Exact pins belong in the lock: nightshift installed beside other packages takes any version
    of the ranges."""
    pinned = [str(r) for r in _requirements() if any(spec.operator == "==" for spec in r.specifier)]
    assert pinned == []
