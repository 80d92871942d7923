"""Services, through which every change to containers, blobs and leases goes, so that every door
(the Azure endpoint, the JSON API, the admin, management commands) applies the same rules: each
opens one short write transaction (BEGIN IMMEDIATE on SQLite, a row lock on PostgreSQL), loads the
row, asks the pure state machine, saves, and appends the history event in the same transaction; a
refused lease action is recorded too (the refusal event commits, then the error is raised to the
caller). Functions take keyword-only arguments; the map of the modules is in
docs/development/architecture.md."""

from leases.domain import clock, machine  # noqa: F401  (callers and tests reach them as services.clock, ...)
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef
from leases.services.lease_actions import (REFUSAL_DETAIL_CODES, SUCCESS_STATUS, LeaseResult, lease_acquire, lease_action,
                            LeaseWrite, lease_actions_together,
                            lease_break, lease_change, lease_release, lease_renew)
from leases.services.queued_calls import QueuedLeaseCall
from leases.services.lease_rows import KeyGone
from leases.services.history import history_tamper_refused
from leases.services.containers import (CONTAINER_NAME_CHARS, account_ensure, container_create, container_delete, container_read,
                         container_set_metadata, validate_container_name)
from leases.services.access_policies import SignedIdentifier, container_get_acl, container_set_acl, stored_policy
from leases.services.blobs import blob_delete, blob_put, blob_read, blob_set_metadata, blob_snapshot, validate_blob_name
from leases.services.blocks import MAX_COMMITTED, MAX_UNCOMMITTED, block_list_get, block_list_put, block_put
from leases.services.copies import blob_copy, copy_abort
from leases.services.appends import append_blob_create, block_append, committed_block_count

__all__ = [
    "Conditions", "LeaseholdError", "NO_CONDITIONS", "Actor", "ResourceRef", "LeaseResult", "SUCCESS_STATUS", "REFUSAL_DETAIL_CODES",
    "lease_acquire", "lease_renew", "lease_change", "lease_release", "lease_break", "lease_action",
    "LeaseWrite", "QueuedLeaseCall", "KeyGone", "lease_actions_together",
    "history_tamper_refused", "account_ensure", "CONTAINER_NAME_CHARS", "validate_container_name",
    "container_create", "container_delete", "container_read", "container_set_metadata", "validate_blob_name",
    "blob_put", "blob_read", "blob_set_metadata", "blob_delete", "blob_snapshot",
    "SignedIdentifier", "container_get_acl", "container_set_acl", "stored_policy",
    "MAX_COMMITTED", "MAX_UNCOMMITTED", "block_put", "block_list_put", "block_list_get", "blob_copy", "copy_abort",
    "append_blob_create", "block_append", "committed_block_count",
]
