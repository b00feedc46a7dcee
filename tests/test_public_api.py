"""The public API: every re-exported name resolves, and importing the core loads no driver
or SDK (what the core's source may import: tests/test_layering.py)."""

from __future__ import annotations

import subprocess
import sys

import contextfold


def test_every_public_name_resolves():
    for name in contextfold.__all__:
        assert getattr(contextfold, name) is not None, name


def test_importing_the_core_loads_no_driver_or_sdk():
    code = ("import sys, contextfold.core.planner, contextfold.core.export; "
            "print(sorted(m for m in ('sqlalchemy', 'openai', 'anthropic', 'asyncio') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
