"""The `contextfold` command-line tool (Typer + Rich)."""

from . import (  # noqa: F401  (registers the commands)
    chat_cmd,
    eval_cmd,
    mcp_cmd,
    proxy_cmd,
    recall_cmd,
    replay_cmds,
    serve_cmd,
    session_cmds,
)
from .app import app

__all__ = ["app"]
