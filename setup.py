"""The package's long description: README.md, with each image whose link is relative made a line of text.

Everything else is in pyproject.toml.  A package index shows the README without the repository beside it, so a
relative image link (docs/img/roofline-fp8.png) is a broken image there; the project has no public URL yet to make
the links absolute.  Here such an image becomes "*Figure: ALT (PATH in the source distribution)*": on the index
page a caption that says where the figure is, while the README keeps its figures for readers of the repository.
An absolute link (https://...) is left as it is: once the project has a home, making the README's image links
absolute shows the figures on the index too, with nothing to change here.
"""

import re
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUILD_FILE = "_build_commit.txt"  # gemmbench.device.BUILD_FILE: read by git_sha() where there is no checkout

# ![alt](path) or ![alt](path "title"), where path does not start with a scheme (https:, http:, data:, ...)
RELATIVE_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>(?![A-Za-z][A-Za-z0-9+.-]*:)[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def long_description(readme: str) -> str:
    return RELATIVE_IMAGE.sub(lambda m: f"*Figure: {m['alt']} ({m['path']} in the source distribution)*", readme)


class BuildWithCommit(build_py):
    """A wheel carries the commit it was built from, so that its rows name the build (no .git where it runs)."""

    def run(self) -> None:
        super().run()
        here = Path(__file__).resolve().parent

        def git(*args: str) -> str:
            done = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True)
            return done.stdout.strip() if done.returncode == 0 else ""

        try:  # only gemmbench's own checkout: an sdist unpacked inside another repository is not that repository
            if git("rev-parse", "--show-toplevel") != str(here):
                return
            out, dirty = git("rev-parse", "--short=12", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
        except OSError:
            return
        if out:
            commit = out + ("-dirty" if dirty else "")
            Path(self.build_lib, "gemmbench", BUILD_FILE).write_text(commit + "\n")


setup(
    long_description=long_description(Path(__file__).with_name("README.md").read_text(encoding="utf-8")),
    long_description_content_type="text/markdown",
    cmdclass={"build_py": BuildWithCommit},
)
