"""The ledger: every event carries its hash from the transaction that wrote it, sealed blocks chain,
verify recomputes them and names the first thing that does not match. Each tamper case changes the
database directly in SQL, its append-only triggers dropped first, as someone with the database file
or a superuser would; the digest is taken before, as an auditor keeps it."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from leases import services
from leases.domain import ledger as hashes
from leases.models import LeaseEvent, LedgerBlock, LedgerCheck, history_triggers
from leases.operations import ledger
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
APP = Actor(name=f"account:{ACCOUNT}", via="azure", remote_addr="10.0.0.7")
BOX = ResourceRef(ACCOUNT, "box")


def lease_traffic(clock, rounds: int = 3) -> None:
    for _ in range(rounds):
        lease = services.lease_acquire(ref=BOX, actor=APP, duration=60).lease_id
        for _ in range(3):
            clock.advance(5)
            services.lease_renew(ref=BOX, actor=APP, lease_id=lease)
        with pytest.raises(Exception):
            services.lease_acquire(ref=BOX, actor=APP, duration=60)  # a refusal
        services.lease_release(ref=BOX, actor=APP, lease_id=lease)
        clock.advance(1)


def id_gap(clock) -> int:
    """An id no event has, among sealed ones to be: on PostgreSQL one drawn from the sequence (as a
    rolled-back transaction draws one); on SQLite an event written past it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT nextval(pg_get_serial_sequence('leases_leaseevent', 'id'))")
            return cursor.fetchone()[0]
    gap = LeaseEvent.objects.order_by("-id").values_list("id", flat=True)[0] + 1
    LeaseEvent.objects.bulk_create([LeaseEvent(id=gap + 1, occurred_at=clock.now(), action="break",
                                               outcome="refused", resource_type="container", account=ACCOUNT,
                                               container="box", status_code=409, error_code="LeaseNotPresent")])
    return gap


@pytest.fixture
def history(transactional_db, clock, tmp_path):
    """Two sealed blocks over real lease traffic, a gap in the ids of the second (as a rolled-back
    transaction leaves on PostgreSQL), a few events not sealed yet, and the digest of the newest block."""
    clock.freeze()
    ledger.seal()  # the genesis (the migration's, gone with the previous test's rows)
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    lease_traffic(clock)
    ledger.seal()
    lease_traffic(clock)
    gap = id_gap(clock)
    lease_traffic(clock, rounds=1)
    ledger.seal()
    lease_traffic(clock, rounds=1)  # not sealed
    digest = tmp_path / "digest.json"
    call_command("leasehold_ledger", "digest", "--no-seal", "--to", str(digest))
    yield {"gap": gap, "digest": str(digest), "blocks": list(LedgerBlock.objects.order_by("position"))}
    history_triggers.ensure(connection)


@pytest.fixture
def tamper(history):
    """Run SQL on the database with the history's triggers dropped."""
    import importlib

    with connection.schema_editor() as editor:
        importlib.import_module("leases.migrations.0005_history_append_only").drop_triggers(editor)

    def run(sql: str, params=()):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return run


def verify(*digests: str) -> str:
    """verify's failure (its exit code and message), or "" if it passed."""
    args = [a for d in digests for a in ("--digest", d)]
    try:
        call_command("leasehold_ledger", "verify", *args)
    except CommandError as err:
        return f"{err.returncode}: {err}"
    return ""


def events_of(block: LedgerBlock) -> list[int]:
    return list(LeaseEvent.objects.filter(id__gte=block.first_id, id__lte=block.last_id).order_by("id")
                .values_list("id", flat=True))


def test_each_event_carries_the_hash_of_its_content_from_its_own_transaction(history):
    rows = list(LeaseEvent.objects.order_by("id").values_list("row_hash", *hashes.HASHED))
    assert len(rows) > 30 and all(row[0] for row in rows)
    assert all(row[0] == hashes.event_hash(row[1:]) for row in rows)
    columns = {f.attname for f in LeaseEvent._meta.local_concrete_fields}
    assert columns == {*hashes.HASHED, *hashes.NOT_HASHED}  # a new column must be hashed or said not to be


def test_blocks_chain_and_cover_every_sealed_event(history):
    genesis, first, second = history["blocks"]
    assert (genesis.position, first.position, second.position) == (0, 1, 2)
    assert first.previous_hash == genesis.block_hash and second.previous_hash == first.block_hash
    assert first.first_id == genesis.last_id + 1 and second.first_id == first.last_id + 1
    assert (genesis.events, first.renewals, first.others) == (0, 9, 9)
    assert LeaseEvent.objects.filter(id__gt=second.last_id).count() == 6  # the newest round is not sealed


def test_an_untouched_history_verifies_and_the_run_is_recorded(history):
    assert verify(history["digest"]) == ""
    check = LedgerCheck.objects.get()
    assert check.ok and check.blocks == 3 and check.unsealed == 6 and check.digests == 1
    assert check.events == sum(b.events for b in history["blocks"])


def test_the_digest_names_the_newest_block(history):
    kept = json.loads(open(history["digest"]).read())
    newest = history["blocks"][-1]
    assert (kept["block"], kept["hash"], kept["events_through"]) == (newest.position, newest.block_hash, newest.last_id)
    assert kept["genesis"] == history["blocks"][0].block_hash


def test_a_changed_event_is_named(history, tamper):
    victim = events_of(history["blocks"][1])[4]
    tamper("UPDATE leases_leaseevent SET actor = 'user:mallory' WHERE id = %s", [victim])
    assert verify(history["digest"]).startswith(f"1: verify failed: event {victim} does not match its hash")
    assert not LedgerCheck.objects.get().ok


