"""Request XML bodies (Put Block List, Set Container ACL), parsed with expat piece by piece. Expat
decodes the document as XML says (a byte order mark, then the declared encoding: UTF-8, UTF-16, ISO
8859-1, US-ASCII, or a one-byte Python codec), and its handlers see the decoded document, so a
document type declaration (entities to expand) is refused whatever the encoding; an encoding expat
cannot decode (UTF-32, ...) does not parse. Either is 400 InvalidXmlDocument."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Callable
from xml.etree import ElementTree
from xml.parsers import expat

from leases.domain.errors import LeaseholdError


def invalid(why: str) -> LeaseholdError:
    return LeaseholdError("InvalidXmlDocument", message=f"XML specified is not syntactically valid: {why}")


def _refuse_dtd(*_args) -> None:
    raise invalid("a document type declaration is not allowed.")


class Parser:
    """An expat parser fed ``feed(piece)`` then ``close()``, calling
    ``start(tag)``, ``end(tag)`` and ``text(data)``; no document type
    declaration, no entity declaration (raised from the handler)."""

    def __init__(self, *, start: Callable[[str], object], end: Callable[[str], object], text: Callable[[str], object]):
        parser = expat.ParserCreate()
        parser.StartDoctypeDeclHandler = _refuse_dtd
        parser.EntityDeclHandler = _refuse_dtd
        parser.StartElementHandler = lambda tag, _attrs: start(tag)
        parser.EndElementHandler = end
        parser.CharacterDataHandler = text
        parser.buffer_text = True
        self.parser = parser

    def feed(self, piece: bytes) -> None:
        self._parse(piece, False)

    def close(self) -> None:
        self._parse(b"", True)

    def _parse(self, data: bytes, last: bool) -> None:
        try:
            self.parser.Parse(data, last)
        except expat.ExpatError:
            raise invalid("the body does not parse.") from None


def tree(pieces: Iterable[bytes], root: str) -> ElementTree.Element:
    """A small body's element tree, whose root element must be ``root``."""
    builder = ElementTree.TreeBuilder()
    parser = Parser(start=lambda tag: builder.start(tag, {}), end=builder.end, text=builder.data)
    for piece in pieces:
        parser.feed(piece)
    parser.close()
    element = builder.close()
    if element.tag != root:
        raise invalid(f"the root element is not {root}.")
    return element


class ChildTexts:
    """The root element's children as (tag, stripped text), in order, kept as
    they are parsed: no tree. The root must be ``root``; an element inside a
    child, or more than ``most`` children, is ``too_deep`` / ``too_many``
    (raised at once, the rest not parsed)."""

    def __init__(self, root: str, *, most: int, too_many: Callable[[], LeaseholdError],
                 too_deep: Callable[[], LeaseholdError]):
        self.root, self.most, self.too_many, self.too_deep = root, most, too_many, too_deep
        self.children: list[tuple[str, str]] = []
        self.depth = 0
        self.texts: list[str] = []  # the open child's pieces of text
        self.parser = Parser(start=self._start, end=self._end, text=self._text)

    def _start(self, tag: str) -> None:
        self.depth += 1
        if self.depth == 1 and tag != self.root:
            raise invalid(f"the root element is not {self.root}.")
        if self.depth == 3:
            raise self.too_deep()
        if self.depth == 2:
            if len(self.children) >= self.most:
                raise self.too_many()
            self.texts = []

    def _end(self, tag: str) -> None:
        if self.depth == 2:
            self.children.append((tag, "".join(self.texts).strip()))
        self.depth -= 1

    def _text(self, data: str) -> None:
        if self.depth == 2:
            self.texts.append(data)

    def feed(self, piece: bytes) -> None:
        self.parser.feed(piece)

    def close(self) -> list[tuple[str, str]]:
        self.parser.close()
        return self.children
