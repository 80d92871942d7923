"""Leases an operator can watch: new leases, leases that ran out
without a release, breaks and refused renewals by reason, counted once the
lease transaction committed, whichever door asked; the watched leases'
holding and the readiness gauge, read at scrape time. The live server,
driven by the SDK and the JSON API, time moved without sleeping."""

from __future__ import annotations

import math

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobLeaseClient

from tests.serving.test_metrics import bearer, scrape, value

LEASE_A = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
LEASE_B = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"


def delta(before, after, name, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_holder_changes_ran_out_breaks_and_refused_renewals(azure_server, service, clock):
    headers = bearer(superuser=True)
    blob = service.create_container("watched").upload_blob("job", b"x")
    before = scrape(azure_server, headers)

    lease = blob.acquire_lease(lease_duration=15, lease_id=LEASE_A)  # a new lease
    blob.acquire_lease(lease_duration=15, lease_id=LEASE_A)  # the same holder again: no change
    with pytest.raises(HttpResponseError):
        BlobLeaseClient(blob, lease_id=LEASE_B).renew()  # refused: LeaseIdMismatchWithLeaseOperation
    clock.advance(20)  # A stopped renewing: its lease ran out
    with pytest.raises(HttpResponseError):
        BlobLeaseClient(blob, lease_id=LEASE_B).renew()  # refused again (an expired lease is not B's)
    BlobLeaseClient(blob, lease_id=LEASE_B).acquire(lease_duration=15)  # B takes it: ran out + new lease
    api = f"{azure_server}/api/v1/leases"
    assert requests.post(f"{api}/break/devstoreaccount1/watched/job", json={"break_period": 0},
                         headers=headers, timeout=30).status_code == 202
    with pytest.raises(HttpResponseError):
        BlobLeaseClient(blob, lease_id=LEASE_B).renew()  # refused: LeaseIsBrokenAndCannotBeRenewed
    lease.acquire(lease_duration=15)  # A again, after B's lease was broken: a holder change, nothing ran out
    clock.advance(20)
    lease.acquire(lease_duration=15)  # A back after its own lease ran out: ran out, but the same holder
    lease.release()
    after = scrape(azure_server, headers)

    assert delta(before, after, "leasehold_lease_holder_changes_total", resource="blob") == 3  # A, B, A
    assert delta(before, after, "leasehold_leases_ran_out_total", resource="blob") == 2
    assert delta(before, after, "leasehold_lease_breaks_total", resource="blob") == 1
    refused = {labels: n for (name, labels), n in after.items()
               if name == "leasehold_lease_renewals_refused_total" and dict(labels)["resource"] == "blob"}
    got = {dict(labels)["reason"]: n - value(before, "leasehold_lease_renewals_refused_total", **dict(labels))
           for labels, n in refused.items()}
    assert {k: v for k, v in got.items() if v} == {"LeaseIdMismatchWithLeaseOperation": 2,
                                                     "LeaseIsBrokenAndCannotBeRenewed": 1}
    assert delta(before, after, "leasehold_lease_holder_changes_total", resource="container") == 0


@pytest.mark.parametrize("code, reason", [("MissingRequiredHeader", "MissingRequiredHeader"),
                                          ("InvalidHeaderValue", "InvalidHeaderValue"),
                                          ("LeaseAlreadyPresent", "other")])
def test_refused_renewals_keep_to_a_fixed_set_of_reasons(code, reason):
    from leases.operations import metrics
    from leases.domain.errors import LeaseholdError

    counter = metrics.RENEWALS_REFUSED.labels("blob", reason)
    before = counter._value.get()
    metrics.lease_committed("renew", "blob", None, LeaseholdError(code))
    assert counter._value.get() == before + 1
    [family] = metrics.RENEWALS_REFUSED.collect()
    assert not [s for s in family.samples if s.labels["reason"] == code != reason]


def test_a_write_or_a_delete_that_ends_a_lease_that_ran_out_counts_it(azure_server, service, clock):
    """A blob write forgets an expired lease and a delete ends it: no lease
    action will find it expired afterwards, so the write or delete counts it."""
    headers = bearer(superuser=True)
    container = service.create_container("ending")
    written, overwritten, deleted, inside = (container.upload_blob(n, b"x") for n in ("w", "o", "d", "i"))
    for blob in (written, overwritten, deleted, inside):
        blob.acquire_lease(lease_duration=15)
    container.acquire_lease(lease_duration=15)
    before = scrape(azure_server, headers)
    clock.advance(16)  # every holder stopped renewing
    written.set_blob_metadata({"k": "v"})
    overwritten.upload_blob(b"y", overwrite=True)
    for blob in (written, overwritten):  # new leases on available blobs: nothing more ran out
        blob.acquire_lease(lease_duration=15)
    deleted.delete_blob()
    container.delete_container()  # its own lease, and the leases of the blobs it holds
    after = scrape(azure_server, headers)
    assert delta(before, after, "leasehold_leases_ran_out_total", resource="blob") == 4  # w, o, d, i
    assert delta(before, after, "leasehold_leases_ran_out_total", resource="container") == 1


def test_watched_leases_show_their_holding(azure_server, service, clock, settings):
    settings.LEASEHOLD_WATCHED_LEASES = ["devstoreaccount1/leader/lock", "devstoreaccount1/leader",
                                         "devstoreaccount1/nowhere/none"]
    headers = bearer(superuser=True)
    container = service.create_container("leader")
    blob = container.upload_blob("lock", b"")
    held = lambda samples, name: value(samples, "leasehold_watched_lease_held", lease=name)  # noqa: E731
    samples = scrape(azure_server, headers)
    assert [held(samples, n) for n in settings.LEASEHOLD_WATCHED_LEASES] == [0, 0, 0]
    assert ("leasehold_watched_lease_held", (("lease", "devstoreaccount1/nowhere/none"),)) in samples

    lease = blob.acquire_lease(lease_duration=15)
    container.acquire_lease(lease_duration=-1)
    samples = scrape(azure_server, headers)
    assert [held(samples, n) for n in settings.LEASEHOLD_WATCHED_LEASES] == [1, 1, 0]
    clock.advance(16)  # the blob's holder stopped renewing
    assert held(scrape(azure_server, headers), "devstoreaccount1/leader/lock") == 0
    lease.acquire(lease_duration=15)
    requests.post(f"{azure_server}/api/v1/leases/break/devstoreaccount1/leader/lock", json={"break_period": 10},
                  headers=headers, timeout=30)
    assert held(scrape(azure_server, headers), "devstoreaccount1/leader/lock") == 1  # breaking: still held
    clock.advance(11)
    assert held(scrape(azure_server, headers), "devstoreaccount1/leader/lock") == 0


def test_watched_leases_say_how_long_they_have_had_no_holder(azure_server, service, clock, settings):
    """leasehold_watched_lease_unheld_seconds: since the deadline of a lease
    that ran out (also when a write ended it later), since a release or a
    break, since the creation of one never leased; 0 while held, +Inf for
    a name nothing is known of. The clock moves only when the test moves it
    (frozen in between: real seconds would count too)."""
    frozen = clock.freeze()
    created = frozen.microsecond / 1e6  # "never" counts from the creation stamp, in whole seconds as Azure's
    kinds = ("expired", "released", "broken", "written", "never")
    names = {kind: f"devstoreaccount1/unheld/{kind}" for kind in kinds}
    names.update(container="devstoreaccount1/unheld", missing="devstoreaccount1/nowhere")
    settings.LEASEHOLD_WATCHED_LEASES = list(names.values())
    headers = bearer(superuser=True)
    container = service.create_container("unheld")
    blobs = {kind: container.upload_blob(kind, b"") for kind in kinds}
    leases = {kind: blobs[kind].acquire_lease(lease_duration=15) for kind in kinds[:4]}
    container.acquire_lease(lease_duration=-1)

    def unheld() -> dict[str, float]:
        samples = scrape(azure_server, headers)
        return {kind: value(samples, "leasehold_watched_lease_unheld_seconds", lease=name)
                for kind, name in names.items()}

    assert unheld() == {**{kind: 0 for kind in names}, "never": pytest.approx(created), "missing": math.inf}
    clock.advance(10)
    leases["released"].release()
    leases["broken"].break_lease(lease_break_period=0)
    clock.advance(20)  # "expired" and "written" ran out 15 s after they were taken
    blobs["written"].set_blob_metadata({"k": "v"})  # which forgets the lease, not when it ran out
    clock.advance(30)
    assert unheld() == {"expired": 45, "released": 50, "broken": 50, "written": 45,
                        "never": pytest.approx(60 + created), "container": 0, "missing": math.inf}


def test_no_watched_lease_means_no_series(azure_server, transactional_db):
    samples = scrape(azure_server, bearer(superuser=True))
    assert not [key for key in samples if key[0] == "leasehold_watched_lease_held"]
    assert value(samples, "leasehold_ready") == 1


@pytest.mark.parametrize("value_", ["jobs", "a/b,/c", ",".join(f"a/c{n}" for n in range(101))])
def test_a_watched_lease_name_it_cannot_use_stops_the_start(value_):
    import os
    import subprocess
    import sys

    env = {**os.environ, "LEASEHOLD_WATCHED_LEASES": value_, "DJANGO_SETTINGS_MODULE": "config.settings"}
    out = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "LEASEHOLD_WATCHED_LEASES must be" in out.stderr, out.stderr[-500:]
