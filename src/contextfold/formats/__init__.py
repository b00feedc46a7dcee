"""Importers: files people already have -> contextfold nodes, and projections -> requests.

Pure functions, no database: `import_file(path)` returns an `ImportResult` whose `nodes`
and `leaf_id` the store's `import_tree(nodes, leaf_id)` takes as they are.

Names resolve on first use (PEP 562): a command that only exports a projection does not
load every importer.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["import_anthropic_messages", "import_openai_messages"], ".chat"),
    "import_claude_code": ".claude_code",
    **dict.fromkeys(["detect_format", "import_file"], ".detect"),
    "ImportFormatError": ".errors",
    "import_pi": ".pi",
    "export_session": ".request",
    **dict.fromkeys(["FORMATS", "ImportResult", "tool_pairing"], ".result"),
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
