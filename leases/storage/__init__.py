"""The SQL beneath the services, the one layer that reaches below Django's public ORM: the lease hot
path's statements, the write transaction and its seam to the SQLite engine, lease time read from the
database, large content in chunks (their map: docs/development/architecture.md). Nothing here
decides about leases (the services do; this layer reads and writes rows), and nothing imports a
model at import time, so the database engine can import it while Django starts."""
