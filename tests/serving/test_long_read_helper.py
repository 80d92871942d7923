"""A worker starts its long-read helper process (serving/long_reads.py) without
holding its event loop: under the hostile bench's load, spawning it from the
loop held every request of the worker for 60-90 ms."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time

import pytest

from serving import long_reads


@pytest.mark.processes
def test_the_helper_is_started_while_the_event_loop_goes_on(monkeypatch):
    spawned_in = []

    class SlowPopen(subprocess.Popen):  # a spawn that takes its time, as on a loaded machine
        def __init__(self, *args, **kwargs):
            spawned_in.append(threading.get_ident())
            time.sleep(0.4)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", SlowPopen)

    async def main():
        helper = long_reads.LongReads()
        helper._starting = asyncio.Lock()
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.ensure_future(ticker())
        try:
            path = await helper._helper()
            os.kill(helper.proc.pid, 0)  # running (and it said it is ready)
            reader, writer = await asyncio.open_unix_connection(path)  # and serving
            writer.close()
            assert await helper._helper() == path  # started once
        finally:
            stop.set()
            await ticking
            helper.close()
        return ticks, threading.get_ident()

    ticks, loop_thread = asyncio.run(main())
    assert spawned_in and loop_thread not in spawned_in
    assert ticks >= 20, ticks  # the loop ran through the 0.4-s spawn (40 ticks when nothing else runs)
