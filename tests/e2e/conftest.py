"""End-to-end fixtures shared by the server-process tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.processes import ToolCallLog


@pytest.fixture
def tool_log() -> Iterator[ToolCallLog]:
    """Where the slow tool reports its starts (see ``slow_tool_source``)."""
    log = ToolCallLog()
    yield log
    log.close()
