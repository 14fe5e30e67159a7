from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from zapomni.services.mcp.front import Front
from zapomni.shared.settings import Settings


@pytest.fixture
async def front(settings: Settings) -> AsyncIterator[Front]:
    front = Front(settings)
    yield front
    await front.aclose()
