"""Azure's limits on block lists, and the largest Put Block List body they allow (the front refuses
a larger one before reading it: serving/asgi.py)."""

from __future__ import annotations

MAX_COMMITTED = 50_000  # blocks in a committed list (Azure's limit)
MAX_UNCOMMITTED = 100_000  # uncommitted blocks of one blob name (Azure's limit)
MAX_ID_BYTES = 64  # a block id, decoded
_LONGEST_ID = 4 * ((MAX_ID_BYTES + 2) // 3)  # 88 characters of base64
_LONGEST_ENTRY = len("<Uncommitted>") + _LONGEST_ID + len("</Uncommitted>")
# A line break and indentation around each entry, as a pretty-printing client sends.
_ENTRY_SPACE = 16
# The declaration (with a byte order mark), <BlockList> and </BlockList>, with room to spare.
_ENVELOPE = 1024
# The largest valid body in UTF-8, as the SDKs send it (50,000 entries of the longest tag and id):
# 6,551,024 bytes. A list in UTF-16 takes twice the bytes per entry, so holds about half as many.
MAX_LIST_BYTES = MAX_COMMITTED * (_LONGEST_ENTRY + _ENTRY_SPACE) + _ENVELOPE
