"""Which conversations of the proxy may share nodes: the chain scope of a request (SPEC Y1,
Y5, W1).

Conversations are mapped onto the tree by content under a *scope* (`Mirror.sync(scope=)`):
two requests of one scope that begin with the same messages continue the same session. The
scope is the protocol, the optional `x-contextfold-session` header, the tenant (`--auth`)
and, when the client gives one, its identity: the product names of its user agent (versions
left out, so an agent's update keeps its conversations) and a fingerprint of its key. So two
agents, or two people's keys, that open with the same message get separate sessions, and one
never overwrites the other's metadata.

The fingerprint is an HMAC-SHA256 of the key under a secret salt (`identity_salt`), cut to
128 bits. The key itself is never stored or logged (Y5); only chain hashes derived from the
fingerprint are, and without the salt they cannot even confirm a guessed key. The salt is
`$CONTEXTFOLD_PROXY_SALT`, else a random one kept in `<user data dir>/contextfold/proxy-salt`
(created on first use), so the mapping survives restarts; proxies that share one database
must share the salt.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import ProxyConfig
from .tenancy import current_tenant
from .workdir import working_directory

if TYPE_CHECKING:
    from ..core.values.messages import Message
    from .wire import Parsed

SALT_ENV = "CONTEXTFOLD_PROXY_SALT"
SESSION_HEADER = "x-contextfold-session"
KEY_HEADERS = ("authorization", "x-api-key", "api-key")  # OpenAI, Anthropic, Azure
_VERSION = re.compile(r"/?\bv?\d[\w.+-]*")
log = logging.getLogger("contextfold.proxy")


def agent_name(user_agent: str | None) -> str:
    """The user agent without version numbers (`claude-cli/2.0.14 (external, cli)` →
    `claude-cli (external, cli)`), so an update does not start new sessions."""
    if not user_agent:
        return ""
    return " ".join(_VERSION.sub("", user_agent).split())[:200]


# Agents recognisable from their user agent (or, for agents that send their SDK's user agent,
# a header of their own), first match wins; the title names the agent, the user agent stays
# beside it. Patterns match the start of the user agent, case-insensitively.
_AGENT_USER_AGENTS: tuple[tuple[str, str], ...] = (
    (r"claude-cli/|claude-code/", "Claude Code"),
    (r"codex_cli_rs/|codex_exec/|codex/", "Codex"),
    (r"opencode/", "OpenCode"),
    (r"pi/|pi-coding-agent/", "Pi"),
    (r"aider/", "Aider"),
    (r"goose/", "Goose"),
    (r"gemini-cli/|geminicli/", "Gemini CLI"),
    (r"kilo-code/|kilocode/", "Kilo Code"),
    (r"cline/", "Cline"),
)
_ORIGINATORS = {"codex_cli_rs": "Codex", "codex_exec": "Codex"}  # Codex's `originator` header
# Agents that send only their SDK's user agent (Pi: `OpenAI/JS 6.26.0`) but say who they
# are in the first line of their system prompt.
_SYSTEM_PROMPTS: tuple[tuple[str, str], ...] = (
    ("operating inside pi, a coding agent harness", "Pi"),
    ("you are opencode", "OpenCode"),
    ("you are goose", "Goose"),
    ("you are claude code", "Claude Code"),
)


def known_agent(headers: Mapping[str, str], system: str | None = None) -> str | None:
    """The agent behind a request when it can be told (Claude Code, Codex, OpenCode, Pi, ...):
    from its user agent, Codex's `originator` header, or the opening of its system prompt;
    None for a client that names only its SDK."""
    user_agent = (headers.get("user-agent") or "").strip()
    for pattern, name in _AGENT_USER_AGENTS:
        if re.match(pattern, user_agent, re.IGNORECASE):
            return name
    originator = (headers.get("originator") or "").strip().lower()
    if originator in _ORIGINATORS:
        return _ORIGINATORS[originator]
    opening = " ".join((system or "")[:600].split()).lower()
    for phrase, name in _SYSTEM_PROMPTS:
        if phrase in opening:
            return name
    return None


TITLE_WORDS = 60  # characters of the first user statement a title shows
TITLE_MAX = 120


def session_title(headers: Mapping[str, str], system: str | None = None,
                  messages: Sequence[Message] = ()) -> str:
    """A proxied session's title: what the person first asked, shortened, with the agent
    beside it — `Fix the flaky login test … · Pi (OpenAI/JS 6.26.0)` — so a list of one
    agent's sessions tells them apart (issue 41). The first message a person typed counts
    (`summarize.user_words.statement_of`: an agent's injected notices and pasted output are
    not what they asked); without one, `proxy: Pi (OpenAI/JS 6.26.0)`, or
    `proxy: <user agent>` for a client that names no agent."""
    from ..summarize.user_words import statement_of

    user_agent = " ".join((headers.get("user-agent") or "").split()) or "unknown client"
    agent = known_agent(headers, system)
    client = f"{agent} ({user_agent})" if agent else user_agent
    asked = next((s for m in messages if m.role == "user"
                  and (s := statement_of(m.text)) is not None), None)
    if asked is None:
        return f"proxy: {client}"[:TITLE_MAX]
    return f"{shorten(asked, TITLE_WORDS)} · {client}"[:TITLE_MAX]


def shorten(text: str, limit: int) -> str:
    """`text` on one line, cut at a word boundary to about `limit` characters with "…"."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0] if " " in line[:limit] else line[:limit]
    return cut.rstrip(" ,.;:") + " …"


