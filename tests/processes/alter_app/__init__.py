"""A stand-in for a later version's migration (tests/processes/test_pg_instances.py):
an ALTER TABLE of the blob table, applied while servers serve leases on it."""
