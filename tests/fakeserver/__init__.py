"""A local fake LLM provider for tests: real HTTP, both wire protocols, scriptable.

Speaks OpenAI chat completions (`/v1/chat/completions`) and Anthropic Messages
(`/v1/messages`), plain and streaming, counts prompt tokens with a real tokenizer, enforces a
context window with the providers' genuine errors, validates requests like the providers do,
and records every request. See `server.py` for the entry points.
"""

from .script import Reply, ServerConfig, ToolCallSpec
from .server import FakeServer, fake_server, server_fixture
from .state import RecordedRequest
from .summaries import CODING_SECTIONS, RESEARCH_SECTIONS, SUMMARISER_ROLE

__all__ = [
    "CODING_SECTIONS",
    "RESEARCH_SECTIONS",
    "SUMMARISER_ROLE",
    "FakeServer",
    "RecordedRequest",
    "Reply",
    "ServerConfig",
    "ToolCallSpec",
    "fake_server",
    "server_fixture",
]
