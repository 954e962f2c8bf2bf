"""The layers of ``src/nightshift`` import one way only (see docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import nightshift

# Lower numbers are lower layers; a module may import its own layer and lower ones.
LAYERS = {
    "domain": 0,
    "clock": 0,
    "errors": 0,
    "ids": 0,
    "config": 1,
    "logs": 1,
    "tracing": 1,
    "metrics": 1,
    "store": 2,
    "providers": 2,
    "tools": 2,
    "pricing": 3,
    "parts": 3,
    "runtime": 4,
    "batch": 5,
    "services": 6,
    "api": 7,
    "serving": 8,
    "cli": 8,
    "cli_commands": 8,
    "demo": 8,
    "__main__": 9,
}
ROOT = Path(nightshift.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("nightshift.")}


def test_every_import_goes_down_or_sideways() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        layer = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if layer in ("__init__", "emulator"):
            continue
        for name in _imports(path):
            other = name.split(".")[1]
            if other == "emulator":
                continue  # the demo and the bench run the emulator next to the server
            if LAYERS[other] > LAYERS[layer]:
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_emulator_imports_nothing_of_the_server() -> None:
    wrong = []
    for path in sorted((ROOT / "emulator").rglob("*.py")):
        for name in _imports(path):
            if not name.startswith("nightshift.emulator"):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert wrong == []


def test_the_stages_do_not_import_the_worker() -> None:
    # The worker's loop calls the stages and acts on what they return: a stage that imported it
    # (to call back into it) would make the two one tangle again.
    loops = {"worker.py", "poller.py"}
    wrong = [
        path.name
        for path in sorted((ROOT / "batch").glob("*.py"))
        if path.name not in loops and "nightshift.batch.worker" in _imports(path)
    ]
    assert wrong == []
