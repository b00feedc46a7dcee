"""Is a lease holder still alive? Lets a crashed compaction's lease be taken at once.

A lease holder is named `host:pid:nonce`. When the holder ran on this machine and its
process is gone (or a zombie), its lease is void now rather than when its TTL runs out;
a holder on another machine is trusted until its (short) TTL expires, because a
process id means nothing across machines. A reused pid can only make a dead holder look
alive (it then expires by TTL): never the other way round.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def holder_name(nonce: str) -> str:
    """The name this process writes into a lease row."""
    return f"{socket.gethostname()}:{os.getpid()}:{nonce}"


def holder_is_dead(holder: str) -> bool:
    """True only when `holder` certainly ran on this machine and its process is gone."""
    host, _, rest = holder.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    return not pid_alive(int(pid_text))


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (killed but not yet reaped)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    stat = Path(f"/proc/{pid}/stat")
    try:
        # Field 3 is the state; the command name in field 2 may hold spaces and ")".
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal check is all we have
    return state != "Z"
