"""Tests for condenser_lite.data.wikitext: MediaWiki markup, dumps, WikiText lines and plain
Wikipedia articles cleaned into sections, on small made-up inputs."""

from __future__ import annotations

import bz2
from pathlib import Path

from condenser_lite.data import wikitext


MARKUP = """{{Infobox person|name=X|note={{nested|deep}}}}
'''Ada''' was a [[mathematician]] and [[Writer|writer]].<ref name="a">{{cite book|title=T}}</ref> She wrote [http://example.org notes] on the [[Analytical Engine]].
[[File:Ada.jpg|thumb|Portrait of [[Ada Lovelace|Ada]]]]
{| class="wikitable"
| cell || {{flag}}
|}
== Early life ==
Born in London.<!-- a comment --> See [[Category:1815 births]].
* a list item with ''italics''
[[de:Ada Lovelace]]"""


def test_clean_wikitext_markup():
    plain = wikitext.clean_wikitext_markup(MARKUP)
    sections = wikitext.split_wiki_sections(plain)
    assert [h for h, _ in sections] == ["", "Early life"]
    lead, early = ("\n".join(p) for _, p in sections)
    assert lead == ("Ada was a mathematician and writer. She wrote notes on the Analytical Engine.")
    assert early == "Born in London. See.\na list item with italics"


def _write_dump(path: Path) -> None:
    body = "Plain words here. " * 10
    page = ("<page><title>{title}</title><ns>{ns}</ns><id>{pid}</id>{redirect}"
            "<revision><text xml:space=\"preserve\">{text}</text></revision></page>")
    pages = [
        page.format(title="Alpha", ns=0, pid=1, redirect="",
                    text=f"{body}\n\n== History ==\n{body}\n== Short ==\ntoo short\n== References ==\n{body}"),
        page.format(title="Beta", ns=0, pid=2, redirect='<redirect title="Alpha" />', text="#REDIRECT [[Alpha]]"),
        page.format(title="Wikipedia:About", ns=4, pid=3, redirect="", text=body),
    ]
    xml = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">'
           + "".join(pages) + "</mediawiki>")
    with bz2.open(path, "wt", encoding="utf-8") as fh:
        fh.write(xml)


def test_parse_mediawiki_dump(tmp_path):
    dump = tmp_path / "tiny.xml.bz2"
    _write_dump(dump)
    rows, stats = wikitext.parse_mediawiki_dump(dump)
    assert [(r["doc_id"], r["title"], r["section"]) for r in rows] == [
        ("enwiki-1", "Alpha", ""), ("enwiki-1", "Alpha", "History")]
    assert stats.documents == 1  # redirect and project page skipped
    assert stats.dropped_short == 1 and stats.dropped_boilerplate == 1


def test_parse_wikitext_lines():
    body = "word @-@ like , 3 @.@ 5 <unk> text " * 4
    lines = ["\ufeff ", " = Title One = ", "", f" {body}", " = = Part = = ", f" {body}",
             " = = = Deeper = = = ", " tiny ", " = Title Two = ", f" {body}"]
    rows, stats = wikitext.parse_wikitext_lines(lines, prefix="wt")
    assert [(r["doc_id"], r["title"], r["section"]) for r in rows] == [
        ("wt-0", "Title One", ""), ("wt-0", "Title One", "Part"), ("wt-1", "Title Two", "")]
    assert rows[0]["text"].startswith("word-like , 3.5 [UNK] text")
    assert stats.dropped_short == 1 and stats.documents == 2


def test_split_plain_article():
    body = "This paragraph is long enough to be prose and it ends with a full stop."
    text = f"{body}\n\n{body}\n\nEarly life\n\n{body}\nSecond line.\n\nSee also\n\nOther page\nAnother page"
    sections = wikitext.split_plain_article(text)
    assert [h for h, _ in sections] == ["", "Early life", "See also"]
    assert sections[1][1] == [body, "Second line."]
