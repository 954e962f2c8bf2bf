"""Official SDK clients with retries off, pointed at the emulator (see the root conftest)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import openai
import pytest


@pytest.fixture
async def anthropic_sdk(emulator: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def openai_sdk(emulator: str) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(max_retries=0)
    yield client
    await client.close()
