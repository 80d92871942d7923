"""User delegation keys from the shell: ``manage.py leasehold_delegation_keys list [ACCOUNT]`` (who
asked, when, valid until, revoked; never a key's value) and ``manage.py leasehold_delegation_keys
revoke ACCOUNT``, Azure's Revoke User Delegation Keys: every key of the account issued so far stops
working, and every SAS signed with one is refused from the next request on."""

from django.core.management.base import BaseCommand, CommandError

from leases.auth import delegation
from leases.models import Account, UserDelegationKey


class Command(BaseCommand):
    help = "List or revoke an account's user delegation keys."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        listing = commands.add_parser("list", help="List the keys (never their values).")
        listing.add_argument("account", nargs="?")
        revoke = commands.add_parser("revoke", help="Revoke every key of the account.")
        revoke.add_argument("account")

    def handle(self, *args, command, account=None, **options):
        if account is not None and not Account.objects.filter(name=account).exists():
            raise CommandError(f"no account {account!r}")
        if command == "revoke":
            self.stdout.write(f"revoked {delegation.revoke(account)} user delegation key(s) of {account}")
            return
        rows = UserDelegationKey.objects.select_related("account")
        for row in rows.filter(account__name=account) if account else rows:
            status = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
            self.stdout.write(f"{row.account.name}\t{row.actor}\t{row.start:%Y-%m-%dT%H:%M:%SZ}\t"
                              f"{row.expiry:%Y-%m-%dT%H:%M:%SZ}\t{status}")
