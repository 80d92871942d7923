"""Transactional checksums a client may send with a body: Content-MD5 and
Azure's x-ms-content-crc64 (CRC-64/NVME: the reflected polynomial
0x9A6C9329AC4BC9B5, all ones in and out; sent as the 8 bytes little-endian,
base64), both checked against the bytes received."""

from __future__ import annotations

import base64
import binascii

_POLY = 0x9A6C9329AC4BC9B5
_MASK = (1 << 64) - 1


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()


class Crc64:
    """hashlib's shape (update, digest) for Azure's CRC64. Pure Python:
    about a second per 4 MiB, spent only when a client sends the header."""

    def __init__(self) -> None:
        self.crc = _MASK

    def update(self, data: bytes) -> None:
        crc, table = self.crc, _TABLE
        for byte in data:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        self.crc = crc

    def digest(self) -> bytes:
        return (self.crc ^ _MASK).to_bytes(8, "little")


def decoded(value: str, size: int) -> bytes | None:
    """A base64 header value of ``size`` bytes, or None if it is not one."""
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None
