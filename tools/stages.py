"""The stages and what each declares, read from stages/<track>/NN_name/stage.json (the one list).

    import stages
    for s in stages.all_stages():            # track by track (stages/tracks.json), in name order
        s.name, s.track, s.parent, s.idea, s.target, s.features, s.sass, s.spill_budget

A stage's id (`name`) is <track>_NN_name, e.g. "ampere_04_swizzle": the CMake target, fa_run's
--stage, the CSV's stage column and the docs use it; its folder is stages/<track>/NN_name and its
page docs/stages/<track>/NN_name.md.

Standard library only; importable from any script in tools/ without touching sys.path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES_DIR = REPO / "stages"


@dataclass(frozen=True)
class Track:
    name: str    # folder under stages/, e.g. "hopper"
    title: str   # e.g. "Hopper track"
    about: str   # one sentence: what the track's stages use and build


@dataclass(frozen=True)
class Stage:
    name: str                 # the id, <track>_NN_name, e.g. "ampere_07_fast_softmax"
    track: str                # e.g. "ampere"
    folder_name: str          # e.g. "07_fast_softmax"
    parent: str | None        # the id of the stage its diff and page compare against
    idea: str                 # the one optimization, in a few words
    target: str               # "sm_80" or "sm_90a"
    features: tuple[str, ...]
    sass: dict = field(hash=False)          # {"require": [...], "forbid": [...], "versus_parent": [...]}
    spill_budget: dict = field(hash=False)  # {"sm_80": n, ..., "why": "..."}: LDL + STL per kernel
    # The features of the stage's backward pass (stage.json's "backward": {"features": [...]}); None for a
    # stage without one (every stage outside the backward track).
    backward_features: tuple[str, ...] | None = None
    stages_dir: Path = field(default=STAGES_DIR, hash=False, compare=False)

    @property
    def folder(self) -> Path:
        return self.stages_dir / self.track / self.folder_name

    @property
    def path(self) -> str:
        """The folder relative to the repository, e.g. 'stages/ampere/07_fast_softmax'."""
        return "stages/%s/%s" % (self.track, self.folder_name)

    @property
    def page(self) -> str:
        """Its page relative to the repository, e.g. 'docs/stages/ampere/07_fast_softmax.md'."""
        return "docs/stages/%s/%s.md" % (self.track, self.folder_name)

    @property
    def number(self) -> int:
        """Its number within its track."""
        return int(self.folder_name.split("_", 1)[0])

    @property
    def min_compute_capability(self) -> int:
        return 90 if self.target == "sm_90a" else 80


def tracks(stages_dir: Path = STAGES_DIR) -> list[Track]:
    """The tracks of stages/tracks.json, in order."""
    d = json.loads((stages_dir / "tracks.json").read_text())
    return [Track(t["name"], t["title"], t["about"]) for t in d["tracks"]]


def stage_id(track: str, folder_name: str) -> str:
    return "%s_%s" % (track, folder_name)


def load(track: str, folder_name: str, stages_dir: Path = STAGES_DIR) -> Stage:
    d = json.loads((stages_dir / track / folder_name / "stage.json").read_text())
    return Stage(name=stage_id(track, folder_name), track=track, folder_name=folder_name,
                 parent=d.get("parent") or None, idea=d["idea"], target=d["target"],
                 features=tuple(d.get("features", [])), sass=d.get("sass", {}),
                 spill_budget=d.get("spill_budget", {}), stages_dir=stages_dir,
                 backward_features=tuple(d["backward"].get("features", [])) if "backward" in d else None)


def load_id(name: str, stages_dir: Path = STAGES_DIR) -> Stage:
    """The stage of an id such as 'hopper_05_persistent' (track names have no underscore)."""
    track, _, folder_name = name.partition("_")
    return load(track, folder_name, stages_dir)


def all_stages(stages_dir: Path = STAGES_DIR) -> list[Stage]:
    """Every folder stages/<track>/NN_name with a stage.json, track by track in the order of
    stages/tracks.json, in name order within a track (the same list CMake builds)."""
    out = []
    for t in tracks(stages_dir):
        for p in sorted((stages_dir / t.name).glob("*/stage.json")):
            out.append(load(t.name, p.parent.name, stages_dir))
    return out


def by_name(stages_dir: Path = STAGES_DIR) -> dict[str, Stage]:
    return {s.name: s for s in all_stages(stages_dir)}


def short_id(name: str) -> str:
    """'<track>_NN' of a stage id: 'ampere_04' for 'ampere_04_swizzle'."""
    return "_".join(name.split("_", 2)[:2])


def selects(item: str, name: str) -> bool:
    """Whether one item of a stage selection (fa_run --stage, bench.py --stages, interleaved.py
    --stages) names the stage id `name`: the id itself or its '<track>_NN' (short_id), as
    common/registry.cpp.in's find_stage reads it."""
    return item == name or item == short_id(name)
