"""Which optional extra a command needs, and the one line that says how to install it.

A command whose extra is missing must not end in a traceback (`ModuleNotFoundError:
fastapi`): it names the extra and the exact `pip install` line, before importing anything of
it. The modules are the import names of the packages each extra of pyproject.toml installs
(`tests/test_cli_extras.py` keeps the two in step).
"""

from __future__ import annotations

from importlib.util import find_spec

from ..errors import MissingExtraError

# extra -> the modules its packages provide, as imported
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "server": ("fastapi", "uvicorn", "httpx"),
    "proxy": ("starlette", "uvicorn", "httpx2"),
    "providers": ("openai", "anthropic"),
    "plot": ("matplotlib",),
    "mcp": ("mcp",),  # anyio, which the command runs on, comes with it
}


def install_line(extra: str) -> str:
    """The exact command that installs `extra` (quoted for every shell)."""
    return f"pip install 'contextfold[{extra}]'"


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (none when it is installed)."""
    return [m for m in EXTRA_MODULES[extra] if find_spec(m) is None]


def require_extra(command: str, extra: str) -> None:
    """Raise `MissingExtraError` naming the extra and its install line when a module is
    missing."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(f"`contextfold {command}` needs the {extra!r} extra ("
                           f"{', '.join(missing)} not installed): {install_line(extra)}")
