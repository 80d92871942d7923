"""Leasehold's two Django database backends (engines/README.md): SQLite
with a fair writer lock across processes, group commit and durable answers
(``engines.sqlite``), and PostgreSQL with every call bounded and failover
without restarts (``engines.postgres``). They import nothing of Leasehold;
what they report goes through ``engines.hooks``."""
