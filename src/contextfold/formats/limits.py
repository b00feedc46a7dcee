"""How much an import may read: the file's size limit (`--max-bytes`,
$CONTEXTFOLD_MAX_IMPORT_BYTES, `import_limit`), the limit on one JSON value
($CONTEXTFOLD_MAX_IMPORT_LINE_BYTES), and opening a session file under them (`open_input`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import BinaryIO

from .errors import ImportFormatError


def source_name(path: str | Path) -> str:
    """The short name used in messages and warnings (the file name)."""
    return Path(path).name or str(path)


# Imports read at most this many bytes unless told otherwise (`--max-bytes`,
# $CONTEXTFOLD_MAX_IMPORT_BYTES): a session file is rarely over a few tens of MB, and a
# wrong path (a disk image, a log) should be refused, not read into memory.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MAX_BYTES_ENV = "CONTEXTFOLD_MAX_IMPORT_BYTES"
_max_bytes: ContextVar[int | None] = ContextVar("contextfold_import_max_bytes", default=None)


# One JSON value is parsed whole (a JSON line, or a file that is one JSON document), and
# its text is indexed for recall word by word: a 10 MiB line took 0.4 GB and 11 s to import.
# Lines over this are skipped as unreadable (reported), such a document is refused; real
# session lines are at most a few MB (a line with two full-size screenshots: 14 MB).
DEFAULT_MAX_VALUE_BYTES = 16 * 1024 * 1024
MAX_VALUE_BYTES_ENV = "CONTEXTFOLD_MAX_IMPORT_LINE_BYTES"


def max_value_bytes() -> int:
    """The largest JSON line or whole-file document read: $CONTEXTFOLD_MAX_IMPORT_LINE_BYTES,
    else 16 MiB."""
    env = os.environ.get(MAX_VALUE_BYTES_ENV, "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else DEFAULT_MAX_VALUE_BYTES


class OversizedLine(bytes):
    """What `read_lines` yields for a line over `max_value_bytes()` (its bytes not read)."""

    size: int


def _oversized(size: int) -> OversizedLine:
    marker = OversizedLine()
    marker.size = size
    return marker


def value_too_big(what: str, size: int) -> str:
    return (f"{what} is {_mb(size)}, over the {_mb(max_value_bytes())} one JSON value may have "
            f"(it is read whole; set ${MAX_VALUE_BYTES_ENV} to raise the limit)")


def max_import_bytes() -> int:
    """The size limit in force: `import_limit`, else $CONTEXTFOLD_MAX_IMPORT_BYTES, else the
    default."""
    chosen = _max_bytes.get()
    if chosen is not None:
        return chosen
    env = os.environ.get(MAX_BYTES_ENV, "").strip()
    return int(env) if env.isdigit() and int(env) > 0 else DEFAULT_MAX_BYTES


@contextmanager
def import_limit(max_bytes: int | None) -> Iterator[None]:
    """Read session files with this size limit (None: the default) inside the block."""
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    token = _max_bytes.set(max_bytes)
    try:
        yield
    finally:
        _max_bytes.reset(token)


def _mb(size: int) -> str:
    return f"{size / 1_048_576:.1f} MB"


def open_input(path: str | Path) -> BinaryIO:
    """Open a session file: a regular file within the size limit, or `ImportFormatError`.

    Opened non-blocking and checked on the open descriptor, so a FIFO cannot hang the
    import and a symlink to a device (`/dev/zero`) is refused by what it points at.
    """
    name = source_name(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ImportFormatError(name, f"no such file: {path}") from None
    except IsADirectoryError:
        raise ImportFormatError(name, f"{path} is a directory, not a session file") from None
    except OSError as exc:
        raise ImportFormatError(name, f"cannot read the file ({exc.strerror or exc})") from None
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        os.close(fd)
        raise ImportFormatError(name, f"{path} is a directory, not a session file")
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "a socket"
                if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        raise ImportFormatError(name, f"{path} is {kind}; only regular files are imported")
    limit = max_import_bytes()
    if info.st_size > limit:
        os.close(fd)
        raise ImportFormatError(name, f"the file is {_mb(info.st_size)}, over the import limit "
                                f"of {_mb(limit)}; pass --max-bytes {info.st_size} (or set "
                                f"${MAX_BYTES_ENV}) to import it")
    return os.fdopen(fd, "rb")


def _too_big(name: str, limit: int) -> ImportFormatError:
    return ImportFormatError(name, f"the file grew past the import limit of {_mb(limit)} "
                             "while it was read")
