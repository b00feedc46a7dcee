"""The one fatal error of the importers: input that cannot be imported at all."""

from __future__ import annotations

from ..errors import ContextfoldError


class ImportFormatError(ContextfoldError, ValueError):
    """Fatal import error; the message names the file, the line (when known) and the reason.

    Partially readable input is not fatal: the importers skip what they cannot read and report
    it in `ImportResult.warnings`. This error means nothing usable could be recovered, or the
    file is not in a format the importers know.
    """

    kind = "bad_input"

    def __init__(self, source: str, reason: str, line: int | None = None) -> None:
        self.source = source
        self.reason = reason
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {reason}")
