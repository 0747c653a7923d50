"""Sphinx configuration. Build with `python -m sphinx -W -b html docs docs/_build/html`."""

project = "marft"
author = "marft contributors"
copyright = "2026, marft contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
html_theme = "alabaster"
suppress_warnings = ["myst.xref_missing"]
