"""The `contextfold` command-line tool (Typer + Rich)."""

from . import chat_cmd, mcp_cmd, proxy_cmd, recall_cmd, replay_cmds, serve_cmd, session_cmds  # noqa: F401  (registers the commands)
from .app import app

__all__ = ["app"]
