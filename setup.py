"""The package's long description: README.md, with each image whose link is relative made a line of text.

Everything else is in pyproject.toml.  A package index shows the README without the repository beside it, so a
relative image link (docs/img/roofline-fp8.png) is a broken image there; the project has no public URL yet to make
the links absolute.  Here such an image becomes "*Figure: ALT (PATH in the source distribution)*": on the index
page a caption that says where the figure is, while the README keeps its figures for readers of the repository.
An absolute link (https://...) is left as it is: once the project has a home, making the README's image links
absolute shows the figures on the index too, with nothing to change here.
"""

import re
from pathlib import Path

from setuptools import setup

# ![alt](path) or ![alt](path "title"), where path does not start with a scheme (https:, http:, data:, ...)
RELATIVE_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>(?![A-Za-z][A-Za-z0-9+.-]*:)[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def long_description(readme: str) -> str:
    return RELATIVE_IMAGE.sub(lambda m: f"*Figure: {m['alt']} ({m['path']} in the source distribution)*", readme)


setup(
    long_description=long_description(Path(__file__).with_name("README.md").read_text(encoding="utf-8")),
    long_description_content_type="text/markdown",
)
