"""List filters that stay fast on big tables. Every filter here narrows on an indexed column, and
none lists its choices with a DISTINCT over the filtered table (Django's AllValuesFieldListFilter
does, which reads every row): choices come from the small Account and Container tables, or from a
loose index scan of the event indexes."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db import connections
from django.db.models import Q

from leases.domain import machine, numbers
from leases.models import Account, Container, LeaseEvent, effective_state_q
from leases.services.selectors import ids_if_few

from leases.admin.common import lease_now

MAX_CHOICES = 100  # a longer sidebar is unusable; search or the URL reach the rest


class CheckedFilter(admin.SimpleListFilter):
    """A filter that says so when its value is none it knows (a typo, an
    old link, a deleted container) and then lists nothing, instead of
    silently listing everything as Django's filters do."""

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        narrowed = self.narrow(request, queryset, value)
        if narrowed is None:
            messages.error(request, f"Unknown {self.title} “{value}”: nothing is listed. {self.expected(request)}")
            return queryset.none()
        return narrowed

    def narrow(self, request, queryset, value: str):
        """The queryset narrowed to ``value``, or None if it is unknown."""
        raise NotImplementedError

    def expected(self, request) -> str:
        return "Choose one in the filter sidebar."


class EffectiveStateFilter(CheckedFilter):
    """The state a client would see now, decided in SQL from the stored
    state, deadlines and the request's instant (index: lease_state, expiry)."""

    title = "lease state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [(state, state) for state in machine.STATES]

    def narrow(self, request, queryset, value):
        if value in machine.STATES:
            return queryset.filter(effective_state_q(value, lease_now(request)))
        return None

    def expected(self, request):
        return "A lease state is one of: " + ", ".join(machine.STATES) + "."


class DurationTypeFilter(CheckedFilter):
    """Fixed or infinite, from the stored duration. A duration is stored only
    with a leased record, so the lease_state index narrows first."""

    title = "duration type"
    parameter_name = "duration"

    def lookups(self, request, model_admin):
        return [("fixed", "fixed"), ("infinite", "infinite")]

    def narrow(self, request, queryset, value):
        if value == "infinite":
            return queryset.filter(lease_state=machine.LEASED, lease_duration=machine.INFINITE)
        if value == "fixed":
            return queryset.filter(lease_state=machine.LEASED, lease_duration__gt=0)
        return None

    def expected(self, request):
        return "A duration type is fixed or infinite."


class AccountFilter(CheckedFilter):
    """Storage account of a container, by id."""

    title = "account"
    parameter_name = "account"

    def lookups(self, request, model_admin):
        return list(Account.objects.values_list("pk", "name")[:MAX_CHOICES])

    def narrow(self, request, queryset, value):
        pk = numbers.whole(value, low=1, high=numbers.BIGINT)
        if pk is not None and Account.objects.filter(pk=pk).exists():
            return queryset.filter(self.in_account(pk))
        return None

    def in_account(self, account_id: int) -> Q:
        return Q(account_id=account_id)


class BlobAccountFilter(AccountFilter):
    """A blob's account: its container among the account's containers. An
    IN subquery rather than a join, so the blob list stays one table that
    SQLite reads in index order."""

    def in_account(self, account_id: int) -> Q:
        return Q(container__in=Container.objects.filter(account_id=account_id).values("pk"))


class ContainerFilter(CheckedFilter):
    """A blob's container, listed within the chosen account if there is one."""

    title = "container"
    parameter_name = "container"

    def lookups(self, request, model_admin):
        containers = Container.objects.select_related("account").order_by("account__name", "name")
        account = request.GET.get(AccountFilter.parameter_name, "")
        account_id = numbers.whole(account, low=1, high=numbers.BIGINT)
        if account_id is not None:
            containers = containers.filter(account_id=account_id)
        choices = [(c.pk, f"{c.account.name}/{c.name}") for c in containers[:MAX_CHOICES]]
        chosen = self.value()
        if numbers.whole(chosen, low=1, high=numbers.BIGINT) is not None and all(str(pk) != chosen for pk, _ in choices):
            # Chosen through a link (a container's blob count): show it selected.
            chosen_container = Container.objects.select_related("account").filter(pk=chosen).first()
            if chosen_container:
                choices.append((chosen_container.pk, str(chosen_container)))
        return choices

    def narrow(self, request, queryset, value):
        pk = numbers.whole(value, low=1, high=numbers.BIGINT)
        if pk is not None and Container.objects.filter(pk=pk).exists():
            return queryset.filter(container_id=pk)
        return None


