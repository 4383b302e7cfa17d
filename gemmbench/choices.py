"""The base of gemmbench's single-choice option values (TimingMode, OutputFormat, CompareFormat, InferenceEngine):
a str Enum whose str() is its value.

Why str() matters: Typer hands a parsed option through its Enum converter, which looks the value up by str(value)
and gives None where it does not find it.  On Python 3.11+ str() of a plain (str, Enum) member is "TimingMode.stream",
so with a `parser=` returning the member, the GPU machine's Typer (Python 3.12) turned `--timing stream` into None,
and the command's default: a `--timing stream` sweep ran cold (its rows said timing_mode "cold").
"""

from __future__ import annotations

import enum


class Choice(str, enum.Enum):
    def __str__(self) -> str:
        return str(self.value)
