"""Writing a ledger digest where an auditor keeps it: a file (replaced), a directory (a file per
block), or an Azure Blob Storage container named by a URL with a SAS that allows writing blobs (a
block blob per block: in an immutable container, as Azure SQL's ledger keeps its digests, nobody
can change one once written)."""

from __future__ import annotations

import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

TIMEOUT = 30.0


def name_of(digest: dict) -> str:
    return f"leasehold-digest-{digest['block']:012d}.json"


def _is_url(target: str) -> bool:
    return target.startswith(("https://", "http://"))


def check_target(target: str) -> None:
    """ValueError for a target that could never be written."""
    if _is_url(target):
        url = urllib.parse.urlsplit(target)
        if "sig=" not in url.query:
            raise ValueError(f"{target}: an Azure Blob container URL needs a SAS (…?sv=…&sig=…)")
        if url.path.strip("/").count("/") > 1 or not url.path.strip("/"):
            raise ValueError(f"{target}: name a container (https://ACCOUNT.blob…/CONTAINER?SAS), not a blob")
        return
    path = Path(target)
    parent = path if path.is_dir() else path.parent
    if not parent.is_dir():
        raise ValueError(f"{target}: no such directory {parent}")


def publish(target: str, digest: dict, text: str) -> str:
    """Write ``text`` (the digest ``digest``) to ``target``; where it went. OSError if it could not."""
    if _is_url(target):
        return _put_blob(target, name_of(digest), text.encode())
    path = Path(target)
    if path.is_dir():
        path = path / name_of(digest)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".digest-")
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return str(path)


def _put_blob(container_url: str, name: str, body: bytes) -> str:
    url = urllib.parse.urlsplit(container_url)
    path = url.path.rstrip("/") + "/" + urllib.parse.quote(name)
    where = urllib.parse.urlunsplit((url.scheme, url.netloc, path, "", ""))
    request = urllib.request.Request(f"{where}?{url.query}", data=body, method="PUT", headers={
        "x-ms-blob-type": "BlockBlob", "x-ms-version": "2021-08-06", "Content-Type": "application/json",
        # Never over a digest already kept: a second write of the same block is refused, not replaced.
        "If-None-Match": "*"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            answer.read()
    except urllib.error.HTTPError as err:
        if err.code == 409:  # BlobAlreadyExists: this block's digest is kept already
            return f"{where} (kept already)"
        raise OSError(f"{err.code} {err.reason}: {err.read()[:300]!r}") from None
    return where
