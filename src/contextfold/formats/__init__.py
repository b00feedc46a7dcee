"""Importers: files people already have -> contextfold nodes, and projections -> requests.

Pure functions, no database: `import_file(path)` returns an `ImportResult` whose `nodes`
and `leaf_id` the store's `import_tree(nodes, leaf_id)` takes as they are.
"""

from .chat import import_anthropic_messages, import_openai_messages
from .claude_code import import_claude_code
from .detect import detect_format, import_file
from .errors import ImportFormatError
from .pi import import_pi
from .request import export_session
from .result import FORMATS, ImportResult, tool_pairing

__all__ = [
    "FORMATS",
    "ImportFormatError",
    "ImportResult",
    "detect_format",
    "export_session",
    "import_anthropic_messages",
    "import_claude_code",
    "import_file",
    "import_openai_messages",
    "import_pi",
    "tool_pairing",
]
