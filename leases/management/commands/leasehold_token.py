"""API tokens for the JSON API, managed from the shell: ``manage.py leasehold_token create --user
alice --name deployer [--expires-in-days 90]`` (the token is printed once), ``manage.py
leasehold_token list`` and ``manage.py leasehold_token revoke deployer``."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from leases.domain import clock
from leases.models.tokens import ApiToken


class Command(BaseCommand):
    help = "Create, list or revoke API tokens for the JSON API."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        create = commands.add_parser("create", help="Create a token and print it (it is not shown again).")
        create.add_argument("--user", required=True, help="The user whose permissions the token carries.")
        create.add_argument("--name", required=True,
                            help='Unique; the lease history names the token "token:<name>".')
        create.add_argument("--expires-in-days", type=int, default=None, help="Default: never expires.")
        commands.add_parser("list", help="List tokens (never their secrets).")
        revoke = commands.add_parser("revoke", help="Revoke a token; its name stays taken.")
        revoke.add_argument("name")

    def handle(self, *args, command, **options):
        getattr(self, f"handle_{command}")(**options)

    def handle_create(self, *, user, name, expires_in_days, **options):
        owner = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: user}).first()
        if owner is None:
            raise CommandError(f"no user {user!r}")
        if expires_in_days is not None and expires_in_days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        expires_at = clock.now() + timedelta(days=expires_in_days) if expires_in_days else None
        try:
            _, raw = ApiToken.issue(user=owner, name=name, expires_at=expires_at)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        self.stdout.write(raw)

    def handle_list(self, **options):
        now = clock.now()
        for token in ApiToken.objects.select_related("user"):
            if token.revoked_at:
                status = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}"
            elif token.expires_at and token.expires_at <= now:
                status = f"expired {token.expires_at:%Y-%m-%d %H:%M}"
            elif token.expires_at:
                status = f"expires {token.expires_at:%Y-%m-%d %H:%M}"
            else:
                status = "active"
            self.stdout.write(f"{token.name}\t{token.user.get_username()}\t{token.key_prefix}...\t{status}")

    def handle_revoke(self, *, name, **options):
        token = ApiToken.objects.filter(name=name).first()
        if token is None:
            raise CommandError(f"no token {name!r}")
        token.revoke()
        self.stdout.write(f"revoked {name}")