def test_a_changed_event_with_its_hash_recomputed_is_found_by_its_block(history, tamper):
    victim = events_of(history["blocks"][1])[4]
    tamper("UPDATE leases_leaseevent SET actor = 'user:mallory' WHERE id = %s", [victim])
    row = LeaseEvent.objects.filter(id=victim).values_list(*hashes.HASHED).get()
    tamper("UPDATE leases_leaseevent SET row_hash = %s WHERE id = %s", [hashes.event_hash(row), victim])
    assert "1: verify failed: block 1 " in verify(history["digest"])
    assert "do not match what was sealed" in verify()


def test_a_deleted_event_is_found(history, tamper):
    tamper("DELETE FROM leases_leaseevent WHERE id = %s", [events_of(history["blocks"][2])[3]])
    found = verify(history["digest"])
    assert found.startswith("1: verify failed: block 2 ") and "events were deleted" in found


def test_an_inserted_event_is_found(history, tamper):
    forged = LeaseEvent(occurred_at=history["blocks"][2].sealed_at, action="release", outcome="success",
                        resource_type="container", account=ACCOUNT, container="box", status_code=200,
                        actor="user:mallory")
    row = [getattr(forged, name) for name in hashes.HASHED]
    LeaseEvent.objects.bulk_create([LeaseEvent(id=history["gap"], **dict(zip(hashes.HASHED, row)))])
    found = verify(history["digest"])
    assert found.startswith("1: verify failed: block 2 ") and "events were inserted" in found


def test_reordered_events_are_found(history, tamper):
    first, second = [i for i in events_of(history["blocks"][1])
                     if LeaseEvent.objects.get(id=i).action != "renew"][1:3]
    tamper("UPDATE leases_leaseevent SET id = -1 WHERE id = %s", [first])
    tamper("UPDATE leases_leaseevent SET id = %s WHERE id = %s", [first, second])
    tamper("UPDATE leases_leaseevent SET id = %s WHERE id = -1", [second])
    found = verify(history["digest"])
    assert found.startswith("1: verify failed: block 1 ") and "reordered" in found


def test_the_newest_events_cut_off_are_found(history, tamper):
    tamper("DELETE FROM leases_leaseevent WHERE id >= %s", [history["blocks"][2].first_id])
    assert "1: verify failed: block 2 " in verify()


def test_the_newest_events_cut_off_with_their_blocks_are_found_by_the_digest(history, tamper):
    newest = history["blocks"][2]
    tamper("DELETE FROM leases_leaseevent WHERE id >= %s", [newest.first_id])
    tamper("DELETE FROM leases_ledgerblock WHERE position = %s", [newest.position])
    # Blocks and events consistent in themselves; the tenures those events made are left without them
    # (decision 0041, tenures proved by their events); the digest the auditor kept shows the cut anyway.
    assert "1: verify failed: tenure " in verify()
    found = verify(history["digest"])
    assert found.startswith("2: ") and "names block 2, which this database does not have" in found


def test_a_database_rebuilt_with_valid_hashes_is_found_by_the_digest(history, tamper):
    victim = events_of(history["blocks"][1])[2]
    tamper("UPDATE leases_leaseevent SET actor = 'user:mallory' WHERE id = %s", [victim])
    row = LeaseEvent.objects.filter(id=victim).values_list(*hashes.HASHED).get()
    tamper("UPDATE leases_leaseevent SET row_hash = %s WHERE id = %s", [hashes.event_hash(row), victim])
    tamper("DELETE FROM leases_ledgerblock WHERE position > 0")
    ledger.seal(limit=len(events_of(history["blocks"][1])))  # blocks 1, 2, ... anew over the changed history
    assert verify() == ""  # every hash valid, every block chained
    found = verify(history["digest"])
    assert found.startswith("1: verify failed: block 2 does not match the digest")


@pytest.mark.parametrize("text, said", [("not json", "is not a ledger digest: not JSON"),
                                        ("[1]", "not a JSON object"),
                                        ('{"block": 1}', "no block hash"),
                                        ('{"block": 99, "hash": "' + "0" * 64 + '"}', "names block 99")])
def test_a_digest_that_cannot_be_checked_is_a_clear_error(history, tmp_path, text, said):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    found = verify(str(bad))
    assert found.startswith("2: ") and said in found
    assert not LedgerCheck.objects.exists()  # nothing was verified


def test_an_event_still_in_flight_holds_sealing_back_on_postgresql(transactional_db, monkeypatch):
    """A sequence hands out ids before commit: while a transaction holds a drawn id, a later event
    committed with a higher id is not settled, so no block can cover the gap it would fill."""
    import threading

    from django.db import transaction

    from leases.storage import ledger_rows

    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer: nothing commits out of id order")
    monkeypatch.setattr(ledger_rows, "SETTLE_WAIT", 0.5)
    drawn, commit = threading.Event(), threading.Event()
    ids = []

    def in_flight():
        try:
            with transaction.atomic():
                ids.append(LeaseEvent.objects.create(**EVENT).id)
                drawn.set()
                commit.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=in_flight)
    thread.start()
    try:
        assert drawn.wait(30)
        later = LeaseEvent.objects.create(**EVENT).id
        assert later > ids[0]
        assert ledger_rows.settled_through(connection) is None  # the lower id may still commit
    finally:
        commit.set()
        thread.join()
    assert ledger_rows.settled_through(connection) >= later


EVENT = dict(occurred_at=hashes.EPOCH, action="acquire", outcome="refused", resource_type="container",
             account=ACCOUNT, container="box", status_code=409, error_code="LeaseAlreadyPresent")
