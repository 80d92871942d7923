"""A worker starts its long-read helper process (serving/long_reads.py) without
holding its event loop: spawned from the loop, it would hold every request of
the worker while the new process starts (docs/decisions/0010)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading

import pytest

from serving import long_reads


@pytest.mark.processes
def test_the_helper_is_started_while_the_event_loop_goes_on(monkeypatch):
    """A handshake, not a count of ticks: the spawn does not go on until a
    coroutine on the event loop has run after it began. A spawn made on the
    loop's thread would hold the loop, the coroutine could not run, and the
    spawn would wait out its bound and say so."""
    spawned_in, loop_ran_meanwhile = [], []
    spawning, loop_ran = threading.Event(), threading.Event()

    class HeldPopen(subprocess.Popen):  # a spawn that goes on only once the loop has run
        def __init__(self, *args, **kwargs):
            spawned_in.append(threading.get_ident())
            spawning.set()
            loop_ran_meanwhile.append(loop_ran.wait(10))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", HeldPopen)

    async def main():
        helper = long_reads.LongReads("config.long_reads")
        helper._starting = asyncio.Lock()
        try:
            starting = asyncio.ensure_future(helper._helper())
            while not spawning.is_set() and not starting.done():
                await asyncio.sleep(0.005)  # the loop runs this while the spawn is under way
            loop_ran.set()
            path = await starting
            assert helper.proc is not None
            os.kill(helper.proc.pid, 0)  # running (and it said it is ready)
            reader, writer = await asyncio.open_unix_connection(path)  # and serving
            writer.close()
            assert await helper._helper() == path  # started once
        finally:
            helper.close()
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert spawned_in and loop_thread not in spawned_in
    assert loop_ran_meanwhile == [True]
