"""manage.py leasehold_ledger (also ``leasehold ledger``), the ledger an auditor checks
(docs/guide/auditing.md): ``digest`` seals what has settled and prints the newest sealed block as one
JSON object (``--to`` a file, a directory or an Azure Blob container URL with a SAS; ``--every``
again and again); ``verify [--digest FILE ...]`` recomputes everything retained and exits 0, 1
naming the first event or block that does not match, or 2 for a digest it cannot check, each run
recorded for the admin's dashboard; ``seal`` seals now (the server does every few seconds)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from leases.operations import duties, ledger, ledger_publish, ledger_verify


class Command(BaseCommand):
    help = "The lease history's ledger: print or publish a digest, verify the history, seal it."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{digest,verify,seal}")
        digest = actions.add_parser("digest", help="print the newest sealed block's digest (JSON)")
        digest.add_argument("--to", action="append", default=[], metavar="TARGET",
                            help="also write it to a FILE.json, a DIRECTORY (a file per block) or an Azure "
                                 "Blob container URL with a SAS (a blob per block); repeatable")
        digest.add_argument("--every", type=float, metavar="SECONDS",
                            help="go on: a digest each time, every SECONDS, until stopped")
        digest.add_argument("--no-seal", action="store_true", help="do not seal first")
        verify = actions.add_parser("verify", help="recompute every retained event and block")
        verify.add_argument("--digest", action="append", default=[], metavar="FILE",
                            help="a digest kept earlier, to hold its block to; repeatable ('-': standard input)")
        actions.add_parser("seal", help="seal the events that have settled")

    def handle(self, *args, action, **options):
        if action == "digest":
            return self.digest(options["to"], options["every"], seal=not options["no_seal"])
        if action == "verify":
            return self.verify(options["digest"])
        self.stdout.write(f"Sealed {_seal()} blocks.")

    def digest(self, targets: list[str], every: float | None, *, seal: bool) -> None:
        if every is not None and every <= 0:
            raise CommandError("--every takes a number of seconds above 0")
        for target in targets:
            try:
                ledger_publish.check_target(target)
            except ValueError as err:
                raise CommandError(str(err)) from None
        last = None
        while True:
            if seal:
                _seal()
            found = ledger.digest()
            text = json.dumps(found, sort_keys=True)
            if every is None or found != last:
                self.stdout.write(text)
                for target in targets:
                    try:
                        self.stderr.write(f"digest of block {found['block']} written to "
                                          f"{ledger_publish.publish(target, found, text)}")
                    except OSError as err:
                        if every is None:
                            raise CommandError(f"could not write the digest to {target}: {err}") from None
                        self.stderr.write(f"could not write the digest to {target}: {err}; trying again")
                        found = {}  # try this one again next round
                last = found
            if every is None:
                return
            time.sleep(every)

    def verify(self, files: list[str]) -> None:
        texts = []
        for name in files:
            try:
                texts.append((name, self.stdin_text() if name == "-" else Path(name).read_text()))
            except (OSError, UnicodeDecodeError) as err:
                raise CommandError(f"cannot read the digest {name}: {err}", returncode=2) from None
        try:
            digests = ledger_verify.load_digests(texts)
        except ledger_verify.DigestError as err:
            raise CommandError(str(err), returncode=2) from None
        report = ledger_verify.verify(digests)
        ledger_verify.record(report)
        summary = (f"{report.blocks} blocks, {report.events} sealed events and {report.unsealed} not yet sealed "
                   f"recomputed; {report.tenures} tenures held to their events ({report.tenures_unproven} older "
                   f"than the events kept); {report.digests} digests held to their blocks")
        if not report.ok:
            raise CommandError(f"verify failed: {report.problem} ({summary} before it)", returncode=1)
        self.stdout.write(f"The ledger verifies: {summary}.")

    @staticmethod
    def stdin_text() -> str:
        import sys

        return sys.stdin.read()


def _seal() -> int:
    """Seal under the sealer's duty lock (waiting for a server's sealer to finish its round)."""
    lock = duties.DutyLock(key=duties.SEAL_LOCK_KEY, duty="ledger")
    lock.acquire(wait=30)
    try:
        return ledger.seal()
    finally:
        lock.release()
