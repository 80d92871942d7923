"""Request ids (x-ms-request-id and the history's request_id): GUIDs of UUID version 7, so that
ids made close in time sort close together in the history's request id index."""

import time
import uuid
from types import SimpleNamespace

from leases.domain import guids


def test_a_request_id_is_a_version_7_guid_in_the_d_format():
    value = guids.request_id()
    assert guids.SPELLING.match(value) and len(value) == 36 and value == value.lower()
    parsed = uuid.UUID(value)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    assert abs(int(value.replace("-", "")[:12], 16) - time.time() * 1000) < 5_000  # its first 48 bits: now, in ms


def test_request_ids_sort_by_the_millisecond_they_were_made_in(monkeypatch):
    clock = iter(ms * 1_000_000 for ms in (1_795_000_000_000, 1_795_000_000_001, 1_795_000_000_255,
                                           1_795_000_000_256, 1_795_000_065_536))
    monkeypatch.setattr(guids, "time", SimpleNamespace(time_ns=lambda: next(clock)))
    made = [guids.request_id() for _ in range(5)]
    assert sorted(made) == made and len(set(made)) == 5


def test_request_ids_are_unique_within_a_millisecond():
    many = [guids.request_id() for _ in range(20_000)]
    assert len(set(many)) == len(many)
    assert len({value[:13] for value in many}) < len(many)  # many shared their millisecond
