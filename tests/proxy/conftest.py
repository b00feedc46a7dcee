"""The fixtures every proxy test module shares: the fake model server behind the proxy and
the proxy's database. A module sets its own `WINDOW` (the fake server's context window) and
`KEY` (the only API key it accepts)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeserver import fake_server


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator:
    """The fake model server at the module's `WINDOW`, answering its `KEY` only."""
    with fake_server(context_window=request.module.WINDOW, api_key=request.module.KEY) as fake:
        yield fake


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh SQLite database for the proxy."""
    return f"sqlite:///{tmp_path / 'proxy.db'}"
