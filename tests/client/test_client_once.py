"""do_once and once_per across instances (each its own SDK client and thread)
against Leasehold (time moved, not slept) and Azurite (real time, short)."""

from __future__ import annotations

import math
import threading
import time

from azure.storage.blob import BlobLeaseClient

from leasehold_client import OncePer, do_once
from tests.client.helpers import REPO


def test_two_instances_racing_do_once_run_fn_once(backend):
    container, name = backend.names()
    calls, returned = [], {}
    started = threading.Event()

    def initialise():
        calls.append(threading.current_thread().name)
        started.set()
        time.sleep(0.2)  # real work takes a while: the other instance must wait for it

    def instance(key):
        returned[key] = do_once(backend.blob(container, name), initialise, poll_interval=1, clock=backend.clock)

    threads = [backend.start(instance, key) for key in ("a", "b")]
    backend.run_until(lambda: len(returned) == 2, step=0.25, limit=60)
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert sorted(returned.values()) == [False, True]
    metadata = backend.blob(container, name).get_blob_properties().metadata
    assert metadata["progress"] == "done"
    # A latecomer sees it done and does not run it.
    assert do_once(backend.blob(container, name), initialise, clock=backend.clock) is False
    assert len(calls) == 1


def test_do_once_after_a_failure_runs_again(backend):
    container, name = backend.names()
    attempts = []

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("download failed")

    try:
        do_once(backend.blob(container, name), flaky, clock=backend.clock)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the failure must propagate")
    assert backend.blob(container, name).get_blob_properties().metadata.get("progress") != "done"
    assert do_once(backend.blob(container, name), flaky, clock=backend.clock) is True
    assert len(attempts) == 2


def test_a_crashed_runner_is_taken_over_when_its_lease_runs_out(leasehold):
    container, name = leasehold.names()
    blob = leasehold.blob(container, name)
    blob._get_container_client().create_container()
    blob.upload_blob(b"")
    # The crashed runner: took the lease, then its process died (no renewals, no release).
    BlobLeaseClient(blob).acquire(lease_duration=15)
    crashed_at = leasehold.clock.monotonic()
    ran_at = []
    done = {}

    def instance():
        done["ran"] = do_once(leasehold.blob(container, name), lambda: ran_at.append(leasehold.clock.monotonic()),
                              poll_interval=2, clock=leasehold.clock)

    leasehold.start(instance)
    leasehold.run_until(lambda: "ran" in done, step=0.5)
    assert done["ran"] is True and len(ran_at) == 1
    assert 15 <= ran_at[0] - crashed_at <= 15 + 2 + 0.5  # at the lease's end, within one poll


def _run_instances(backend, job, *, count, until, period, step):
    stop = threading.Event()
    threads = [backend.start(job(i).run, stop) for i in range(count)]
    try:
        backend.run_until(until, step=step, limit=10 * period)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)


def test_once_per_runs_once_per_period_across_three_instances(backend):
    container, name = backend.names()
    period = 60.0 if backend.fake_time else 1.0
    runs: list[tuple[int | None, int]] = []  # (slot, instance)

    def job(i):
        def report():
            runs.append((instance.running_slot, i))  # the period it runs for (time may pass a boundary meanwhile)
        instance = OncePer(backend.blob(container, name), period, report, poll_interval=period / 4,
                           clock=backend.clock)
        return instance

    first: dict[str, int] = {}

    def three_periods_done():
        if runs and "slot" not in first:
            slot = runs[0][0]
            assert slot is not None, runs  # a job runs within its period
            first["slot"] = slot
        return bool(runs) and math.floor(backend.clock.time() / period) >= first["slot"] + 3

    _run_instances(backend, job, count=3, until=three_periods_done, period=period, step=period / 20)
    slots = [slot for slot, _ in runs if slot is not None]
    assert len(slots) == len(runs), f"a job ran outside a period: {runs}"
    assert len(slots) == len(set(slots)), f"a period ran twice: {runs}"
    if backend.fake_time:  # on real time a loaded machine may let a 1 s period pass unseen
        assert slots == list(range(slots[0], slots[0] + len(slots)))  # and none was skipped
    assert len(slots) >= 3
    metadata = backend.blob(container, name).get_blob_properties().metadata
    assert int(metadata["lastrun"]) == slots[-1]


def test_once_per_survives_a_crashed_runner(leasehold):
    container, name = leasehold.names()
    period = 60.0
    leasehold.advance(period - leasehold.clock.time() % period + 1)  # one second into a period
    blob = leasehold.blob(container, name)
    blob._get_container_client().create_container()
    blob.upload_blob(b"")
    BlobLeaseClient(blob).acquire(lease_duration=15)  # a runner that died in the middle of this period's job
    crashed_at = leasehold.clock.monotonic()
    slot = math.floor(leasehold.clock.time() / period)
    runs = []

    def job(i):
        def report():
            runs.append((math.floor(leasehold.clock.time() / period), i, leasehold.clock.monotonic()))
        return OncePer(leasehold.blob(container, name), period, report, poll_interval=5, clock=leasehold.clock)

    _run_instances(leasehold, job, count=3, until=lambda: bool(runs), period=period, step=1)
    assert [r[0] for r in runs] == [slot]  # in this period, once
    assert runs[0][2] - crashed_at >= 15  # not before the dead runner's lease ran out




def test_the_guide_initialisation_example_runs(leasehold):
    """The client helpers guide's initialisation example, as written, against the live server."""
    import re

    section = (REPO / "docs" / "guide" / "client-helpers.md").read_text()
    example = re.search(r"```python\n(.*?)```", section, re.S)
    assert example, section
    code = example.group(1)
    code = code.replace('"UseDevelopmentStorage=true"', "CONNECTION_STRING")
    loads = []
    namespace = {"CONNECTION_STRING": leasehold.connection_string, "deployment_id": "deployment-1",
                 "load_initial_data": lambda: loads.append(1)}
    exec(compile(code, "client-helpers.md", "exec"), namespace)
    exec(compile(code, "client-helpers.md", "exec"), namespace)  # a second instance, later: nothing to do
    assert loads == [1]
    assert namespace["blob"].get_blob_properties().metadata["progress"] == "done"
