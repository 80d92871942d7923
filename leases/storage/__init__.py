"""The storage layer: everything that reaches below Django's public API.

    django_internals.py  every Django-internal name the project relies on, imported
                         in this one place, each with what it is used for; the contract
                         test (tests/test_storage_contract.py) fails on a Django upgrade
                         that changes one of them
    statements.py        the lease hot path's SQL, compiled by the ORM once per connection
    transactions.py      the write transaction of a service: group commit on SQLite, a
                         plain transaction.atomic() on PostgreSQL
    ../sqlite_backend/   the SQLite engine (settings' ENGINE): Django's SQLite backend plus
                         a fair writer lock across processes, group commit, checkpoints and
                         the fsync after the writer lock

Nothing here knows about leases: the services (leases.services) decide, this
layer only reads and writes rows. This package imports no model at import
time, so the database engine can import it while Django starts.
"""
