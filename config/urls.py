"""The URLs of the three doors and their pages: the admin, the JSON API under /api/v1/, /health and
/metrics, and the Azure wire protocol (accounts' containers and blobs) at the root, where the SDKs
send it."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from leases.api import health
from leases.domain import paths
from leases.azure.fallback import invalid_uri
from leases.azure.views import AzureBlobView

urlpatterns = [
    path("admin/", admin.site.urls),
    # The JSON API, its OpenAPI schema (/api/v1/schema/) and docs (/api/v1/docs/).
    path(paths.API_PREFIX, include("leases.api.urls")),
    # Operators: liveness, readiness, Prometheus metrics (leases/api/health.py).
    path("health/live", health.live, name="health-live"),
    path("health/ready", health.ready, name="health-ready"),
    path("metrics", health.MetricsView.as_view(), name="metrics"),
    # Browsers ask for it on every admin page; "favicon.ico" can name no account.
    path("favicon.ico", RedirectView.as_view(url=static("leases/favicon.svg"))),
    # Everything else is the Azure Blob endpoint, path-style: /{account}[/{container}[/{blob}]]
    # (the site's own first segments are not account names: leases/domain/paths.py).
    re_path(paths.ACCOUNT_URL, AzureBlobView.as_view()),
    # Any other path there (an upper-case or malformed account): Azure's XML error.
    re_path(paths.OTHER_URL, invalid_uri),
]
