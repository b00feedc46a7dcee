"""Application-generated ids: time-ordered and globally unique (UUIDv7, RFC 9562).

Ids come from the application rather than a database sequence so that rows of one tree can
live on any shard and no query relies on a global counter.
"""

from __future__ import annotations

import os
import time
import uuid


def new_id() -> str:
    """A UUIDv7 string: 48-bit millisecond timestamp, version 7, 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))
