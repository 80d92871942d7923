"""The ``leasehold`` command of an installed server (``pip install .``), so that a server runs from
any directory without a checkout: ``leasehold [--data-dir DIR] serve`` migrates, collects static
files, sets up and serves; ``migrate`` brings the schema up to date, ``setup`` makes the development
account and the admin user, and any other name runs that management command (leasehold_prune,
createsuperuser, ...). The data directory (the SQLite file, the secret key, collected static files)
is ``--data-dir``, else ``LEASEHOLD_VAR_DIR``, else ``var`` in the current directory; every other
setting is a LEASEHOLD_* variable, as for ``make run`` (docs/reference/configuration.md,
docs/guide/install.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

OWN = {"serve": "migrate, collect static files, set up the development account, then serve (as `make run`)",
       "migrate": "bring the database's schema up to date",
       "setup": "create the development account and the admin user (manage.py leasehold_setup)",
       "ledger": "the history's ledger: digest, verify, seal (manage.py leasehold_ledger)"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="leasehold", add_help=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Leasehold: a persistent lease store with Azure Blob Storage's lease semantics.")
    parser.add_argument("--data-dir", metavar="DIR",
                        help="where the database file, the secret key and static files live "
                             "(default: $LEASEHOLD_VAR_DIR, else ./var)")
    parser.add_argument("-h", "--help", action="store_true", help="show this help and every command")
    parser.add_argument("command", nargs="?")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _help(parser: argparse.ArgumentParser) -> None:
    from django.core.management import get_commands

    parser.print_help()
    print("\ncommands:")
    for name, what in OWN.items():
        print(f"  {name:<24} {what}")
    print("\nand every management command:")
    others = sorted(name for name in get_commands() if name not in OWN)
    for start in range(0, len(others), 4):
        print("  " + "".join(f"{name:<26}" for name in others[start:start + 4]).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if options.data_dir:
        os.environ["LEASEHOLD_VAR_DIR"] = str(Path(options.data_dir).resolve())
    else:
        os.environ.setdefault("LEASEHOLD_VAR_DIR", str(Path.cwd() / "var"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import call_command, execute_from_command_line

    from leases.conf.env import SettingError

    try:
        import django

        django.setup()
    except SettingError as err:
        print(f"leasehold: {err}", file=sys.stderr)
        return 2
    if options.help or options.command in (None, "help"):
        _help(parser)
        return 0 if options.help or options.command == "help" else 2
    if options.command == "serve":
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        call_command("leasehold_setup")
        from serving import server

        server.main()
        return 0
    command = {"setup": "leasehold_setup", "ledger": "leasehold_ledger"}.get(options.command, options.command)
    execute_from_command_line(["leasehold", command, *options.args])
    return 0


if __name__ == "__main__":
    sys.exit(main())
