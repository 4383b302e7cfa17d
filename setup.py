"""The package's long description: README.md, with each image whose link is relative made a line of text.

Everything else is in pyproject.toml.  A package index shows the README without the repository beside it, so a
relative image link (docs/img/roofline-fp8.png) is a broken image there; the project has no public URL yet to make
the links absolute.  Here such an image becomes "*Figure: ALT (PATH in the source distribution)*": on the index
page a caption that says where the figure is, while the README keeps its figures for readers of the repository.
An absolute link (https://...) is left as it is: once the project has a home, making the README's image links
absolute shows the figures on the index too, with nothing to change here.

It also writes the commit a wheel or sdist is built from into its package (gemmbench/build_id.py), so that the rows
of an install without .git name their build.
"""

import importlib.util
import re
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# gemmbench/build_id.py, loaded by path: pure standard library, nothing of the package's dependencies at build time
_spec = importlib.util.spec_from_file_location("gemmbench_build_id", HERE / "gemmbench" / "build_id.py")
assert _spec is not None and _spec.loader is not None
build_id = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_id)

# ![alt](path) or ![alt](path "title"), where path does not start with a scheme (https:, http:, data:, ...)
RELATIVE_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>(?![A-Za-z][A-Za-z0-9+.-]*:)[^)\s]+)(?:\s+\"[^\"]*\")?\)")


def long_description(readme: str) -> str:
    return RELATIVE_IMAGE.sub(lambda m: f"*Figure: {m['alt']} ({m['path']} in the source distribution)*", readme)


def _write_commit(package_dir: Path) -> None:
    """The build's commit into the distribution's package (rows of an install without .git name it): this checkout's,
    or, building from an unpacked sdist, the one the sdist carries."""
    commit = build_id.build_commit(HERE / "gemmbench")
    if commit and package_dir.is_dir():
        (package_dir / build_id.BUILD_FILE).write_text(commit + "\n")


class BuildWithCommit(build_py):
    def run(self) -> None:
        super().run()
        _write_commit(Path(self.build_lib) / "gemmbench")


class SdistWithCommit(sdist):
    def make_release_tree(self, base_dir, files) -> None:
        super().make_release_tree(base_dir, files)
        _write_commit(Path(base_dir) / "gemmbench")


setup(
    long_description=long_description(Path(__file__).with_name("README.md").read_text(encoding="utf-8")),
    long_description_content_type="text/markdown",
    cmdclass={"build_py": BuildWithCommit, "sdist": SdistWithCommit},
)
