"""serving/forwarded.py: the client's address and scheme from a trusted
proxy's Forwarded or X-Forwarded-* headers, and from no one else's; and the
settings that name the proxies and the TLS files."""

from __future__ import annotations

import ipaddress

import pytest

from leases import conf
from leases.conf.env import SettingError
from serving.forwarded import client

PROXIES = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128"))


@pytest.mark.parametrize("peer, headers, expected", [
    # not a trusted proxy: headers ignored, whatever they say
    ("192.0.2.1", {"HTTP_X_FORWARDED_FOR": "203.0.113.9", "HTTP_X_FORWARDED_PROTO": "https"}, ("192.0.2.1", None)),
    ("192.0.2.1", {"HTTP_FORWARDED": "for=203.0.113.9;proto=https"}, ("192.0.2.1", None)),
    # a trusted proxy: the rightmost address that is not a trusted proxy
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, ("203.0.113.9", None)),
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "1.1.1.1, 203.0.113.9, 10.9.9.9", "HTTP_X_FORWARDED_PROTO": "https"},
     ("203.0.113.9", "https")),
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "10.5.5.5, 10.6.6.6"}, ("10.5.5.5", None)),  # all trusted: the first
    ("::1", {"HTTP_X_FORWARDED_FOR": "203.0.113.9:5123"}, ("203.0.113.9", None)),
    ("::ffff:10.0.0.1", {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, ("203.0.113.9", None)),  # v4-mapped peer
    # by default a client's own Forwarded, which the proxy passes on, is ignored
    ("10.1.2.3", {"HTTP_FORWARDED": "for=198.51.100.7;proto=https", "HTTP_X_FORWARDED_FOR": "203.0.113.9",
                  "HTTP_X_FORWARDED_PROTO": "http"}, ("203.0.113.9", "http")),
    ("10.1.2.3", {"HTTP_FORWARDED": "for=198.51.100.7;proto=https"}, ("10.1.2.3", None)),
    # what cannot be read changes nothing
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "unknown, 203.0.113.9"}, ("10.1.2.3", None)),
    ("10.1.2.3", {"HTTP_FORWARDED": "for=_hidden"}, ("10.1.2.3", None)),
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": ""}, ("10.1.2.3", None)),
    ("10.1.2.3", {}, ("10.1.2.3", None)),
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "203.0.113.9", "HTTP_X_FORWARDED_PROTO": "gopher"}, ("203.0.113.9", None)),
])
def test_the_client_behind_a_trusted_proxy(peer, headers, expected):
    assert client(peer, headers, PROXIES) == expected


@pytest.mark.parametrize("peer, headers, expected", [
    # RFC 7239 when the operator says the proxy sets it: X-Forwarded-* then ignored
    ("10.1.2.3", {"HTTP_FORWARDED": 'for="[2001:db8::17]:4711";proto=https;by=10.1.2.3',
                  "HTTP_X_FORWARDED_FOR": "198.51.100.1"}, ("2001:db8::17", "https")),
    ("10.1.2.3", {"HTTP_FORWARDED": "for=198.51.100.1;proto=http, for=10.2.2.2;proto=https"},
     ("198.51.100.1", "http")),
    ("10.1.2.3", {"HTTP_FORWARDED": "For=198.51.100.1;Proto=HTTPS"}, ("198.51.100.1", "https")),
    ("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "203.0.113.9", "HTTP_X_FORWARDED_PROTO": "https"}, ("10.1.2.3", None)),
    ("192.0.2.1", {"HTTP_FORWARDED": "for=203.0.113.9;proto=https"}, ("192.0.2.1", None)),
])
def test_the_client_by_forwarded_when_chosen(peer, headers, expected):
    assert client(peer, headers, PROXIES, "forwarded") == expected


def test_no_proxies_no_forwarding():
    assert client("10.1.2.3", {"HTTP_X_FORWARDED_FOR": "203.0.113.9"}, ()) == ("10.1.2.3", None)


def test_the_settings(tmp_path):
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    key.write_text("x")
    given = conf.load({"LEASEHOLD_TLS_CERT": str(cert), "LEASEHOLD_TLS_KEY": str(key),
                       "LEASEHOLD_TRUSTED_PROXIES": " 127.0.0.1 , 10.0.0.0/8,::1 ", "LEASEHOLD_HSTS_SECONDS": "0"})
    assert given.tls and given.tls_cert == str(cert) and given.hsts_seconds == 0
    assert given.trusted_proxies == (ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.0.0.0/8"),
                                     ipaddress.ip_network("::1/128"))
    assert not conf.load({}).tls and conf.load({}).trusted_proxies == ()
    assert conf.load({}).forwarded_header == "x-forwarded-for"
    assert conf.load({"LEASEHOLD_FORWARDED_HEADER": "Forwarded"}).forwarded_header == "forwarded"
    for env, named in (({"LEASEHOLD_TLS_CERT": str(cert)}, "LEASEHOLD_TLS_CERT"),
                       ({"LEASEHOLD_TLS_KEY": str(key)}, "LEASEHOLD_TLS_KEY"),
                       ({"LEASEHOLD_TLS_CERT": str(cert), "LEASEHOLD_TLS_KEY": str(tmp_path / "none")},
                        "LEASEHOLD_TLS_KEY"),
                       ({"LEASEHOLD_TRUSTED_PROXIES": "proxy.example"}, "LEASEHOLD_TRUSTED_PROXIES"),
                       ({"LEASEHOLD_HSTS_SECONDS": "-1"}, "LEASEHOLD_HSTS_SECONDS"),
                       ({"LEASEHOLD_FORWARDED_HEADER": "x-real-ip"}, "LEASEHOLD_FORWARDED_HEADER")):
        with pytest.raises(SettingError, match=named):
            conf.load(env)
