"""Prose out of documentation files: the paragraphs of a reST, plain-text, POD or HTML file (gzipped or not) that
read as English prose, markup removed.

Text, per file (`file_prose`):
    .rst .txt .pod (.gz)  blank-line paragraphs; markup lines dropped (reST directives `.. x::`, labels, comments,
                          directive options `:opt: value`, section underlines, POD commands `=head1`), inline
                          markup reduced to its text (:func:`len` -> len, ``x`` -> x, `text <url>`_ -> text,
                          C<x> -> x), wrapped lines joined
    .html .htm (.gz)      the text of block elements, one paragraph each, without <head>, <script>, <style>,
                          <pre> (code, screen output), <table> (data tables; DocBook's navigation bars) or
                          elements whose class marks navigation (navheader, navfooter, toc, index, ...)
Every paragraph then passes `is_prose`: mostly plain words (letters, with trailing punctuation). That drops
code, tables, option lists and non-Latin scripts without parsing them: a rough rule on purpose, which keeps
English text rather than exactly the documentation's prose. Folders named `translations` are skipped (the
kernel's Italian, Spanish, Chinese, ... copies).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator
from html.parser import HTMLParser
from pathlib import Path

TEXT_SUFFIXES = (".rst", ".txt", ".pod")
HTML_SUFFIXES = (".html", ".htm")
MIN_WORDS = 3  # a shorter paragraph is a label, a heading or a stray cell: not prose
PROSE_SHARE = 0.7  # of a paragraph's whitespace-separated words that must be plain words


def paragraphs(text: str) -> Iterator[str]:
    """Blank-line separated blocks of `text`, lines right-stripped."""
    block: list[str] = []
    for line in text.splitlines():
        if line.strip():
            block.append(line.rstrip())
        elif block:
            yield "\n".join(block)
            block = []
    if block:
        yield "\n".join(block)


def merge_paragraphs(paras: Iterable[str], doc_chars: int) -> Iterator[str]:
    """Paragraphs joined by blank lines into documents, each yielded once it reaches `doc_chars` characters."""
    doc = ""
    for para in paras:
        doc = f"{doc}\n\n{para}" if doc else para
        if len(doc) >= doc_chars:
            yield doc
            doc = ""
    if doc:
        yield doc


# a plain word: letters (inner apostrophes or hyphens), maybe in brackets, quotes or emphasis, maybe followed by
# sentence punctuation; `x.y()`, `--flag`, `0x1f`, `a=b`, `>>>` are not
_WORD = re.compile(r"""[("'*]*[A-Za-z]+(?:['-][A-Za-z]+)*[)"'*]*[.,;:!?]?[)"']*""")


def is_prose(para: str) -> bool:
    words = para.split()
    return len(words) >= MIN_WORDS and sum(bool(_WORD.fullmatch(w)) for w in words) >= PROSE_SHARE * len(words)


_MARKUP_LINE = re.compile(r"\s*(\.\.(\s|$)|:[\w-]+:(\s+\S+)?\s*$|=[a-z]+\d?\b|([=\-~^\"'`#*+_.:])\4{2,}\s*$)")
_ROLE = re.compile(r":[\w:.-]+:`~?([^`<]*?)\s*(<[^`>]*>)?`")  # :func:`len`, :ref:`title <target>`
_LINK = re.compile(r"`([^`<]+?)\s*<[^`>]*>`__?")  # `text <url>`_
_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`_{0,2}")  # ``code``, `interpreted`, `target`_
_POD = re.compile(r"[BCEFILSXZ]<([^<>|]*)(?:\|[^<>]*)?>")  # C<code>, L<text|target>
_LITERAL_BLOCK = re.compile(r"::$", re.M)  # reST's `text::` (a code block follows) reads `text:`
_LIST_ITEM = re.compile(r"([*\-+]|#\.|\d+\.|\(\d+\))\s")


def _unwrap(lines: list[str]) -> str:
    """Lines joined with single spaces, keeping a line break before each list item."""
    out: list[str] = []
    for line in lines:
        line = " ".join(line.split())
        if out and not _LIST_ITEM.match(line):
            out[-1] += " " + line
        else:
            out.append(line)
    return "\n".join(out)


def text_prose(text: str) -> list[str]:
    """The prose paragraphs of reStructuredText, POD or plain text, markup reduced to its words."""
    out = []
    for para in paragraphs(text):
        flat = "\n".join(line for line in para.splitlines() if not _MARKUP_LINE.match(line))
        flat = _POD.sub(r"\1", _POD.sub(r"\1", flat))  # twice: C<L<x>> nests
        flat = _LITERAL.sub(lambda m: m.group(1) or m.group(2), _LINK.sub(r"\1", _ROLE.sub(r"\1", flat)))
        para = _unwrap(_LITERAL_BLOCK.sub(":", flat).splitlines())
        if is_prose(para):
            out.append(para)
    return out


class _PageText(HTMLParser):
    """The text of an HTML page's block elements, without the elements the module doc lists."""

    SKIP_TAGS = frozenset({"head", "script", "style", "pre", "table", "nav", "noscript", "svg"})
    SKIP_CLASSES = frozenset({"navheader", "navfooter", "toc", "index", "indexdiv", "docnav", "navigation",
                              "sphinxsidebar", "related", "footer"})
    BLOCKS = frozenset({"p", "div", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "br",
                        "ul", "ol", "dl", "section", "title", "body", "tr"})
    VOID = frozenset({"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source"})

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._text: list[str] = []
        self._skip: list[bool] = []  # per open element: whether it or an ancestor is left out

    def flush(self) -> None:
        text = " ".join("".join(self._text).split())
        if text:
            self.blocks.append(text)
        self._text = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCKS:
            self.flush()
        if tag not in self.VOID:
            classes = set((dict(attrs).get("class") or "").split())
            self._skip.append((bool(self._skip) and self._skip[-1]) or tag in self.SKIP_TAGS
                              or bool(classes & self.SKIP_CLASSES))

    def handle_startendtag(self, tag, attrs):  # <br/>: opens nothing
        if tag in self.BLOCKS:
            self.flush()

    def handle_endtag(self, tag):
        if tag in self.BLOCKS:
            self.flush()
        if tag not in self.VOID and self._skip:
            self._skip.pop()  # generated pages are well nested: an end tag closes the last open element

    def handle_data(self, data):
        if not (self._skip and self._skip[-1]):
            self._text.append(data)


def html_prose(markup: str) -> list[str]:
    """The prose paragraphs of an HTML page."""
    page = _PageText()
    page.feed(markup)
    page.close()
    page.flush()
    return [b for b in page.blocks if is_prose(b)]


def file_prose(path: Path) -> list[str]:
    """The prose paragraphs of one documentation file (UTF-8, undecodable bytes replaced; `.gz` read through)."""
    data = path.read_bytes()
    name = path.name.lower()
    if name.endswith(".gz"):
        data, name = gzip.decompress(data), name.removesuffix(".gz")
    text = data.decode("utf-8", errors="replace")
    return html_prose(text) if name.endswith(HTML_SUFFIXES) else text_prose(text)
