"""``nightshift --version`` names the installed distribution's version, for bug reports and scripts."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from nightshift.cli import app


def test_version_prints_the_installed_version_and_exits() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"nightshift {version('nightshift')}\n"


def test_version_is_listed_in_the_help() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    assert "--version" in result.output
