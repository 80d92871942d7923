"""Django's user and group admins, under the same rule as the lease admins: their lists accept only
the parameters they declare (leases/admin/queries.py). Django's own would take any lookup on a
user's fields (a regular expression on the user names, a bisection of a last login) from anyone who
may view users."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User

from leases.admin.queries import DeclaredQueryAdmin

for model in (User, Group):
    if admin.site.is_registered(model):
        admin.site.unregister(model)


@admin.register(User)
class LeaseholdUserAdmin(DeclaredQueryAdmin, UserAdmin):
    pass


@admin.register(Group)
class LeaseholdGroupAdmin(DeclaredQueryAdmin, GroupAdmin):
    pass
