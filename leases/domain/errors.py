"""Domain errors carrying the Azure error code, HTTP status and message. Pure Python: the state
machine raises these, and each adapter (Azure XML, JSON) turns them into its own wire shape in one
exception handler. Messages are the real service's strings (docs/reference/azure-compatibility.md
§5.1); the ones that name the resource come in a blob and a container variant."""

from __future__ import annotations

from datetime import datetime

MESSAGES = {
    "LeaseAlreadyPresent": "There is already a lease present.",
    "LeaseIdMismatchWithLeaseOperation": "The lease ID specified did not match the lease ID for the {noun}.",
    "LeaseNotPresentWithLeaseOperation": "There is currently no lease on the {noun}.",
    "LeaseIsBrokenAndCannotBeRenewed": "The lease ID matched, but the lease has been broken explicitly and cannot be renewed.",
    "LeaseIsBreakingAndCannotBeAcquired": "The lease ID matched, but the lease is currently in breaking state and cannot be acquired until it is broken.",
    "LeaseIsBreakingAndCannotBeChanged": "The lease ID matched, but the lease is currently in breaking state and cannot be changed.",
    # Versions before 2012-02-12 only (breaking is idempotent since).
    "LeaseAlreadyBroken": "The lease has already been broken and cannot be broken again.",
    "LeaseIdMissing": "There is currently a lease on the {noun} and no lease ID was specified in the request.",
    "LeaseIdMismatchWithBlobOperation": "The lease ID specified did not match the lease ID for the blob.",
    "LeaseIdMismatchWithContainerOperation": "The lease ID specified did not match the lease ID for the container.",
    "LeaseNotPresentWithBlobOperation": "There is currently no lease on the blob.",
    "LeaseNotPresentWithContainerOperation": "There is currently no lease on the container.",
    "LeaseLost": "A lease ID was specified, but the lease for the {noun} has expired.",
    "ConditionNotMet": "The condition specified using HTTP conditional header(s) is not met.",
    "MultipleConditionHeadersNotSupported": "Multiple condition headers are not supported.",
    "MissingRequiredHeader": "An HTTP header that's mandatory for this request is not specified.",
    "InvalidHeaderValue": "The value for one of the HTTP headers is not in the correct format.",
    "UnsupportedHeader": "One of the HTTP headers specified in the request is not supported.",
    "InvalidQueryParameterValue": "Value for one of the query parameters specified in the request URI is invalid.",
    "InvalidInput": "One of the request inputs is not valid.",
    "ContainerNotFound": "The specified container does not exist.",
    "BlobNotFound": "The specified blob does not exist.",
    "ResourceNotFound": "The specified resource does not exist.",
    "ContainerAlreadyExists": "The specified container already exists.",
    "BlobAlreadyExists": "The specified blob already exists.",
    "SnapshotsPresent": "This operation is not permitted because the blob has snapshots.",
    "InvalidResourceName": "The specified resource name contains invalid characters.",
    "OutOfRangeInput": "The specified resource name length is not within the permissible limits.",
    "InvalidOperation": "A lease cannot be granted for a blob snapshot.",
    "InvalidRange": "The range specified is invalid for the current size of the resource.",
    "UnsupportedHttpVerb": "The resource doesn't support specified Http Verb.",
    "AuthenticationFailed": "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature.",
    "NoAuthenticationInformation": "Server failed to authenticate the request. Please refer to the information in the www-authenticate header.",
    "InvalidAuthenticationInfo": "Authentication information is not given in the correct format. Check the value of Authorization header.",
    "AuthorizationPermissionMismatch": "This request is not authorized to perform this operation using this permission.",
    "AuthorizationFailure": "This request is not authorized to perform this operation.",
    "AuthorizationSourceIPMismatch": "This request is not authorized to perform this operation using this source IP.",
    "AuthorizationProtocolMismatch": "This request is not authorized to perform this operation using this protocol.",
    "AuthorizationServiceMismatch": "This request is not authorized to perform this operation using this service.",
    "AuthorizationResourceTypeMismatch": "This request is not authorized to perform this operation using this resource type.",
    "InvalidXmlDocument": "XML specified is not syntactically valid.",
    "RequestBodyTooLarge": "The request body is too large and exceeds the maximum permissible limit.",
    "InvalidMetadata": "The metadata specified is invalid. It has characters that are not permitted.",
    "EmptyMetadataKey": "The key for one of the metadata key-value pairs is empty.",
    "MetadataTooLarge": "The size of the specified metadata exceeds the maximum size permitted.",
    "MissingContentLengthHeader": "Content-Length HTTP header is missing.",
    "Md5Mismatch": "The MD5 value specified in the request did not match with the MD5 value calculated by the server.",
    "InvalidMd5": "The MD5 value specified in the request is invalid. The MD5 value must be 128 bits and Base64-encoded.",
    "IncompleteBody": "The request body is shorter than its Content-Length; nothing was stored.",
    "InvalidUri": "The requested URI does not represent any resource on the server.",
    "CorsPreflightFailure": "CORS not enabled or no matching rule found for this request.",
    "InternalError": "The server encountered an internal error. Please retry the request.",
    "OperationTimedOut": ("The operation could not be completed within the permitted time: it may or may not "
                          "have been made. Read the resource, or send the same request again, before relying "
                          "on either."),
    "InvalidBlobOrBlock": "The specified blob or block content is invalid.",
    "InvalidBlockList": "The specified block list is invalid.",
    "BlockCountExceedsLimit": "The uncommitted block count cannot exceed the maximum limit of 100,000 blocks.",
    "BlockListTooLong": "The block list may not contain more than 50,000 blocks.",
    "Crc64Mismatch": "The CRC64 value specified in the request did not match with the CRC64 value calculated by the server.",
    "NoPendingCopyOperation": "There is currently no pending copy operation.",
    "CannotVerifyCopySource": "The specified blob does not exist.",
    "InvalidBlobType": "The blob type is invalid for this operation.",
    "AppendPositionConditionNotMet": "The append position condition specified was not met.",
    "MaxBlobSizeConditionNotMet": "The max blob size condition specified was not met.",
}

