"""The Azure door's routes: which view method answers a request, by its
method, ``restype`` and ``comp`` (views.AzureBlobView.route), and the SAS
operation each is checked as where that is not the method's own name."""

ACCOUNT_ROUTES: dict[tuple[str, str | None, str | None], str] = {
                  ("GET", None, "list"): "list_containers",
                  ("GET", "account", "properties"): "account_info",
                  ("HEAD", "account", "properties"): "account_info",
                  ("GET", "service", "properties"): "service_properties",
                  ("POST", "service", "userdelegationkey"): "user_delegation_key"}
CONTAINER_ROUTES = {
    ("PUT", "container", None): "create_container",
    ("DELETE", "container", None): "delete_container",
    ("GET", "container", None): "container_properties",
    ("HEAD", "container", None): "container_properties",
    ("GET", "container", "metadata"): "container_properties",
    ("HEAD", "container", "metadata"): "container_properties",
    ("PUT", "container", "metadata"): "set_container_metadata",
    ("PUT", "container", "lease"): "lease",
    ("GET", "container", "list"): "list_blobs",
    ("GET", "container", "acl"): "get_container_acl",
    ("HEAD", "container", "acl"): "get_container_acl",
    ("PUT", "container", "acl"): "set_container_acl",
}
SAS_OPERATIONS = {"get_container_acl": "container_acl", "set_container_acl": "container_acl"}  # else the handler's
BLOB_ROUTES = {
    ("PUT", None): "put_blob",
    ("GET", None): "get_blob",
    ("HEAD", None): "get_blob",
    ("DELETE", None): "delete_blob",
    ("GET", "metadata"): "get_blob",
    ("HEAD", "metadata"): "get_blob",
    ("PUT", "metadata"): "set_blob_metadata",
    ("PUT", "lease"): "lease",
    ("PUT", "snapshot"): "snapshot_blob",
    ("PUT", "block"): "put_block",
    ("PUT", "blocklist"): "put_block_list",
    ("GET", "blocklist"): "get_block_list",
    ("PUT", "copy"): "abort_copy",
    ("PUT", "appendblock"): "append_block",
}