# ------------------------------------------------------------------ history

def distinct_values(model, column: str, *, limit: int = MAX_CHOICES) -> list[str]:
    """The distinct non-empty values of ``column``, in order, by a loose index scan: one index seek
    per value instead of a DISTINCT over every row. Needs an index led by ``column``. A recursive
    CTE, so one round trip on SQLite and PostgreSQL."""
    db = model.objects.db
    qn = connections[db].ops.quote_name
    table, col = qn(model._meta.db_table), qn(model._meta.get_field(column).column)
    sql = (f"WITH RECURSIVE v(x, n) AS ("
           f" SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > ''), 1"
           f" UNION ALL"
           f" SELECT (SELECT MIN({col}) FROM {table} WHERE {col} > v.x), n + 1"
           f" FROM v WHERE v.x IS NOT NULL AND n < %s"
           f") SELECT x FROM v WHERE x IS NOT NULL")
    with connections[db].cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]


class OutcomeFilter(CheckedFilter):
    title = "outcome"
    parameter_name = "outcome"  # index (outcome, occurred_at)

    def lookups(self, request, model_admin):
        return LeaseEvent.Outcome.choices

    def narrow(self, request, queryset, value):
        return queryset.filter(outcome=value) if value in LeaseEvent.Outcome.values else None

    def expected(self, request):
        return "An outcome is success or refused."


class EventValueFilter(admin.SimpleListFilter):
    """Exact match on one indexed text column of the history."""

    def known_values(self, request) -> list[str]:
        return distinct_values(LeaseEvent, self.parameter_name)

    def lookups(self, request, model_admin):
        values = self.known_values(request)
        if self.value() and self.value() not in values:
            values.append(self.value())  # chosen through a link: show it selected
        return [(v, v) for v in values]

    def queryset(self, request, queryset):
        if not self.value():
            return queryset
        chosen = {self.parameter_name: self.value()}
        # Few events of this value: the list is narrowed to their ids, read by this column's own
        # index, whatever other filter is chosen beside it (selectors.ids_if_few; with none, no list
        # or count statement runs). Otherwise SQLite may read a pair by the other filter's index,
        # every one of its events looked up for this value (an actor's 270,000 for an account's none).
        ids = ids_if_few(LeaseEvent.objects.filter(**chosen))
        return queryset.filter(**chosen) if ids is None else queryset.filter(pk__in=ids, **chosen)


class ActionFilter(EventValueFilter):
    title = "action"
    parameter_name = "action"  # index (action, occurred_at)


class ActorFilter(EventValueFilter):
    title = "actor"
    parameter_name = "actor"  # index (actor, occurred_at, id, action)


class EventAccountFilter(EventValueFilter):
    title = "account"
    parameter_name = "account"  # index (account, occurred_at)


class EventContainerFilter(EventValueFilter):
    """Every container of the history; with an account chosen, that account's containers as they are
    now (no index of the history is led by account then container: a loose scan of the containers'
    index, each step looking for the account's events, read 10,000,000 of them for an account with
    none). A container deleted since is still chosen by its link or the history's search."""

    title = "container"
    parameter_name = "container"  # index (container, occurred_at)

    def known_values(self, request):
        account = request.GET.get(EventAccountFilter.parameter_name)
        if not account:
            return super().known_values(request)
        return list(Container.objects.filter(account__name=account).order_by("name")
                    .values_list("name", flat=True)[:MAX_CHOICES])
