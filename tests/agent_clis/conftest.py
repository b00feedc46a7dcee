"""Skip the real-agent tests where the agents are not installed, unless CI requires them.

`make test` installs the pinned agents first (`make agents`); CI sets
CONTEXTFOLD_REQUIRE_AGENTS=1 so a missing install fails instead of skipping silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .clis import CLAUDE_BIN, CODEX_BIN, OPENCODE_BIN, PI_BIN

_BINARIES = {"pi": PI_BIN, "claude": CLAUDE_BIN, "codex": CODEX_BIN, "opencode": OPENCODE_BIN}


def _require(what: str) -> None:
    if os.environ.get("CONTEXTFOLD_REQUIRE_AGENTS") == "1":
        pytest.fail(f"{what} (CONTEXTFOLD_REQUIRE_AGENTS=1)")
    pytest.skip(what)


@pytest.fixture
def agent_installed() -> object:
    """Call with an agent name; skips (or fails under CI) when its CLI is not installed."""

    def check(agent: str) -> Path:
        path = _BINARIES[agent]
        if not path.exists():
            _require(f"{agent} is not installed: run `make agents`")
        return path

    return check

