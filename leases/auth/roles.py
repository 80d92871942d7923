"""What a bearer token's principal may do: the role rules (LEASEHOLD_OIDC_ROLES, leases/conf/oidc.py)
map the token's claims (roles, groups, scopes, or any claim) to one of Azure's data roles on an
account or one container of it -- Storage Blob Data Reader (read and list, never lease or write),
Contributor (everything on blobs and containers, leases included), Owner (also the containers'
stored access policies) -- and ``allows`` checks one operation (the names of sas.NEEDS) against it.
The highest role that any matching rule gives for the request's account and container holds."""

from __future__ import annotations

from collections.abc import Iterable

RANK = {"reader": 1, "contributor": 2, "owner": 3}
READS = frozenset({"list_containers", "account_info", "service_properties", "container_properties", "list_blobs",
                   "get_blob", "get_block_list", "user_delegation_key"})
OWNER_ONLY = frozenset({"container_acl"})


def _values(claim) -> Iterable[str]:
    """A claim's values: a list's strings, or a string's space-separated words (OAuth's ``scp``)."""
    if isinstance(claim, str):
        return claim.split()
    if isinstance(claim, list):
        return (value for value in claim if isinstance(value, str))
    return ()


def role_for(claims: dict, rules, account: str, container: str | None) -> str | None:
    """The principal's role on ``account`` (and ``container``, if the request is in one), or None."""
    best = None
    for rule in rules:
        if rule.account not in ("*", account) or (rule.container is not None and rule.container != container):
            continue
        if rule.value in _values(claims.get(rule.claim)) and (best is None or RANK[rule.role] > RANK[best]):
            best = rule.role
    return best


def allows(role: str | None, operation: str) -> bool:
    if role is None:
        return False
    if operation in READS:
        return True
    if operation in OWNER_ONLY:
        return role == "owner"
    return RANK[role] >= RANK["contributor"]
