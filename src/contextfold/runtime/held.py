"""The process's per-conversation cache (SPEC Y14): `Held`, defined in `core.values.held` so that
the core's own memos (the chain hashes of `core.values.content_chain`) live in it too; the runtime
and the faces name it here."""

from __future__ import annotations

from ..core.values.held import DEFAULT_BYTES, Held, nodes_bytes, text_bytes

__all__ = ["DEFAULT_BYTES", "Held", "nodes_bytes", "text_bytes"]