STATUS = {
    "LeaseIdMissing": 412,
    "LeaseIdMismatchWithBlobOperation": 412,
    "LeaseIdMismatchWithContainerOperation": 412,
    "LeaseNotPresentWithBlobOperation": 412,
    "LeaseNotPresentWithContainerOperation": 412,
    "LeaseLost": 412,
    "ConditionNotMet": 412,
    "MultipleConditionHeadersNotSupported": 400,
    "MissingRequiredHeader": 400,
    "InvalidHeaderValue": 400,
    "UnsupportedHeader": 400,
    "InvalidQueryParameterValue": 400,
    "InvalidInput": 400,
    "InvalidResourceName": 400,
    "OutOfRangeInput": 400,
    "InvalidOperation": 400,
    "ContainerNotFound": 404,
    "BlobNotFound": 404,
    "ResourceNotFound": 404,
    "InvalidRange": 416,
    "InvalidMetadata": 400,
    "MetadataTooLarge": 400,
    "EmptyMetadataKey": 400,
    "MissingContentLengthHeader": 411,
    "Md5Mismatch": 400,
    "InvalidMd5": 400,
    "IncompleteBody": 400,
    "InvalidUri": 400,
    "CorsPreflightFailure": 403,
    "UnsupportedHttpVerb": 405,
    "AuthenticationFailed": 403,
    "NoAuthenticationInformation": 401,
    "InvalidAuthenticationInfo": 400,
    "AuthorizationPermissionMismatch": 403,
    "AuthorizationFailure": 403,
    "AuthorizationSourceIPMismatch": 403,
    "AuthorizationProtocolMismatch": 403,
    "AuthorizationServiceMismatch": 403,
    "AuthorizationResourceTypeMismatch": 403,
    "InvalidXmlDocument": 400,
    "RequestBodyTooLarge": 413,
    "InternalError": 500,
    "OperationTimedOut": 500,
    "InvalidBlobOrBlock": 400,
    "InvalidBlockList": 400,
    "BlockListTooLong": 400,
    "Crc64Mismatch": 400,
    "CannotVerifyCopySource": 404,
    "AppendPositionConditionNotMet": 412,
    "MaxBlobSizeConditionNotMet": 412,
    "TooManyRequests": 429,
    "ServerBusy": 503,
}
# Everything else named in MESSAGES (the lease-operation conflicts and the
# *AlreadyExists / SnapshotsPresent family) is a 409.


class LeaseholdError(Exception):
    """A refused request. ``field`` names the offending input in adapter-neutral
    terms (``duration``, ``lease_id``, ...); each adapter maps it to its own
    header or JSON name."""

    # A refused acquire that will wait (leases/domain/waiting.py): what for, and when it ends by itself.
    waiting: bool = False
    wait_key: str | None = None
    ends_at: datetime | None = None

    def __init__(self, code: str, *, noun: str = "blob", field: str | None = None,
                 value: str | None = None, message: str | None = None,
                 detail: dict | None = None):
        self.code = code
        self.status = STATUS.get(code, 409)
        self.noun = noun
        self.field = field
        self.value = value
        self.message = message or MESSAGES.get(code, code).format(noun=noun)
        # Extra facts an adapter may show (current state, retry-after, ...).
        self.detail = detail or {}
        super().__init__(f"{self.status} {code}: {self.message}")
