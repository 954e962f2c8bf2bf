"""A user's install: the wheel built from the checkout, installed into a fresh virtual environment
without the dev extras, holds what the package reads at run time, and runs the CLI, the demo and
every module of the package with none of the dev tools there.

The dependencies come at the lock file's versions, checked by its hashes (pip takes them from its
cache or the package index), so the environment is the one the rest of the suite tests, less the
dev extras. The build and the install use the dev environment's pip: the lock's hashes act as
constraints only with a newer pip than the one a fresh environment starts with.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).parents[2]
PACKAGE = CHECKOUT / "src" / "nightshift"
PIP = [sys.executable, "-m", "pip"]

# What a user's code imports, each tried in the fresh environment on its own (every module is
# imported too, below): the Python client's package belongs here beside the package itself.
USER_IMPORTS = ("nightshift", "nightshift.client")

# What the build never needs: the checkout's environments and earlier builds, caches and databases.
NOT_BUILT_FROM_TOP = {".git", ".venv", "build", "dist"}
NOT_BUILT_FROM = shutil.ignore_patterns("*.egg-info", "__pycache__", ".*_cache", "artifacts", "*.db", "*.db-*")


@pytest.mark.timeout(600)
def test_the_wheel_installs_and_runs_without_the_dev_tools(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    _check_wheel_files(wheel)

    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    _install(wheel, python, tmp_path)

    installed = _installed_distributions(python)
    dev_only = _dev_only_distributions() & installed
    assert not dev_only, f"the dev extras' packages came with the install: {sorted(dev_only)}"
    _run([*PIP, "--python", str(python), "check"], tmp_path)

    version = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["version"]
    assert _run([str(env_dir / "bin" / "nightshift"), "--version"], tmp_path) == f"nightshift {version}\n"

    for module in USER_IMPORTS:
        _run([str(python), "-c", f"import {module}"], tmp_path)
    _import_every_module(python, tmp_path)

    _run_the_demo(env_dir, tmp_path)


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the checkout: setuptools leaves a build folder behind, whose files
    would otherwise go into a later build after their source is gone."""
    source = tmp_path / "checkout"

    def ignored(folder: str, names: list[str]) -> set[str]:
        top = NOT_BUILT_FROM_TOP.intersection(names) if Path(folder) == CHECKOUT else set()
        return top | NOT_BUILT_FROM(folder, names)

    shutil.copytree(CHECKOUT, source, ignore=ignored)
    out = tmp_path / "dist"
    _run([*PIP, "wheel", "--no-deps", "--wheel-dir", str(out), str(source)], tmp_path)
    (wheel,) = out.glob("nightshift-*.whl")
    return wheel


def _check_wheel_files(wheel: Path) -> None:
    """Every file of the package's source is in the wheel (migrations, their template, the
    dashboard's static files, py.typed), and nothing from outside it (the tests, the benchmarks)."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and not path.name.startswith(".")
    }
    assert expected - names == set(), f"missing from the wheel: {sorted(expected - names)}"
    for must in ("nightshift/py.typed", "nightshift/api/dashboard/static/index.html"):
        assert must in names
    assert any(name.startswith("nightshift/store/migrations/versions/0001_") for name in names)
    outside = {name for name in names if not name.startswith(("nightshift/", "nightshift-"))}
    assert outside == set(), f"the wheel holds files from outside the package: {sorted(outside)}"


def _install(wheel: Path, python: Path, tmp_path: Path) -> None:
    """The wheel, checked by its own hash, with its dependencies pinned by the lock file. Python
    compiles the modules that run as they are imported, instead of pip compiling all of them."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"nightshift @ {wheel.as_uri()} --hash=sha256:{digest}\n")
    lock = CHECKOUT / "requirements.lock"
    install = ["install", "--quiet", "--no-compile", "-r", str(requirements), "-c", str(lock)]
    _run([*PIP, "--python", str(python), *install], tmp_path)


def _installed_distributions(python: Path) -> set[str]:
    listed = _run([*PIP, "--python", str(python), "list", "--format=json"], python.parent)
    return {canonicalize_name(entry["name"]) for entry in json.loads(listed)}


def _dev_only_distributions() -> set[str]:
    """The packages the dev and otel extras name, which a plain install must not bring."""
    extras = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names: set[str] = {canonicalize_name(Requirement(text).name) for extra in ("dev", "otel") for text in extras[extra]}
    names.discard("nightshift")
    for tool in ("pytest", "mypy", "ruff", "playwright", "letta-client", "schemathesis"):
        assert tool in names, f"{tool} is no longer a dev extra: update this test"
    return names


def _import_every_module(python: Path, tmp_path: Path) -> None:
    """Each module of the installed package imports without the dev tools (``__main__`` runs the
    CLI when imported, so it is left to ``nightshift --version``)."""
    program = (
        "import importlib, pkgutil, nightshift\n"
        "names = [m.name for m in pkgutil.walk_packages(nightshift.__path__, 'nightshift.')]\n"
        "for name in names:\n"
        "    if name != 'nightshift.__main__':\n"
        "        importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    imported = int(_run([str(python), "-c", program], tmp_path))
    assert imported > 100, f"only {imported} modules found in the installed package"


def _run_the_demo(env_dir: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    output = _run([str(env_dir / "bin" / "nightshift"), "demo", "--agents", "3"], tmp_path, home=home)
    assert "created 3 agents" in output, output
    assert "3 / 0" in output, output
    assert (home / "demo.db").exists()


def _run(command: list[str], cwd: Path, home: Path | None = None) -> str:
    """One command, outside the dev environment: neither its variables nor nightshift's settings
    of the machine running the tests reach it."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"} and not key.startswith("NIGHTSHIFT_")
    }
    env["COLUMNS"] = "160"
    if home is not None:
        env["NIGHTSHIFT_HOME"] = str(home)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
