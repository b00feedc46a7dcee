"""The two chat wire protocols, each read and written in one place.

`openai_chat` (OpenAI chat completions, and every server that speaks it) and
`anthropic_messages` (the Anthropic Messages API) each hold, once: reading a wire message
into a core `Message` (tool calls and results, images and files as references, reasoning),
writing messages (through `core.render.export`, the one writer), the usage rule (SPEC E1, E3),
reading a whole reply, assembling a streamed one, and the protocol's error bodies.

Their callers: the SDK adapters (`providers/openai_compat.py`, `providers/anthropic_messages.py`,
which keep only the SDK calls), the importers (`formats/chat.py`, `formats/claude_code.py`) and
the proxy (`proxy/wire.py`). The package is pure: no SDK, no asyncio, no store. A reply or a
stream event may be an SDK's pydantic model or the JSON the proxy decoded (`plain`).
"""
