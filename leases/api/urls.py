"""Routes of the JSON API, mounted at /api/v1/ (config/urls.py)."""

from django.urls import path, re_path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny

from leases.api.base import ApiView
from leases.api.events import EventExportView, EventListView, HolderView
from leases.api.lease_actions import ACTION_VIEWS
from leases.api.tenures import TenureExportView, TenureListView
from leases.api.resources import BlobListView, BlobView, ContainerListView, ContainerView


@extend_schema(exclude=True)
class NotFoundView(ApiView):
    """Anything else under /api/v1/ is a JSON 404; without this route the
    request would fall through to the Azure endpoint (account "api") and get
    an XML answer."""

    permission_classes = [AllowAny]
    throttle_classes = []  # anonymous callers have no principal to count against

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        raise NotFound()  # for every method, before DRF looks for a handler


urlpatterns = [
    path("containers/", ContainerListView.as_view(), name="api-containers"),
    path("containers/<str:account>/<str:container>", ContainerView.as_view(), name="api-container"),
    path("blobs/", BlobListView.as_view(), name="api-blobs"),
    path("blobs/<str:account>/<str:container>/<path:blob>", BlobView.as_view(), name="api-blob"),
    *(route for view in ACTION_VIEWS for route in (
        path(f"leases/{view.action_name}/<str:account>/<str:container>", view.as_view(),
             name=f"api-{view.action_name}-container"),
        path(f"leases/{view.action_name}/<str:account>/<str:container>/<path:blob>", view.as_view(),
             name=f"api-{view.action_name}-blob"),
    )),
    path("events/", EventListView.as_view(), name="api-events"),
    path("events/export/", EventExportView.as_view(), name="api-events-export"),
    path("events/holder/", HolderView.as_view(), name="api-events-holder"),
    path("tenures/", TenureListView.as_view(), name="api-tenures"),
    path("tenures/export/", TenureExportView.as_view(), name="api-tenures-export"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^", NotFoundView.as_view()),
]
