"""The admin's user delegation keys: listed without any value; the revoke action revokes every key of
the selected keys' accounts (others' stay), for those who may change keys, and is in "Recent actions";
a staff member who may only view them is not offered it and a POST of it revokes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry

from leases.auth import delegation
from leases.auth.bearer import Principal
from leases.conf.oidc import Oidc, rules
from leases.domain import clock
from leases.models import UserDelegationKey
from leases.services import account_ensure

from .helpers import _staff

KEYS = "/admin/leases/userdelegationkey/"


@pytest.fixture
def keys(db, settings):
    settings.LEASEHOLD_OIDC = Oidc(issuer="https://sso.example.com", audiences=("leasehold",),
                                   rules=rules("roles:w=contributor"), leeway=30, refetch=(1.0, 1.0))
    account_ensure(name="alpha", key1="a2V5MQ==")
    account_ensure(name="beta", key1="a2V5Mg==")
    now = clock.now().replace(microsecond=0)
    principal = Principal("https://sso.example.com", "oid-1", "Job", {"roles": ["w"], "sub": "oid-1"})
    values = [delegation.issue(principal, name, now, now + timedelta(hours=1), "2025-11-05")[1]
              for name in ("alpha", "alpha", "beta")]
    return values


def test_the_list_shows_no_value_and_the_action_revokes_the_accounts_keys(client, django_user_model, keys):
    user = _staff(django_user_model, "ops", "userdelegationkey.view_userdelegationkey",
                  "userdelegationkey.change_userdelegationkey")
    client.force_login(user)
    page = client.get(KEYS)
    assert page.status_code == 200 and "Revoke the user delegation keys" in page.content.decode()
    assert not any(value in page.content.decode() for value in keys)
    one_alpha = UserDelegationKey.objects.filter(account__name="alpha").first()
    answer = client.post(KEYS, {"action": "revoke_accounts_keys", "_selected_action": [one_alpha.pk]}, follow=True)
    assert answer.status_code == 200
    assert set(UserDelegationKey.objects.filter(revoked_at__isnull=False).values_list("account__name", flat=True)) \
        == {"alpha"}
    assert UserDelegationKey.objects.filter(account__name="alpha", revoked_at__isnull=True).count() == 0
    assert LogEntry.objects.filter(change_message__contains="Revoked 2 user delegation key(s) of alpha").exists()


def test_a_viewer_is_not_offered_the_action_and_its_post_revokes_nothing(client, django_user_model, keys):
    user = _staff(django_user_model, "viewer", "userdelegationkey.view_userdelegationkey")
    client.force_login(user)
    page = client.get(KEYS)
    assert page.status_code == 200 and "Revoke the user delegation keys" not in page.content.decode()
    client.post(KEYS, {"action": "revoke_accounts_keys",
                       "_selected_action": list(UserDelegationKey.objects.values_list("pk", flat=True))})
    assert not UserDelegationKey.objects.filter(revoked_at__isnull=False).exists()
