"""Crashes and races around opening and compacting (issue 10).

A killed compaction must not block its session for minutes, and several processes opening
a brand-new SQLite file at once must all get a working store.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from contextfold.store import SessionBusyError, open_store
from contextfold.store.sql.liveness import holder_is_dead, holder_name, pid_alive

pytest.register_assert_rewrite("tests.store_fixtures")
from tests.store_fixtures import first_open_worker, seed_session  # noqa: E402

pytest_plugins = ["tests.store_fixtures"]

ROOT = Path(__file__).resolve().parents[2]
PI_FILE = ROOT / "tests" / "fixtures" / "pi-mono" / "large-session.jsonl"

HOLD = """
import asyncio, sys
from contextfold.store import open_store

async def main():
    store = await open_store(sys.argv[1])
    async with store.compaction_lease(sys.argv[2]):
        print("held", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_killed_compaction_frees_its_session_at_once(store, db_url):  # U4, issue 10
    sid = await seed_session(store, turns=1, tools=0)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, db_url, sid],
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SessionBusyError) as busy:  # alive: the lease is respected
            async with store.compaction_lease(sid):
                pass
        assert busy.value.holder.split(":")[1] == str(holder.pid)
        assert 0 < busy.value.seconds_left <= 30
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    started = time.monotonic()
    async with store.compaction_lease(sid):  # its process is gone: no 30 s (or 300 s) wait
        assert (await store.lease_holder(sid)).split(":")[1] == str(os.getpid())
    assert time.monotonic() - started < 5


def test_liveness_of_holders():  # issue 10
    assert pid_alive(os.getpid())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not pid_alive(dead.pid)
    assert not holder_is_dead(holder_name("x"))
    assert holder_is_dead(holder_name("x").replace(f":{os.getpid()}:", f":{dead.pid}:"))
    assert not holder_is_dead(f"some-other-host:{dead.pid}:x")  # other machines: by TTL
    assert not holder_is_dead("crashed-worker")


@pytest.mark.parametrize("round_", range(2))
def test_concurrent_first_opens_of_a_new_sqlite_file(tmp_path, round_):  # issue 10
    url = f"sqlite:///{tmp_path / 'new.db'}"
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(5, mp_context=ctx) as pool:
        outcomes = list(pool.map(first_open_worker, [url] * 5, [str(PI_FILE)] * 5))
    assert sorted(outcomes) == ["duplicate"] * 4 + ["imported"]

    async def count() -> int:
        store = await open_store(url)
        try:
            return len(await store.list_sessions(check_damage=False))
        finally:
            await store.close()

    assert asyncio.run(count()) == 1
