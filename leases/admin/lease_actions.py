"""Breaking and releasing leases from the admin, through the services. Break is an admin action on
selected rows and a button on a detail page; both show a confirmation page first, as Django's delete
does. Release is for superusers, from the detail page. Every outcome, refusals included, is recorded
by the service with the staff user and the reason."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from leases.domain import fingerprints
from leases.domain.errors import LeaseholdError
from leases.services import lease_action, lease_break, lease_release
from engines.writer_wait import is_writer_busy

from leases.admin import display
from leases.admin.writer_busy import MESSAGE as BUSY_MESSAGE
from leases.admin.common import BREAKABLE, admin_actor, lease_now, resource_ref
from leases.admin.forms import BreakForm, ReleaseForm

MAX_BREAK = 500  # per confirmation: the page lists every lease it will break

if TYPE_CHECKING:  # the admin the mixin is mixed into, for the checker (opts, admin_site, super())
    from django.contrib.admin import ModelAdmin as _ModelAdmin
else:
    _ModelAdmin = object


class LeaseActionsMixin(_ModelAdmin):
    """For a ModelAdmin of Container or Blob."""

    actions = ("break_leases",)

    def has_break_permission(self, request, obj=None):
        # Per model ("Can break blob lease" does not break containers), as
        # Django's own view/change/delete permissions are.
        return request.user.has_perm(f"{self.opts.app_label}.break_{self.opts.model_name}_lease")

    def has_release_permission(self, request, obj=None):
        return request.user.is_superuser

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("<path:object_id>/break/", self.admin_site.admin_view(self.break_view),
                 name="{}_{}_break".format(*info)),
            path("<path:object_id>/release/", self.admin_site.admin_view(self.release_view),
                 name="{}_{}_release".format(*info)),
            *super().get_urls(),
        ]

    # ------------------------------------------------------------ break

    @admin.action(permissions=["break"], description="Break the selected leases…")
    def break_leases(self, request, queryset):
        """Confirmation first, as Django's delete_selected: the page posts
        back here with ``post`` set, and only then are leases broken."""
        objects = list(queryset[: MAX_BREAK + 1])
        if len(objects) > MAX_BREAK:
            self.message_user(request, f"Select at most {MAX_BREAK} leases to break at a time.", messages.ERROR)
            return None
        form = BreakForm(request.POST if request.POST.get("post") else None)
        if form.is_valid():
            self.perform_break(request, form)
            return None
        return self.confirmation(request, "break", objects, form, action_post=True)

    def break_view(self, request, object_id):
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_break_permission(request, obj):
            return self.refuse(request, obj, f"You may not break {self.opts.verbose_name} leases: that needs the "
                               f"“Can break {self.opts.verbose_name} lease” permission.")
        form = BreakForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            self.perform_break(request, form)
            return HttpResponseRedirect(self.object_url(obj))
        return self.confirmation(request, "break", [obj], form)

    def perform_break(self, request, form: BreakForm) -> None:
        """Break the leases the operator confirmed, unless one has become a
        new lease since (its generation moved on). The rows are read again
        without the list's filters: those chose what to review, not what to
        break. The service re-checks each lease in its own transaction."""
        seen = form.cleaned_data["seen"]
        current = self.get_queryset(request).in_bulk(seen)
        broken = gone = 0
        renewed: list[str] = []
        refused: list[str] = []
        busy: list[str] = []
        for pk, generation in seen.items():
            obj = current.get(pk)
            if obj is None:
                gone += 1
            elif busy:  # the writer was busy: the rest are left for the operator to retry
                busy.append(str(obj))
            elif obj.lease_generation != generation:
                renewed.append(str(obj))
            else:
                try:
                    lease_break(ref=resource_ref(obj), actor=admin_actor(request),
                                break_period=form.break_period, reason=form.cleaned_data["reason"])
                except LeaseholdError as err:
                    refused.append(f"{obj} ({err.code})")
                except Exception as exc:
                    if not is_writer_busy(exc) or not (broken or refused):
                        raise  # nothing done yet: the busy page says so (leases/admin/writer_busy.py)
                    busy.append(str(obj))
                else:
                    broken += 1
                    # "Recent actions" on the admin index, as Django's own changes are.
                    self._log_change(request, obj, f"Broke the lease ({form.when_text}). "
                                    f"Reason: {form.cleaned_data['reason'] or '–'}")
        if broken:
            self.message_user(request, f"Broke the lease of {self._how_many(broken)}.", messages.SUCCESS)
        if renewed:
            self.message_user(request, f"Not broken, a new lease was taken after you confirmed: {_names(renewed)}. "
                              "Review again.", messages.WARNING)
        if refused:
            self.message_user(request, f"The break was refused: {_names(refused)}.", messages.ERROR)
        if gone:
            self.message_user(request, f"Not broken, deleted since: {self._how_many(gone)}.", messages.WARNING)
        if busy:
            self.message_user(request, f"Not broken, the database was busy: {_names(busy)}. {BUSY_MESSAGE}",
                              messages.ERROR)

    def _log_change(self, request, obj, message: str) -> None:
        """Django's "Recent actions" entry, unless the writer became busy
        after the lease action committed: the lease history has the
        action, and the operator must not be told it did not happen."""
        try:
            self.log_change(request, obj, message)
        except Exception as exc:
            if not is_writer_busy(exc):
                raise

    def _how_many(self, n: int) -> str:
        return f"{n} {self.opts.verbose_name if n == 1 else self.opts.verbose_name_plural}"

    # ------------------------------------------------------------ release

    def release_view(self, request, object_id):
        obj = self.get_object(request, admin.utils.unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_release_permission(request, obj):
            return self.refuse(request, obj, "Only a superuser may release a lease; you may break it instead "
                               "if you have the permission.")
        form = ReleaseForm(request.POST if request.method == "POST" else None,
                           initial={"fingerprint": fingerprints.of(obj.lease_id)})
        if form.is_valid():
            ref, reason = resource_ref(obj), form.cleaned_data["reason"]
            try:
                # A server-side action: the page carries the lease's fingerprint, never its id; the
                # id is the row's, read now, and only if it is still the lease the page showed (else
                # the refusal is recorded as a release with another id would be).
                if fingerprints.of(obj.lease_id) == form.cleaned_data["fingerprint"]:
                    lease_release(ref=ref, actor=admin_actor(request), lease_id=obj.lease_id, reason=reason)
                else:
                    lease_action("release", ref=ref, actor=admin_actor(request), reason=reason, unparsed=LeaseholdError(
                        "LeaseIdMismatchWithLeaseOperation", noun=ref.noun))
            except LeaseholdError as err:
                self.message_user(request, f"{obj}: the release was refused ({err.code}); the lease "
                                  "changed after you looked.", messages.ERROR)
            else:
                self.message_user(request, f"Released the lease of {obj}.", messages.SUCCESS)
                self._log_change(request, obj, f"Released the lease. Reason: {form.cleaned_data['reason'] or '–'}")
            return HttpResponseRedirect(self.object_url(obj))
        return self.confirmation(request, "release", [obj], form)

    # ------------------------------------------------------------ shared

    def confirmation(self, request, operation: str, objects, form, *, action_post: bool = False,
                     cancel_url: str | None = None, heading: str | None = None):
        """What will be broken or released, and the form that does it. A
        break skips what holds no lease, and remembers which lease (by
        generation) each target held when the operator saw it."""
        now = lease_now(request)
        rows = [{"obj": obj, "state": display.row_state(obj),
                 "time_left": display.time_left(obj, display.row_state(obj), now),
                 "fingerprint": display.lease_fingerprint(obj)} for obj in objects]
        breaking = operation == "break"
        targets = [row for row in rows if not breaking or row["state"] in BREAKABLE]
        skipped = [row for row in rows if breaking and row["state"] not in BREAKABLE]
        if breaking:
            form.initial["seen"] = [f"{row['obj'].pk}:{row['obj'].lease_generation}" for row in targets]
        context = {
            **self.admin_site.each_context(request),
            "title": heading or f"{operation.capitalize()} lease{'s' if len(targets) != 1 else ''}",
            "operation": operation,
            "opts": self.opts,
            "targets": targets,
            "skipped": skipped,
            "form": form,
            "action_post": action_post,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            "subject": None if action_post or cancel_url else objects[0],
            "cancel_url": cancel_url or (request.get_full_path() if action_post else self.object_url(objects[0])),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/leases/lease_confirmation.html", context)

    def refuse(self, request, obj, message: str):
        """Not allowed: say why on the page the operator came from (the
        object's, or the list's if they may not view it), not a bare 403."""
        self.message_user(request, message, messages.ERROR)
        if self.has_view_permission(request, obj):
            return HttpResponseRedirect(self.object_url(obj))
        return HttpResponseRedirect(reverse("admin:index", current_app=self.admin_site.name))

    def object_url(self, obj) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk],
                       current_app=self.admin_site.name)


def _names(names: list[str], shown: int = 10) -> str:
    """A message's list of names, cut short for a bulk break."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
