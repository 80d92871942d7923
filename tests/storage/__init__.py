"""Tests of the storage layer (leases/sql and the engines, engines/)."""

import fcntl
import os

from django.db import connection

from engines.sqlite.writer_lock import writer_lock_path


def writer_lock_file() -> str:
    """The writer lock's file beside the test database (a file, not in memory)."""
    path = writer_lock_path(str(connection.settings_dict["NAME"]))
    assert path is not None, "an in-memory database has no writer lock"
    return path


def lock_is_free(lock_file: str) -> bool:
    """Whether another open file description could take the writer lock
    (``<db>.writer-lock``) now; if it could, it gives it back at once. The
    flock() the backend takes is real, so this sees it from any process."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing the description lets go of a lock taken above