def key_fingerprint(headers: Mapping[str, str], salt: bytes) -> str:
    """HMAC-SHA256 of the client's key under `salt`, 32 hex digits ("" without a key)."""
    for name in KEY_HEADERS:
        value = headers.get(name)
        if value and value.strip():
            return hmac.new(salt, value.strip().encode("utf-8"), hashlib.sha256).hexdigest()[:32]
    return ""


def conversation_scope(protocol: str, headers: Mapping[str, str], salt: bytes) -> str:
    """The chain scope of a request: what must be equal for two requests to share nodes."""
    parts = [protocol, headers.get(SESSION_HEADER, "default")]
    tenant = current_tenant()
    if tenant is not None:
        parts.append(f"tenant={tenant}")
    agent, key = agent_name(headers.get("user-agent")), key_fingerprint(headers, salt)
    if agent or key:  # with neither, the scope is what it was before identities existed
        parts.append(f"client={agent}|{key}")
    return ":".join(parts)


def owner_of(headers: Mapping[str, str], salt: bytes) -> str:
    """Who may use a continuation handle this request creates (SPEC Y12): a digest of the
    tenant (`--auth`) and the client's key fingerprint, 32 hex digits. A `previous_response_id`
    is honoured only for a request of the same owner. A digest of the fingerprint, never the
    key (Y5); without a tenant and a key every client is the same owner (nothing tells them
    apart)."""
    tenant = current_tenant() or ""
    key = key_fingerprint(headers, salt)
    return hashlib.sha256(f"contextfold-owner\0{tenant}\0{key}".encode()).hexdigest()[:32]


def session_meta(agent: str, parsed: Parsed, protocol: str,
                 headers: Mapping[str, str]) -> dict[str, Any]:
    """What the proxy keeps on a session it serves (its `proxy` metadata): the client, the
    model, the protocol, and when the request gives them, the session label
    (`x-contextfold-session`) and the working directory the agent states (`workdir.py`).
    `contextfold mcp` finds a client's conversation by these (docs/mcp.md)."""
    meta: dict[str, Any] = {"client": agent, "model": parsed.model, "protocol": protocol,
                            "agent": known_agent(headers, parsed.system)}
    label = headers.get(SESSION_HEADER, "").strip()
    if label:
        meta["label"] = label[:200]
    cwd = working_directory(parsed.system, parsed.messages)
    if cwd:
        meta["cwd"] = cwd
    return meta


def salt_for(config: ProxyConfig) -> bytes:
    """The fingerprint salt: the configured one, else `default_salt()`."""
    return config.identity_salt.encode("utf-8") if config.identity_salt else default_salt()


@cache
def default_salt() -> bytes:
    """`$CONTEXTFOLD_PROXY_SALT`, else the salt file in the user data dir (made on first use;
    if it cannot be written, a salt for this process only, with a warning)."""
    env = os.environ.get(SALT_ENV, "").strip()
    if env:
        return env.encode("utf-8")
    import platformdirs

    path = Path(platformdirs.user_data_dir("contextfold", appauthor=False)) / "proxy-salt"
    try:
        return _salt_file(path)
    except OSError as exc:
        log.warning("cannot keep the proxy's key-fingerprint salt in %s (%s): clients that "
                    "send a key start new sessions after a restart; set %s", path, exc,
                    SALT_ENV)
        return secrets.token_hex(32).encode("ascii")


def _salt_file(path: Path) -> bytes:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another proxy made it first: use theirs
            pass
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_hex(32).encode("ascii"))
    salt = path.read_bytes().strip()
    if not salt:
        raise OSError("the file is empty")
    return salt
