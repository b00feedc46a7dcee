"""Importers: files people already have -> contextfold nodes, and projections -> requests.

Pure functions, no database: `import_file(path)` returns an `ImportResult` whose `nodes`
and `leaf_id` the store's `import_tree(nodes, leaf_id)` takes as they are.

Names resolve on first use (PEP 562): a command that only exports a projection does not
load every importer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    # The names `__getattr__` below resolves on use, spelt out for type checkers and IDEs
    # (never run: nothing is imported early). `X as X` marks a re-export (PEP 484), and
    # tests/test_public_api.py holds this block equal to _EXPORTS.
    # isort: off
    from .chat import (
        import_anthropic_messages as import_anthropic_messages,
        import_openai_messages as import_openai_messages,
    )
    from .claude_code import import_claude_code as import_claude_code
    from .detect import detect_format as detect_format, import_file as import_file
    from .errors import ImportFormatError as ImportFormatError
    from .pi import import_pi as import_pi
    from .request import export_session as export_session
    from .result import (
        FORMATS as FORMATS, ImportResult as ImportResult, tool_pairing as tool_pairing,
    )
    # isort: on

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["import_anthropic_messages", "import_openai_messages"], ".chat"),
    "import_claude_code": ".claude_code",
    **dict.fromkeys(["detect_format", "import_file"], ".detect"),
    "ImportFormatError": ".errors",
    "import_pi": ".pi",
    "export_session": ".request",
    **dict.fromkeys(["FORMATS", "ImportResult", "tool_pairing"], ".result"),
}

__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll]
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
