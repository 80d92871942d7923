"""The SQL beneath the services: what reaches below Django's public ORM.

    dbclock.py           lease time: the database's clock on PostgreSQL (read in the
                         statement that locks the row), the machine's on SQLite
    statements.py        the lease hot path's SQL, compiled by the ORM once per connection
    transactions.py      the write transaction of a service: group commit on SQLite, a
                         plain transaction.atomic() on PostgreSQL
    django_internals.py  the ORM internals statements.py uses, imported in this one place;
                         the contract test (tests/storage/test_storage_contract.py) fails on
                         a Django upgrade that changes one of them

The database engines themselves are a package of their own (engines/).
Nothing here decides about leases: the services (leases.services) decide,
this layer reads and writes rows. It imports no model at import time, so
the database engine can import it while Django starts.
"""
