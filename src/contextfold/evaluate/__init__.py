"""`contextfold eval`: a summariser's continuity, measured on a planted session.

A planted research session (`planted`) is compacted K times with the summariser under test
through the one compaction path (`runner`); after each K asked for, every fact of a folded
turn is probed (`probes`): is it in the request its question goes out with (automatic
recall included), and in the checkpoint? `report` holds the figures. The continuity
benchmark's sessions live here too (`facts`, `material`, `research`).
"""

from .report import CompactionRow, EvalResult, Milestone
from .runner import EvalInputError, parse_compactions, run_eval

__all__ = ["CompactionRow", "EvalInputError", "EvalResult", "Milestone", "parse_compactions",
           "run_eval"]
