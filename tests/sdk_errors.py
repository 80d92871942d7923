"""The Azure error code of an official SDK's error. azure-storage-blob sets
``error_code`` on every HttpResponseError it raises (from x-ms-error-code or
the XML body), as an attribute azure-core's classes do not declare: read here,
once, instead of unchecked in every test."""

from __future__ import annotations

from azure.core.exceptions import AzureError


def sdk_error_code(error: AzureError) -> str | None:
    return error.error_code  # type: ignore[attr-defined]  # set by azure-storage-blob, see above
