"""The operators' admin: containers and blobs with their leases (browse,
break, release), and the read-only lease history. ``admin.autodiscover``
imports this package; the modules register their ModelAdmins."""

from django.contrib import admin

from leases.admin import delegation_keys, history, resources, sso, tenures, users  # noqa: F401

admin.site.site_header = "Leasehold"
admin.site.site_title = "Leasehold admin"
admin.site.index_title = "Leases, blobs and their history"
# The service has no public site of its own: no "View site" link to a 404.
admin.site.site_url = None
sso.install(admin.site)  # "Sign in with <provider>"; local passwords as LEASEHOLD_ADMIN_PASSWORDS allows
