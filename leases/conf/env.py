"""Parsing LEASEHOLD_* environment variables: one small typed helper per kind of value, so every
variable is parsed the same way and a bad value stops the server at start with a message naming the
variable, what it must be and what it was. leases/conf/__init__.py reads every variable through
these, once. Rules common to all: an unset variable, or one set to the empty string, takes the
default (``env_str(..., allow_empty=True)`` is the exception, for a variable where empty means
something); surrounding white space is ignored for numbers, booleans and choices. No Django here
beyond its exception class. ``environ`` (default: os.environ) lets a caller read from a mapping of
its own."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import overload

from django.core.exceptions import ImproperlyConfigured

INTEGER = re.compile(r"[+-]?[0-9]+\Z")
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 86400}


class SettingError(ImproperlyConfigured, ValueError):
    """A LEASEHOLD_* variable with a value it cannot have. Both an
    ImproperlyConfigured (what Django reports) and a ValueError."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return None if value is None or value == "" else value


def _refuse(name: str, expected: str, value: str):
    return SettingError(f"{name} must be {expected}, not {value!r}")


@overload
def env_str(name: str, default: str, *, allow_empty: bool = False, pattern: str | None = None,
            expected: str = "", environ: Mapping[str, str] | None = None) -> str: ...
@overload
def env_str(name: str, default: None = None, *, allow_empty: bool = False, pattern: str | None = None,
            expected: str = "", environ: Mapping[str, str] | None = None) -> str | None: ...
def env_str(name: str, default: str | None = None, *, allow_empty: bool = False, pattern: str | None = None,
            expected: str = "", environ: Mapping[str, str] | None = None) -> str | None:
    """The value as set; ``default`` if unset (or empty, unless ``allow_empty``).
    With ``pattern`` (a regular expression), a non-empty value must match it
    whole; ``expected`` says in words what it must be."""
    value = (os.environ if environ is None else environ).get(name)
    if value is None or (value == "" and not allow_empty):
        return default
    if pattern is not None and value and not re.fullmatch(pattern, value):
        raise _refuse(name, expected or f"of the form {pattern}", value)
    return value


def env_int(name: str, default: int, *, at_least: int | None = None,
            environ: Mapping[str, str] | None = None) -> int:
    """A whole number (ASCII digits, optionally signed), ``>= at_least``."""
    raw = _raw(name, environ)
    if raw is None:
        return default
    bound = f" >= {at_least}" if at_least is not None else ""
    text = raw.strip()
    if not INTEGER.match(text) or (at_least is not None and int(text) < at_least):
        raise _refuse(name, f"a whole number{bound}", raw)
    return int(text)


def env_float(name: str, default: float, *, at_least: float | None = None, above: float | None = None,
              environ: Mapping[str, str] | None = None) -> float:
    """A finite number, ``>= at_least`` and ``> above`` when given."""
    raw = _raw(name, environ)
    if raw is None:
        return default
    bounds = "".join([f" >= {at_least:g}" if at_least is not None else "",
                      f" > {above:g}" if above is not None else ""])
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if (not math.isfinite(value) or (at_least is not None and value < at_least)
            or (above is not None and value <= above)):
        raise _refuse(name, f"a number{bounds}", raw)
    return value


def env_bool(name: str, default: bool = False, *, environ: Mapping[str, str] | None = None) -> bool:
    """1, true, yes, on / 0, false, no, off, in any case."""
    raw = _raw(name, environ)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise _refuse(name, "1, true, yes or on, or 0, false, no or off", raw)


def _alternatives(choices: Sequence[str]) -> str:
    if len(choices) == 2:
        return f"{choices[0]} or {choices[1]}"
    return "one of " + ", ".join(choices)


def env_choice(name: str, default: str, choices: Sequence[str], *,
               environ: Mapping[str, str] | None = None) -> str:
    """One of ``choices``, in any case; answered as spelt in ``choices``."""
    raw = _raw(name, environ)
    if raw is None:
        return default
    found = {choice.lower(): choice for choice in choices}.get(raw.strip().lower())
    if found is None:
        raise _refuse(name, _alternatives(choices), raw)
    return found


def env_log_level(environ: Mapping[str, str] | None = None) -> str:
    """LEASEHOLD_LOG_LEVEL, lower-case: Django's root logger (settings) and
    the server's own log (serving/server.py) both take it from here."""
    return env_choice("LEASEHOLD_LOG_LEVEL", "warning", LOG_LEVELS, environ=environ)


def parse_duration(value: str | None, name: str) -> timedelta | None:
    """``"7d"`` -> 7 days (a bare number is days); ``""``, ``"forever"``,
    ``"none"`` or None -> None (keep for ever)."""
    if value is None or value.strip().lower() in ("", "forever", "none"):
        return None
    match = DURATION.match(value)
    if not match:
        raise SettingError(f"{name} must be a duration such as 30d, 12h, 90m or 60s, or 'forever'; got {value!r}")
    return timedelta(seconds=float(match[1]) * UNIT_SECONDS[match[2]])


def env_duration(name: str, *, environ: Mapping[str, str] | None = None,
                 default: str | None = None) -> timedelta | None:
    """A duration (``parse_duration``); unset: ``default`` (None: for ever)."""
    return parse_duration(_raw(name, environ) or default, name)
