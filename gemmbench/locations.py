"""Where gemmbench keeps files on this machine: what the package ships, and the user's own folders.

The package ships read-only data: the tuned configs (`gemmbench/kernels/configs`, from the repository's
`gemmbench/kernels/configs/`) and the named baselines (`gemmbench/baselines`).
What a user makes goes to the user's folders (platformdirs: on Linux `~/.config/gemmbench` and
`~/.local/share/gemmbench`, or where XDG_CONFIG_HOME and XDG_DATA_HOME point), never into the installed package:
a read-only install stays usable, and an upgrade keeps what the user tuned.  An environment variable names another
folder for each:

  GEMMBENCH_CONFIG_DIR    tuned configs (`gemmbench tune` writes here; read over the shipped ones)
  GEMMBENCH_BASELINE_DIR  the user's named baselines (searched after ./results/baselines, before the shipped ones)

The shipped folders are found without importing their packages: importing gemmbench.kernels registers every
kernel (torch, triton), which `gemmbench baseline list` or a config lookup need not pay for.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import platformdirs

APP = "gemmbench"
CONFIG_DIR_ENV = "GEMMBENCH_CONFIG_DIR"
BASELINE_DIR_ENV = "GEMMBENCH_BASELINE_DIR"


def _package_dir(package: str) -> Path:
    """The folder of an installed subpackage of gemmbench, found without running its __init__."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed with gemmbench (a broken install?)")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def shipped_configs_dir() -> Path:
    """The tuned configs the package ships (gemmbench/kernels/configs in the repository)."""
    return _package_dir("gemmbench.kernels") / "configs"


def user_configs_dir() -> Path:
    """Where `gemmbench tune` writes and where configs that overlay the shipped ones are read."""
    if os.environ.get(CONFIG_DIR_ENV):
        return Path(os.environ[CONFIG_DIR_ENV])
    return platformdirs.user_config_path(APP) / "configs"


def shipped_baselines_dir() -> Path:
    """The named baselines the package ships (gemmbench/baselines)."""
    return _package_dir("gemmbench.baselines")


def user_baselines_dir() -> Path:
    """The user's own named baselines, searched after the working directory's."""
    if os.environ.get(BASELINE_DIR_ENV):
        return Path(os.environ[BASELINE_DIR_ENV])
    return platformdirs.user_data_path(APP) / "baselines"
