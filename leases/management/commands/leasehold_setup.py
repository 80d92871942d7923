"""Make a fresh database usable: storage accounts from the settings, and a
first admin account whose password is set by the user or shown once."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from engines import postgres
from leases import conf
from leases.services import account_ensure

DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def parse_accounts(spec: str) -> list[tuple[str, str, str]]:
    """"name:key[:key2];name2:key" -> [(name, key1, key2)]."""
    accounts = []
    for item in filter(None, (part.strip() for part in spec.split(";"))):
        name, _, keys = item.partition(":")
        key1, _, key2 = keys.partition(":")
        if not name or not key1:
            raise CommandError(f"LEASEHOLD_ACCOUNTS entry {item!r} is not name:key[:key2]")
        accounts.append((name, key1, key2))
    return accounts


class Command(BaseCommand):
    help = "Create the storage accounts from the settings and a first admin user."

    def add_arguments(self, parser):
        parser.add_argument("--admin-user", default="admin")
        parser.add_argument("--admin-password", default=None,
                            help="Password for a new admin user (default: LEASEHOLD_ADMIN_PASSWORD or generated).")
        parser.add_argument("--reset-admin-password", action="store_true",
                            help="Give --admin-user a new password (--admin-password, LEASEHOLD_ADMIN_PASSWORD "
                                 "or generated and shown once), making it an active superuser; for a lost password.")

    @staticmethod
    def _analyze():
        """Refresh SQLite's planner statistics at every start: without them
        it plans admin filters over 100k blobs as full sorts (see
        bench/admin_pages.py). analysis_limit keeps it fast on big files."""
        from django.db import connection

        if not postgres.in_use(connection):
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA analysis_limit=1000")
                cursor.execute("ANALYZE")

    def handle(self, *args, admin_user, admin_password, reset_admin_password=False, **options):
        accounts = parse_accounts(settings.LEASEHOLD_ACCOUNTS)
        if settings.LEASEHOLD_DEV_ACCOUNT and DEV_ACCOUNT not in {a[0] for a in accounts}:
            accounts.insert(0, (DEV_ACCOUNT, DEV_KEY, ""))
        for name, key1, key2 in accounts:
            try:
                account_ensure(name=name, key1=key1, key2=key2)
            except ValueError as exc:
                raise CommandError(f"account {name}: key is not base64 ({exc})") from None
            self.stdout.write(f"storage account: {name}")

        self._analyze()
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists() and not reset_admin_password:
            return
        password = admin_password or conf.current().admin_password
        shown = password is None
        password = password or secrets.token_urlsafe(12)
        user = User.objects.filter(username=admin_user).first()
        if user is None:
            User.objects.create_superuser(username=admin_user, email="", password=password)
            done = "Admin account created"
        else:
            user.set_password(password)
            user.is_active = user.is_staff = user.is_superuser = True
            user.save()
            done = "Admin password reset"
        if shown:
            self.stdout.write(self.style.WARNING(
                f"\n{done}. User: {admin_user}  Password: {password}\n"
                "This password is shown only once; change it in the admin.\n"))
        else:
            self.stdout.write(f"{done}. User: {admin_user}")
