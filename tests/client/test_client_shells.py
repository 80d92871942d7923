"""The client's sync and asyncio modules are thin shells over one core
(leasehold_client/core.py): no run of RUN or more non-blank lines (compared
stripped) of an asyncio module also appears in a sync one, so that a fix to
what they share is made once. Read from the source; nothing is imported."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "client" / "leasehold_client"
RUN = 6


def shared_runs(a: str, b: str, run: int = RUN) -> list[list[str]]:
    """The runs of ``run`` consecutive non-blank lines (stripped) that occur in both texts."""
    lines_a = [line.strip() for line in a.splitlines() if line.strip()]
    lines_b = [line.strip() for line in b.splitlines() if line.strip()]
    windows_b = {tuple(lines_b[i:i + run]) for i in range(len(lines_b) - run + 1)}
    return [lines_a[i:i + run] for i in range(len(lines_a) - run + 1) if tuple(lines_a[i:i + run]) in windows_b]


def test_the_sync_and_asyncio_modules_share_no_run_of_six_lines():
    sync_modules = sorted(PACKAGE.glob("*.py"))
    aio_modules = sorted((PACKAGE / "aio").glob("*.py"))
    assert len(sync_modules) >= 4 and len(aio_modules) >= 4
    found = []
    for aio in aio_modules:
        for sync in sync_modules:
            for run in shared_runs(aio.read_text(), sync.read_text()):
                found.append(f"{aio.relative_to(PACKAGE)} and {sync.relative_to(PACKAGE)}:\n    " + "\n    ".join(run))
    assert not found, ("the same lines in a sync and an asyncio module: move what they share into "
                       "leasehold_client/core.py (decisions) or the sync module's shared base class\n"
                       + "\n".join(found[:5]))


def test_a_shared_run_is_found_and_a_shorter_one_is_not():
    shared = "\n".join(f"x{i} = {i}" for i in range(RUN))
    sync = f"def f():\n    {shared.replace(chr(10), chr(10) + '    ')}\n    return 1\n"
    aio = f"async def f():\n\n{shared}\n\n    return 2\n"
    assert shared_runs(aio, sync) == [shared.splitlines()]
    shorter = "\n".join(shared.splitlines()[:RUN - 1])
    assert shared_runs(f"async def f():\n{shorter}\n", f"def f():\n{shorter}\n") == []
