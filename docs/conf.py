"""Sphinx configuration of Assay's documentation site.

Pages are MyST Markdown, so they read the same on a code host. The build needs nothing from the
network (no intersphinx, the default theme), and the test suite builds it with ``-W``: a broken
reference, a heading anchor that does not exist or a page outside the table of contents fails it.
"""

project = "Assay"
author = "the Assay authors"
copyright = "the Assay authors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Deep-link headings the way a code host does (`[…](#some-heading)`, `[…](page.md#some-heading)`),
# so the same links work on the site and in the repository; BENCHMARKS.md and RELIABILITY.md link
# to their own level-3 headings.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# A link to a missing target is an error, not silently plain text.
nitpicky = True

html_theme = "alabaster"
html_title = "Assay"
html_theme_options = {
    "description": "Distributed scoring of LLM outputs",
    "fixed_sidebar": True,
    "show_relbars": True,
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}
