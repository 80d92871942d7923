"""Two server instances (python -m config.serve) on one PostgreSQL database,
racing each other the way a scaled-out deployment does: a Put Blob to one
instance against an acquire to the other must never lose the acquired lease,
and two creates of one new name must both succeed (the later write wins),
never 5xx. Each trial fires both requests at once from two threads; many
trials run in parallel."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import azure_raw
from tests.conftest import CONNECTION
from tests.server_process import Instance, prepare
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]

# The bugs these guard showed in most trials (a lost lease, a 500).
LEASE_TRIALS = 200
CREATE_TRIALS = 30
PARALLEL = 16  # trials in flight at once


@pytest.fixture(scope="module")
def two_instances(postgres, tmp_path_factory):
    """Two instances on one freshly migrated PostgreSQL database."""
    tmp = tmp_path_factory.mktemp("pgrace")
    database = postgres()
    prepare(database, tmp)
    instances = [Instance(database, tmp, "a"), Instance(database, tmp, "b")]
    try:
        for instance in instances:
            instance.start()
        yield instances
    finally:
        for instance in instances:
            instance.stop()
    for instance in instances:
        log = instance.output()
        assert "Traceback" not in log and "Internal Server Error" not in log, log[-3000:]


def _at_once(*calls):
    """Run the calls in threads released together; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _sdk(instance):
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(
        CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=instance.url), retry_total=0)


def _put(base, path, body=b"x" * 1024, **headers):
    return azure_raw.signed("PUT", base, path, body=body, headers={"x-ms-blob-type": "BlockBlob", **headers})


def test_put_blob_racing_an_acquire_never_loses_the_lease(two_instances):
    """A broken lease; Put Blob (no lease id) to A while acquire(60, X) goes
    to B. Either the put ends the broken lease first and X acquires after it,
    or X acquires first and the put is refused 412: whenever X got 201, X
    holds the lease afterwards (its renew succeeds)."""
    a, b = two_instances
    assert azure_raw.signed("PUT", a.url, "/devstoreaccount1/race?restype=container").status_code == 201

    def trial(n: int):
        path = f"/devstoreaccount1/race/blob-{n}"
        assert _put(a.url, path).status_code == 201
        assert azure_raw.lease(b.url, path, "acquire", duration=15).status_code == 201
        assert azure_raw.lease(a.url, path, "break", break_period=0).status_code == 202
        x = str(uuid.uuid4())
        put, acquire = _at_once(lambda: _put(a.url, path),
                                lambda: azure_raw.lease(b.url, path, "acquire", duration=60, proposed_lease_id=x))
        return f"blob-{n}", (getattr(put, "status_code", put), getattr(acquire, "status_code", acquire))

    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = dict(pool.map(trial, range(LEASE_TRIALS)))
    unexpected = {name: s for name, s in outcomes.items() if s not in ((201, 201), (412, 201))}
    assert not unexpected, (len(unexpected), list(unexpected.items())[:5])
    # Every acquire got 201 and nobody else acquires these blobs, so each must
    # be leased now (by X; one listing instead of a renew per blob).
    states = {b.name: b.lease.state for b in _sdk(a).get_container_client("race").list_blobs()}
    lost = sorted(name for name in outcomes if states.get(name) != "leased")
    assert not lost, (len(lost), lost[:5])


def test_concurrent_creates_of_one_name_both_succeed(two_instances):
    """Two Put Blobs of one new name, one to each instance, at once: both 201
    (as on Azure, the later write wins), never a 5xx; the blob holds one of
    the two bodies, whole."""
    a, b = two_instances
    assert azure_raw.signed("PUT", a.url, "/devstoreaccount1/creates?restype=container").status_code == 201

    def trial(n: int):
        path = f"/devstoreaccount1/creates/new-{n}"
        bodies = (b"a" * 2048, b"b" * 4096)
        first, second = _at_once(lambda: _put(a.url, path, body=bodies[0]), lambda: _put(b.url, path, body=bodies[1]))
        return (getattr(first, "status_code", first), getattr(second, "status_code", second))

    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(pool.map(trial, range(CREATE_TRIALS)))
    failed = [o for o in outcomes if o != (201, 201)]
    assert not failed, (len(failed), failed[:5])
    # one blob per name, holding one of the two bodies whole (the sizes differ)
    sizes = [b.size for b in _sdk(b).get_container_client("creates").list_blobs()]
    assert len(sizes) == CREATE_TRIALS and set(sizes) <= {2048, 4096}, sorted(set(sizes))
