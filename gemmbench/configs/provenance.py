"""Where a config came from (Provenance), kept beside the config (Launch.provenance) and said in the row's `config`: the
GPU's own stored configs (or a config fitted to M that ran faster than them), a nearer GPU's borrowed, a run's quick
search, or the only candidate (the lookup: config_sources.py, tuning.py), or an inference engine's config file
(engine_import.py). Its own module so that each of those reads it without importing the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from gemmbench.configs.inference_engines import InferenceEngine

SOURCES = ("stored", "stored-neighbour", "fitted", "borrowed", "searched", "only", *(e.value for e in InferenceEngine))
FILED = ("stored", "stored-neighbour", "borrowed")  # always from a stored file and bucket
TIMED = ("stored-neighbour", "fitted")  # chosen by timing stored buckets' configs (and a fitted one) at this M
FITTED = "fitted"  # the key of the fitted config among a provenance's neighbours (beside the buckets' numbers)


@dataclass(frozen=True)
class Provenance:
    """Where a config came from, kept beside it (choose(), Launch.provenance), never inside it; in the row's `config`
    JSON its keys come after the config's.  "stored": from `file` (a shipped file relative to the package's configs
    folder, a user's file as its full path: overlay_buckets), the winner of M bucket `bucket`; "stored-neighbour":
    the same, where M lies between two stored buckets and `bucket`'s config was the faster of the two at this M
    (`neighbours`: each bucket, lower first, with its µs in this process's quick timing, None where it failed to
    run), or where M is no stored bucket and the kernel offered configs fitted to M, timed beside the bucket or two
    that would serve (FITTED with the fastest one's µs among `neighbours`); "fitted": a fitted config, faster than
    the buckets' (no file or bucket: it is shaped in the run, e.g. a tile width that fills the GPU's waves at this M,
    not stored); "borrowed": a stored config of another GPU of the same compute capability (`borrowed`: its configs
    folder, NVIDIA_H100_80GB_HBM3), file and bucket as "stored"; "searched": the fastest of a few candidates timed by
    a run (with file and bucket once stored in the user's folder, which the next run reads; neither where storing is
    off); "only": nothing to choose (one candidate, or Triton's CPU interpreter); an InferenceEngine's name: the
    engine's config `file` (its name), the entry `key` (tokens) that the engine's own rule picks for the row's M."""

    source: str  # one of SOURCES
    file: Optional[str] = None
    bucket: Optional[int] = None
    neighbours: Optional[tuple[tuple[int | str, Optional[float]], ...]] = None
    key: Optional[int] = None
    borrowed: Optional[str] = None

    def __post_init__(self) -> None:
        stored = self.source in FILED or (self.source == "searched" and self.file is not None)
        engine = self.source in InferenceEngine.__members__
        placed = (self.file is not None, self.bucket is not None, self.key is not None)
        if self.source not in SOURCES or placed != (stored or engine, stored, engine):
            raise ValueError(f"not a provenance (a stored config has a file and a bucket, an engine's a file and a "
                             f"key, others neither): {self!r}")  # fmt: skip
        if (self.borrowed is not None) != (self.source == "borrowed"):
            raise ValueError(f"not a provenance (a borrowed config, and only that, names the GPU lent): {self!r}")
        if (self.neighbours is not None) != (self.source in TIMED):
            raise ValueError(f"not a provenance (a stored-neighbour or fitted config, and only that, has neighbours): "
                             f"{self!r}")  # fmt: skip
        if self.source == FITTED and not any(b == FITTED for b, _ in self.neighbours or ()):
            raise ValueError(f"not a provenance (a fitted config was timed among the neighbours): {self!r}")

    def to_dict(self) -> dict[str, Any]:
        """Its keys in the row's `config` JSON: source; borrowed (the lending GPU's folder); where stored, file and
        bucket (imported: file and key); for a
        stored-neighbour or fitted config, "neighbours_us": {"<bucket>": µs or null, ...}, lower bucket first, and
        "fitted_us": the fastest fitted config's µs, or null where none ran, where fitted configs were timed beside
        them."""
        fields = (("source", self.source), ("borrowed", self.borrowed), ("file", self.file), ("bucket", self.bucket),
                  ("key", self.key))  # fmt: skip
        out: dict[str, Any] = {k: v for k, v in fields if v is not None}
        if self.neighbours is not None:
            out["neighbours_us"] = {str(b): us for b, us in self.neighbours if b != FITTED}
            out.update(("fitted_us", us) for b, us in self.neighbours if b == FITTED)
        return out

    def __getitem__(self, key: str) -> Any:
        # Read by key where the dict it replaces was: `gemmbench tune --skip-stored` takes stored(...)[1]["bucket"].
        return self.to_dict()[key]
