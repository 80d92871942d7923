"""Forms of the lease confirmations and the "who held it at T" lookup."""

from __future__ import annotations

import zoneinfo

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from leases.domain import fingerprints, machine


class SeenGenerationsField(forms.Field):
    """``pk:generation`` pairs of the leases a confirmation page showed, as
    ``{pk: generation}``. A lease whose generation moved on since is a new
    lease the operator has not reviewed, and is left alone."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value):
        try:
            seen = {int(pk): int(gen) for pk, _, gen in (item.partition(":") for item in value or ())}
        except ValueError:
            seen = None
        # Keys and generations are the database's 64-bit integers: check before any query uses them.
        if seen is None or any(not (0 <= n < 2**63) for pair in seen.items() for n in pair):
            raise ValidationError("The confirmation page was altered; start again.")
        return seen


class BreakForm(forms.Form):
    NOW, AFTER, AT_END = "now", "after", "end"

    when = forms.ChoiceField(
        label="Break", initial=NOW, widget=forms.RadioSelect,
        choices=[(NOW, "Immediately"), (AFTER, "After a break period of"),
                 (AT_END, "When the lease ends (an infinite lease breaks immediately)")])
    seconds = forms.IntegerField(label="Break period in seconds", required=False, min_value=1,
                                 max_value=machine.MAX_BREAK_PERIOD,
                                 widget=forms.NumberInput(attrs={"class": "vIntegerField", "placeholder": "1–60"}))
    reason = forms.CharField(required=False, max_length=500, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Recorded in the lease history with your user name.")
    seen = SeenGenerationsField(required=False)

    def clean(self):
        data = super().clean()
        when, seconds = data.get("when"), data.get("seconds")
        if when == self.AFTER and seconds is None and "seconds" not in self.errors:
            self.add_error("seconds", "Give a break period of 1 to 60 seconds.")
        elif when in (self.NOW, self.AT_END) and seconds is not None:
            # Typed seconds with another choice still selected: the page's
            # script selects "after" on typing; without it, ask, never guess.
            chosen = dict(self.fields["when"].choices)[when]
            self.add_error("seconds", f"You gave a break period of {seconds} s but chose “{chosen}”. "
                           "Choose “After a break period of” to use it, or clear the seconds.")
        return data

    @property
    def when_text(self) -> str:
        period = self.break_period
        return {0: "immediately", None: "when the lease ends"}.get(period, f"after {period} s")

    @property
    def break_period(self) -> int | None:
        """The service's ``break_period``: None means "at the lease's end"."""
        when = self.cleaned_data["when"]
        return {self.NOW: 0, self.AFTER: self.cleaned_data.get("seconds"), self.AT_END: None}[when]


class ReleaseForm(forms.Form):
    """The fingerprint of the lease the page showed (never its id), so that a
    lease taken again since cannot be released by accident."""

    fingerprint = forms.RegexField(regex=fingerprints.FINGERPRINT, widget=forms.HiddenInput)
    reason = forms.CharField(required=False, max_length=500, widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Recorded in the lease history with your user name.")


class HolderAtForm(forms.Form):
    """A local date and time; ``tz`` (filled in by the page's script with
    the browser's zone) says whose local time, else the server's."""

    held_at = forms.DateTimeField(
        label="Who held it at",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}, format="%Y-%m-%dT%H:%M:%S"))
    tz = forms.CharField(required=False, widget=forms.HiddenInput(attrs={"data-browser-tz": ""}))

    def clean_tz(self):
        name = self.cleaned_data["tz"]
        try:
            return zoneinfo.ZoneInfo(name) if name else None
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return None

    def clean(self):
        data = super().clean()
        if data.get("held_at"):
            try:
                if data.get("tz"):
                    data["held_at"] = timezone.make_aware(timezone.make_naive(data["held_at"]), data["tz"])
                data["held_at"].astimezone(timezone.get_fixed_timezone(0))  # as the history stores it: UTC
            except (OverflowError, ValueError):
                self.add_error("held_at", "Give a time between the years 1 and 9999 in UTC.")
        return data
