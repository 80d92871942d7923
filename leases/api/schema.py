"""OpenAPI description of the JSON API (drf-spectacular): which endpoints
are in it, how clients authenticate, and the error responses."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from leases.api.serializers import ErrorSerializer
from leases.domain import paths

PREFIX = "/" + paths.API_PREFIX


def only_json_api(endpoints):
    """Preprocessing hook: the Azure endpoint is a DRF view too, but speaks
    XML on a wire of its own; it is not part of this schema."""
    return [endpoint for endpoint in endpoints if endpoint[0].startswith(PREFIX)]


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "leases.api.authentication.BearerTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "An API token (`manage.py leasehold_token create`); it acts with its user's "
                               "permissions."}


class SharedKeyScheme(OpenApiAuthenticationExtension):
    target_class = "leases.api.authentication.ApiSharedKeyAuthentication"
    name = "sharedKey"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`SharedKey <account>:<signature>`, signed exactly as for the Azure endpoint "
                               "(with `x-ms-date`), over this API's path. The account may act on its own "
                               "resources only."}


ERROR_DESCRIPTIONS = {
    400: "Invalid input: InvalidHeaderValue, MissingRequiredHeader (a lease parameter), "
         "InvalidQueryParameterValue, InvalidMetadata, EmptyMetadataKey, MetadataTooLarge, InvalidResourceName, "
         "OutOfRangeInput, InvalidInput (including JSON nested deeper than 32 levels).",
    401: "No credentials (NoAuthenticationInformation) or credentials not valid (AuthenticationFailed).",
    403: "Not permitted (AuthorizationPermissionMismatch).",
    404: "ContainerNotFound, BlobNotFound or ResourceNotFound.",
    406: "No acceptable format (NotAcceptable).",
    409: "A lease conflict (e.g. LeaseAlreadyPresent, with lease_state, retry_after and generation, and a "
         "Retry-After header when known) or an existing resource.",
    412: "A lease or a condition does not allow it: LeaseIdMissing, LeaseIdMismatchWith*Operation, "
         "LeaseNotPresentWith*Operation, LeaseLost, ConditionNotMet.",
    413: "The request body is too large (RequestBodyTooLarge).",
    415: "The body is not JSON (UnsupportedMediaType).",
    429: "Too many requests (TooManyRequests); retry after the Retry-After header's seconds.",
    503: "The server is busy (ServerBusy): the database writer was not free within LEASEHOLD_WRITE_WAIT, or "
         "a storage fault; nothing was changed. Retry after the Retry-After header's seconds.",
}


def errors(*statuses: int) -> dict[tuple[int, str], OpenApiResponse]:
    """Error responses of an operation: the ones it names plus those every
    operation can answer (bad input, authentication, permission, rate,
    the server busy).
    Always JSON, whatever the operation's success format."""
    return {(status, "application/json"): OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[status])
            for status in sorted({400, 401, 403, 429, 503, *statuses})}


def response_headers(result, generator, request, public):
    """Postprocessing hook: the headers every response may carry."""
    for operations in result["paths"].values():
        for operation in operations.values():
            for status, response in operation["responses"].items():
                headers = response.setdefault("headers", {})
                headers["X-Request-Id"] = {
                    "schema": {"type": "string"},
                    "description": "This request's id, as recorded in the lease history."}
                if status in ("409", "429", "503"):
                    headers["Retry-After"] = {
                        "schema": {"type": "integer"},
                        "description": "Seconds to wait before retrying (a refused acquire: when it is known)."}
    return result


def path_parameters(*, blob: bool) -> list[OpenApiParameter]:
    parameters = [
        OpenApiParameter("account", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=paths.ACCOUNT_PARAMETER,
                         description="Storage account name."),
        OpenApiParameter("container", OpenApiTypes.STR, OpenApiParameter.PATH,
                         pattern=paths.CONTAINER_PARAMETER,
                         description="Container name: 3 to 63 lower-case letters, digits and single hyphens."),
    ]
    if blob:
        parameters.append(OpenApiParameter("blob", OpenApiTypes.STR, OpenApiParameter.PATH,
                                           pattern=r"^[\s\S]{1,1024}$",  # as the server checks it (leases/domain/names.py)
                                           description="Blob name, 1 to 1,024 characters; may contain '/'."))
    return parameters


LEASE_ID_QUERY = OpenApiParameter(
    "lease_id", OpenApiTypes.UUID, OpenApiParameter.QUERY,
    description="The lease id. Required to delete a leased resource; if given on a read it must match.")

CONDITION_HEADERS = [
    OpenApiParameter("If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER,
                     description="ETag(s); blobs only, as on the Azure endpoint."),
    OpenApiParameter("If-None-Match", OpenApiTypes.STR, OpenApiParameter.HEADER,
                     description="ETag(s) or *; blobs only."),
    OpenApiParameter("If-Modified-Since", OpenApiTypes.STR, OpenApiParameter.HEADER, description="HTTP date."),
    OpenApiParameter("If-Unmodified-Since", OpenApiTypes.STR, OpenApiParameter.HEADER, description="HTTP date."),
]

CLIENT_REQUEST_ID_HEADER = OpenApiParameter(
    "X-Client-Request-Id", OpenApiTypes.STR, OpenApiParameter.HEADER,
    description="Your id for this request (x-ms-client-request-id also works): recorded in the lease history "
                "and echoed back.")
