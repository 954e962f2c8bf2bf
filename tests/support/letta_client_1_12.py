"""letta-client 1.12.1 beside 1.7.0 in one interpreter, as the package ``letta_client_1_12``.

Both versions are the package ``letta_client``; make installs 1.12.1 into the virtual
environment's ``letta-client-1.12`` folder (``tests/letta-client-1.12.lock``), and this loads it
from there under another name. The SDK imports its own modules relatively, so they all load under
that name too, and neither version sees the other.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

NAME = "letta_client_1_12"
FOLDER = Path(sys.prefix) / "letta-client-1.12" / "letta_client"


def letta_client_1_12() -> ModuleType:
    """The ``letta_client`` package of version 1.12.1 (loaded once)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    init = FOLDER / "__init__.py"
    if not init.exists():
        raise RuntimeError(f"letta-client 1.12.1 is not installed at {FOLDER}: run make .venv/.installed")
    spec = importlib.util.spec_from_file_location(NAME, init, submodule_search_locations=[str(FOLDER)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[NAME]
        raise
    return module
