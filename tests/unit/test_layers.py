"""The layers of ``src/nightshift`` import exactly what docs/architecture.md allows them.

``ALLOWED`` is the table of the doc's "The layers" section: for each layer, the other layers it may
import. A module outside its row fails the test, unless ``EXCEPTIONS`` names that very import with
its reason; an exception no module needs any more fails it too, so that the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nightshift

ROOT = Path(nightshift.__file__).parent

# Every layer may use the types, the errors, the ids, the clock and the cycle collector's pauses.
_BASE = frozenset({"domain", "errors", "ids", "clock", "collector"})
# The entry points compose the whole server (and run the emulator next to it).
_EDGE = frozenset(
    {
        "domain", "errors", "ids", "config", "logs", "tracing", "metrics", "store", "providers",
        "tools", "pricing", "runtime", "batch", "services", "api", "serving", "cli", "cli_commands",
        "demo", "emulator", "clock", "collector", "parts", "client",
    }
)  # fmt: skip

ALLOWED: dict[str, frozenset[str]] = {
    # The Python client: httpx, pydantic and the stdlib only, so that importing it is quick.
    "client": frozenset(),
    "errors": frozenset(),
    "ids": frozenset(),
    "clock": frozenset(),
    "collector": frozenset(),
    "domain": frozenset({"errors"}),
    "config": _BASE,
    "logs": _BASE | {"config"},
    "tracing": _BASE | {"config"},
    "metrics": _BASE,
    "store": _BASE | {"config"},
    "providers": _BASE | {"config", "metrics"},
    "tools": _BASE | {"config", "metrics"},
    "pricing": _BASE | {"providers"},
    "parts": _BASE | {"config", "metrics", "providers", "tools", "pricing"},
    "runtime": _BASE | {"config", "store", "providers", "tools", "pricing"},
    "batch": _BASE
    | {"config", "logs", "tracing", "metrics", "store", "providers", "tools", "pricing", "parts", "runtime"},
    "services": _BASE | {"config", "tracing", "metrics", "store", "providers", "tools", "pricing", "runtime", "batch"},
    "api": _BASE | {"config", "logs", "tracing", "metrics", "parts", "services"},
    "serving": _EDGE,
    "cli": _EDGE,
    "cli_commands": _EDGE,
    "demo": _EDGE,
    "__main__": _EDGE,
}

# (module, module it imports): why, until the type moves to ``domain`` or behind a service.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("api/app.py", "nightshift.batch.poller"): "the app's lifecycle starts the poller",
    ("api/app.py", "nightshift.batch.poller_process"): "the app's lifecycle starts serve's poller child",
    ("api/app.py", "nightshift.batch.worker"): "the app's lifecycle builds the worker",
    ("api/app.py", "nightshift.store.db"): "the app's lifecycle builds the engine and migrates",
    ("api/app.py", "nightshift.store.checkpoints"): "the app's lifecycle runs SQLite's checkpoints",
    ("api/app.py", "nightshift.store.orgs"): "the app's lifecycle makes the default organization",
    ("api/deps.py", "nightshift.batch.poller_process"): "AppState holds the poller child",
    ("api/app.py", "nightshift.batch.callbacks"): "the app's lifecycle reads the callback rules once",
    ("api/deps.py", "nightshift.batch.callbacks"): "AppState holds the callback rules",
    ("api/deps.py", "nightshift.providers.clients"): "AppState holds the provider clients",
    ("api/deps.py", "nightshift.tools.sandbox"): "AppState holds the tool sandbox",
    ("api/app.py", "nightshift.providers.base"): "create_app takes providers in place of the real ones (tests)",
    ("api/deps.py", "nightshift.batch.worker"): "AppState holds the worker",
    ("api/routers/runs.py", "nightshift.store.run_listing"): "Listed and RunFilter, the run listing's types",
    ("api/context_schemas.py", "nightshift.runtime.window"): "ContextOverview, what the service returns",
    ("api/letta_messages.py", "nightshift.runtime.sync"): "SyncResult, what a synchronous send returns",
    ("api/letta_stream.py", "nightshift.runtime.sync"): "SyncResult, what a synchronous send returns",
    ("api/letta_stream.py", "nightshift.providers.base"): "the streamed deltas' types",
    ("api/letta_stream.py", "nightshift.providers.agent_arguments"): "the argument names a stream leaves out",
    ("api/run_stream.py", "nightshift.runtime.sync"): "SyncResult, how a background run's stepping ended",
    ("api/run_stream.py", "nightshift.providers.base"): "the streamed deltas' types, passed on to LettaStream",
    ("api/schemas.py", "nightshift.providers.registry"): "a model name is checked when the body is read",
    ("api/routers/archival.py", "nightshift.tools.base"): "the search's page size, shared with the base tool",
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("nightshift.")}


def _cross_layer_imports() -> set[tuple[str, str]]:
    """(module, imported module) for every import of another layer, the emulator's apart."""
    found: set[tuple[str, str]] = set()
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        layer = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if layer in ("__init__", "emulator"):
            continue
        found.update((module, name) for name in _imports(path) if name.split(".")[1] != layer)
    return found


def _table() -> str:
    rows = [f"  {layer:<12} -> {', '.join(sorted(ALLOWED[layer])) or '(nothing)'}" for layer in ALLOWED]
    kept = [f"  {module} -> {name}: {why}" for (module, name), why in EXCEPTIONS.items()]
    return "\n".join(["Each layer may import (docs/architecture.md):", *rows, "Exceptions:", *kept])


def test_every_layer_imports_only_what_the_table_allows() -> None:
    wrong = sorted(
        f"{module} imports {name}"
        for module, name in _cross_layer_imports()
        if name.split(".")[1] not in ALLOWED[module.split("/")[0].removesuffix(".py")]
        and (module, name) not in EXCEPTIONS
    )
    assert wrong == [], "\n".join([*wrong, _table()])


def test_every_exception_is_still_needed() -> None:
    stale = sorted(f"{module} -> {name}" for module, name in EXCEPTIONS.keys() - _cross_layer_imports())
    assert stale == [], "\n".join(["no module imports these any more: take them out of EXCEPTIONS", *stale])


def test_every_folder_and_module_has_a_row() -> None:
    layers = {p.relative_to(ROOT).parts[0].removesuffix(".py") for p in ROOT.glob("*")} - {"__init__", "__pycache__"}
    assert layers - {"emulator", "py.typed"} <= ALLOWED.keys(), _table()


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
