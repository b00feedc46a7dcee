"""`contextfold serve` as a real process (uvicorn): startup checks and message, the events
stream over a real socket, and two workers on PostgreSQL sharing events (docs/service.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.server_fixtures import ROOT, serve_process
from tests.store_fixtures import drop_pg_schema, new_pg_schema


def _events(url: str, sid: str, found: list, wanted: dict, ready: threading.Event
            ) -> None:
    """Read the events stream until every node id in `wanted["ids"]` (set by the test once
    its turns are answered) came as a `message` event. A notification from the other worker
    may arrive after the reply did, so the reader waits for what it expects, not for a
    count of lines; the stream's keep-alive and the test's join deadline bound the wait."""
    with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events", timeout=60,
                      headers={"Accept": "text/event-stream"}) as r:
        name = None
        seen: set[str] = set()
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                found.append((name, json.loads(line[6:])))
                if name == "gauge":
                    ready.set()
                if name == "message":
                    seen.add(found[-1][1]["node_id"])
            if "ids" in wanted and wanted["ids"] <= seen:
                return


def test_serve_refuses_public_bind_without_auth_and_sqlite_workers(tmp_path: Path) -> None:
    """W2: no --auth means loopback only; several workers need PostgreSQL."""
    db = f"sqlite:///{tmp_path / 'x.db'}"
    for args, words in ((["--host", "0.0.0.0"], "--auth"),
                        (["--workers", "2"], "PostgreSQL")):
        done = subprocess.run([sys.executable, "-m", "contextfold", "serve", "--db", db, *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 2 and words in done.stderr, done.stderr


def test_serve_process_streams_events(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with serve_process("--db", f"sqlite:///{tmp_path / 's.db'}", log=log) as (url, _proc):
        sid = httpx.post(f"{url}/v1/sessions", json={"title": "p"}).json()["session_id"]
        found: list = []
        wanted: dict = {}
        ready = threading.Event()
        reader = threading.Thread(target=_events, args=(url, sid, found, wanted, ready),
                                  daemon=True)
        reader.start()
        assert ready.wait(30)
        turn = httpx.post(f"{url}/v1/sessions/{sid}/messages", json={"text": "over a socket"},
                          timeout=60).json()
        wanted["ids"] = {turn["reply"]["node_id"]}
        httpx.post(f"{url}/v1/sessions/{sid}/messages", json={"text": "wake the reader"},
                   timeout=60)
        reader.join(120)
        names = [n for n, _ in list(found)]
        assert names[:2] == ["state", "gauge"]
        deltas = "".join(d["text"] for n, d in found if n == "delta")
        assert turn["reply"]["text"] in deltas
        assert turn["reply"]["node_id"] in {d["node_id"] for n, d in found if n == "message"}
        assert {"phase": "busy"}.items() <= next(
            d for n, d in found if n == "state" and d["phase"] == "busy").items()
    text = log.read_text()
    assert "loopback only" in text and 'tenant "default"' in text


@pytest.mark.slow
def test_two_workers_on_postgresql_share_events(tmp_path: Path) -> None:
    """Each request may land on either worker: the events stream (on one of them) still
    sees every turn, through PostgreSQL LISTEN/NOTIFY."""
    url_db = new_pg_schema()
    try:
        with serve_process("--db", url_db, "--workers", "2", log=tmp_path / "w.log",
                           env={"CONTEXTFOLD_DB": ""}) as (url, _proc):
            sid = httpx.post(f"{url}/v1/sessions", json={}).json()["session_id"]
            found: list = []
            wanted: dict = {}
            ready = threading.Event()
            reader = threading.Thread(target=_events, args=(url, sid, found, wanted, ready),
                                      daemon=True)
            reader.start()
            assert ready.wait(30)
            replies = []
            for i in range(8):  # new connections: uvicorn's workers share them
                with httpx.Client() as client:
                    replies.append(client.post(f"{url}/v1/sessions/{sid}/messages",
                                               json={"text": f"turn {i}"}, timeout=60)
                                   .json()["reply"]["node_id"])
            wanted["ids"] = set(replies)
            # One more turn: events on the stream now, so a reader that already saw every
            # reply does not wait for the keep-alive to notice.
            httpx.post(f"{url}/v1/sessions/{sid}/messages", json={"text": "wake"}, timeout=60)
            reader.join(120)
            seen = {d["node_id"] for n, d in list(found) if n == "message"}
            assert set(replies) <= seen
            tree = httpx.get(f"{url}/v1/sessions/{sid}/tree").json()["nodes"]
            assert len(tree) == 2 * 9  # 8 turns and the wake-up
            pids = {line for line in (tmp_path / "w.log").read_text().splitlines()
                    if "Started server process" in line}
            assert len(pids) == 2
    finally:
        drop_pg_schema(url_db)


