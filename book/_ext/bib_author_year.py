"""The bibliography's labels in author-year form ("Gao and Callan, 2021b"), matching the text's
citations (``bibtex_reference_style: author_year``); pybtex's own styles label entries with
keys such as [GC21a]. A Sphinx extension the book loads from ``_config.yml``."""

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            people = entry.persons.get("author") or entry.persons.get("editor") or []
            names = [" ".join(p.last_names) for p in people]
            if len(names) > 2:
                who = f"{names[0]} et al."
            else:
                who = " and ".join(names) or entry.key
            yield f"{who}, {entry.fields.get('year', 'n.d.')}".replace("{", "").replace("}", "")


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = "author_year_title"


def setup(app):
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    return {"parallel_read_safe": True}
