"""Resource names every door accepts: the rules of Azure's naming page, plus the characters XML 1.0
cannot carry, refused up front so that List Blobs always answers XML the SDKs parse (Azure would
answer such names with ``Encoded="true"``; refusing them is the simpler promise). Refused in blob
names: the C0 controls (U+0000-U+001F, including tab, CR and LF: XML turns a CR into LF, so such a
name would not survive a listing), DEL (U+007F), surrogates (U+D800-U+DFFF: no UTF-8 spelling) and
the non-characters U+FFFE and U+FFFF."""

from __future__ import annotations

import re

from leases.domain.errors import LeaseholdError

# What a name or a value on the XML wire may not contain.
NOT_XML = re.compile("[\x00-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
BLOB_NAME_MAX = 1024
BLOB_SEGMENTS_MAX = 254


def validate_blob_name(name: str) -> None:
    if not 1 <= len(name) <= BLOB_NAME_MAX or name.count("/") >= BLOB_SEGMENTS_MAX:
        raise LeaseholdError("OutOfRangeInput",
                             message="The specified resource name length is not within the permissible limits.")
    if NOT_XML.search(name):
        raise LeaseholdError("InvalidResourceName")


def xml_safe(text: str) -> bool:
    """True when XML 1.0 can carry ``text`` as it is."""
    return NOT_XML.search(text) is None
