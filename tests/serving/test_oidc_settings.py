"""LEASEHOLD_OIDC_*: the issuer and the role rules read and checked at start (leases/conf/oidc.py)."""

from __future__ import annotations

import pytest

from leases import conf
from leases.conf.env import SettingError
from leases.conf.oidc import RoleRule


def test_no_issuer_no_bearer_tokens():
    assert conf.load({}).oidc is None


def test_the_issuer_audiences_and_rules():
    found = conf.load({"LEASEHOLD_OIDC_ISSUER": "https://sts.windows.net/t1/",
                       "LEASEHOLD_OIDC_ROLES": "roles:Leases.Read=reader, groups:g1=owner@acct/jobs scp:a.b=contributor@acct",
                       "LEASEHOLD_OIDC_JWKS_REFETCH": "6/hour"}).oidc
    assert found is not None and found.issuer == "https://sts.windows.net/t1/"  # as tokens name it, slash kept
    assert found.audiences == ("https://storage.azure.com", "https://storage.azure.com/")
    assert found.rules == (RoleRule("roles", "Leases.Read", "reader"), RoleRule("groups", "g1", "owner", "acct", "jobs"),
                           RoleRule("scp", "a.b", "contributor", "acct"))
    assert found.refetch == (6 / 3600, 6.0) and found.leeway == 30


@pytest.mark.parametrize("name, value", [
    ("LEASEHOLD_OIDC_ISSUER", "http://idp.example.com"),  # http off loopback
    ("LEASEHOLD_OIDC_ISSUER", "idp.example.com"),
    ("LEASEHOLD_OIDC_ROLES", "roles:Leases.Read=admin"),
    ("LEASEHOLD_OIDC_ROLES", "roles=reader"),
    ("LEASEHOLD_OIDC_ROLES", "roles:x=reader@Acct"),
    ("LEASEHOLD_OIDC_JWKS_REFETCH", "0/minute"),
    ("LEASEHOLD_OIDC_LEEWAY", "-1"),
])
def test_a_bad_value_stops_the_start_naming_the_variable(name, value):
    with pytest.raises(SettingError, match=name):
        conf.load({"LEASEHOLD_OIDC_ISSUER": "http://127.0.0.1:9/", name: value})


def test_the_admins_single_sign_on_and_its_group_rules():
    from leases.conf.admin_sso import GroupRule

    assert conf.load({}).admin_sso is None and conf.load({}).admin_passwords == "on"
    found = conf.load({"LEASEHOLD_ADMIN_SSO_ISSUER": "https://sso.example.com/realms/ops",
                       "LEASEHOLD_ADMIN_SSO_CLIENT_ID": "leasehold-admin", "LEASEHOLD_ADMIN_SSO_CLIENT_SECRET": "s",
                       "LEASEHOLD_ADMIN_SSO_GROUPS": "groups:ops=operators, roles:Admin=superuser groups:ro=view+only",
                       "LEASEHOLD_ADMIN_PASSWORDS": "superusers"})
    assert found.admin_sso is not None and found.admin_passwords == "superusers"
    assert found.admin_sso.rules == (GroupRule("groups", "ops", "operators"), GroupRule("roles", "Admin", "superuser"),
                                     GroupRule("groups", "ro", "view only"))
    assert found.admin_sso.name == "single sign-on" and found.admin_sso.scopes == "openid profile email"


@pytest.mark.parametrize("given, name", [
    ({"LEASEHOLD_ADMIN_PASSWORDS": "off"}, "LEASEHOLD_ADMIN_PASSWORDS"),  # nobody could sign in
    ({"LEASEHOLD_ADMIN_SSO_ISSUER": "https://sso.example.com"}, "LEASEHOLD_ADMIN_SSO_CLIENT_ID"),
    ({"LEASEHOLD_ADMIN_SSO_ISSUER": "https://sso.example.com", "LEASEHOLD_ADMIN_SSO_CLIENT_ID": "c",
      "LEASEHOLD_ADMIN_SSO_CLIENT_SECRET": "s"}, "LEASEHOLD_ADMIN_SSO_GROUPS"),  # no rule: nobody may do anything
    ({"LEASEHOLD_ADMIN_SSO_GROUPS": "groups=ops"}, "LEASEHOLD_ADMIN_SSO_GROUPS"),
    ({"LEASEHOLD_ADMIN_SSO_ISSUER": "http://sso.example.com", "LEASEHOLD_ADMIN_SSO_CLIENT_ID": "c",
      "LEASEHOLD_ADMIN_SSO_CLIENT_SECRET": "s", "LEASEHOLD_ADMIN_SSO_GROUPS": "g:a=b"}, "LEASEHOLD_ADMIN_SSO_ISSUER"),
    ({"LEASEHOLD_ADMIN_PASSWORDS": "sometimes"}, "LEASEHOLD_ADMIN_PASSWORDS"),
])
def test_a_bad_admin_sso_setting_stops_the_start_naming_it(given, name):
    with pytest.raises(SettingError, match=name):
        conf.load(given)
