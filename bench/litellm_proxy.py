"""LiteLLM's proxy for the proxy bench, from its own venv (never a contextfold dependency).

`ensure_venv` creates `bench/.venv-litellm` from the pinned `bench/requirements-litellm.txt`
when it is missing (once, minutes: the `proxy` extra is large). `command` starts
`litellm --config FILE` with one model, the bench's scripted upstream as an OpenAI-compatible
server, and LiteLLM's defaults otherwise: one worker (uvicorn), no database, its request
logging as it comes; the only setting added is a master key, since this version refuses to
start without one (`UnsafeMasterKeyError`), so every request is checked against it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-litellm"
REQUIREMENTS = HERE / "requirements-litellm.txt"
MODEL = "bench-model"


def pinned_version() -> str:
    """The version `requirements-litellm.txt` pins (e.g. "1.106.12")."""
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("litellm"):
            return line.split("==", 1)[1].strip()
    raise ValueError(f"{REQUIREMENTS}: no litellm line")


def installed_version(exe: Path) -> str:
    """The litellm version installed beside `exe` (its venv's dist-info), else the pin."""
    site = exe.resolve().parent.parent.glob("lib/python*/site-packages/litellm-*.dist-info")
    for info in site:  # litellm-1.106.12.dist-info, not litellm-proxy-extras-…
        version = info.name.removeprefix("litellm-").removesuffix(".dist-info")
        if version[:1].isdigit():
            return version
    return pinned_version()


def ensure_venv() -> Path:
    """The `litellm` executable: `$CONTEXTFOLD_BENCH_LITELLM` when set (a venv made before,
    e.g. another checkout's), else this checkout's venv, created and installed first if
    missing."""
    given = os.environ.get("CONTEXTFOLD_BENCH_LITELLM")
    if given:
        return Path(given)
    exe = VENV / "bin" / "litellm"
    if not exe.exists():
        print(f"creating {VENV} (litellm {pinned_version()}, a few minutes) ...",
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "-r", str(REQUIREMENTS)],
                       check=True)
    return exe


def write_config(path: Path, upstream: str) -> str:
    """LiteLLM's config at `path`: `MODEL` served by `upstream` (OpenAI-compatible); returns
    the master key the clients send."""
    key = "sk-" + secrets.token_hex(32)
    path.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: sk-bench\n"
        "general_settings:\n"
        f"  master_key: {key}\n", encoding="utf-8")
    return key


def command(exe: Path, config: Path, port: int) -> list[str]:
    """The command line: `litellm --config FILE --host 127.0.0.1 --port PORT`."""
    return [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
