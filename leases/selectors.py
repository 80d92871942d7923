"""Read-only queries (the selectors half of services/selectors). None of
these take a write lock; lease state is derived from the row and the clock."""

from __future__ import annotations

from .models import Blob, Container

MAX_RESULTS = 5000


def list_containers(*, account: str, prefix: str = "", marker: str = "", maxresults: int = MAX_RESULTS):
    """Containers in name order after ``marker``; returns (page, next_marker)."""
    qs = Container.objects.filter(account__name=account).order_by("name")
    if prefix:
        qs = qs.filter(name__startswith=prefix)
    if marker:
        qs = qs.filter(name__gte=marker)
    page = list(qs[: maxresults + 1])
    next_marker = page[maxresults].name if len(page) > maxresults else ""
    return page[:maxresults], next_marker


def list_blobs(*, container: Container, prefix: str = "", delimiter: str = "", marker: str = "",
               maxresults: int = MAX_RESULTS, snapshots: bool = False):
    """Blobs (and, with a delimiter, collapsed BlobPrefixes) in name order.
    Returns (blobs, prefixes, next_marker); content is never loaded."""
    qs = Blob.objects.filter(container=container).defer("content").order_by("name", "snapshot")
    if not snapshots:
        qs = qs.filter(snapshot="")
    if prefix:
        qs = qs.filter(name__startswith=prefix)
    if marker:
        qs = qs.filter(name__gte=marker)
    blobs, prefixes, count = [], [], 0
    for blob in qs.iterator(chunk_size=1000):
        entry = blob.name
        if delimiter:
            cut = blob.name.find(delimiter, len(prefix))
            if cut >= 0:
                entry = blob.name[: cut + len(delimiter)]
                if prefixes and prefixes[-1] == entry:
                    continue
        if count == maxresults:
            return blobs, prefixes, entry
        count += 1
        if entry != blob.name:
            prefixes.append(entry)
        else:
            blob.container = container
            blobs.append(blob)
    return blobs, prefixes, ""
