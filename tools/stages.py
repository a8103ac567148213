"""The stages and what each declares, read from stages/NN_name/stage.json (the one list of stages).

    import stages
    for s in stages.all_stages():            # in name order
        s.name, s.parent, s.idea, s.target, s.features, s.sass, s.spill_budget

Standard library only; importable from any script in tools/ without touching sys.path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES_DIR = REPO / "stages"


@dataclass(frozen=True)
class Stage:
    name: str                 # folder name, e.g. "07_fast_softmax"
    parent: str | None        # the stage its diff and page compare against; None for a track's first
    idea: str                 # the one optimization, in a few words
    target: str               # "sm_80" or "sm_90a"
    features: tuple[str, ...]
    sass: dict = field(hash=False)          # {"require": [...], "forbid": [...], "versus_parent": [...]}
    spill_budget: dict = field(hash=False)  # {"sm_80": n, ..., "why": "..."}: LDL + STL per kernel

    @property
    def folder(self) -> Path:
        return STAGES_DIR / self.name

    @property
    def number(self) -> int:
        return int(self.name.split("_", 1)[0])

    @property
    def min_compute_capability(self) -> int:
        return 90 if self.target == "sm_90a" else 80


def load(name: str, stages_dir: Path = STAGES_DIR) -> Stage:
    path = stages_dir / name / "stage.json"
    d = json.loads(path.read_text())
    return Stage(name=name, parent=d.get("parent") or None, idea=d["idea"], target=d["target"],
                 features=tuple(d.get("features", [])), sass=d.get("sass", {}),
                 spill_budget=d.get("spill_budget", {}))


def all_stages(stages_dir: Path = STAGES_DIR) -> list[Stage]:
    """Every folder of stages/ that has a stage.json, in name order (the same list CMake builds)."""
    return [load(p.parent.name, stages_dir) for p in sorted(stages_dir.glob("*/stage.json"))]


def by_name(stages_dir: Path = STAGES_DIR) -> dict[str, Stage]:
    return {s.name: s for s in all_stages(stages_dir)}
