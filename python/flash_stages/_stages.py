"""Which stage runs a call, and which computes its gradients: the stage declarations
(stages/<track>/NN_name/stage.json) and the choices.

The C library lists the stages it was built with, by id, and nothing more; what each one supports
(its "features") and where it runs (its "target") are declared in its stage.json, the one list the
whole project reads. The package reads them from the repository it lives in, so it is used from the
source tree (PYTHONPATH=python, or `pip install -e python/`), next to the library built from it.

Standard library only, like _checks.py: tests/test_python_args.py runs this without PyTorch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # python/flash_stages/_stages.py -> the repository


@dataclass(frozen=True)
class Stage:
    id: str                # <track>_NN_name, e.g. "hopper_17_warp_redo"
    track: str             # "ampere", "hopper", "experiments"
    target: str            # "sm_80" (runs on compute capability 8.0 and newer) or "sm_90a" (9.0 only)
    features: frozenset    # of "any_length", "causal", "gqa", "lse", "alibi"
    parent: str | None
    # What the stage's backward pass supports (stage.json's "backward": {"features": [...]}: "any_length",
    # "causal", "gqa", and the backward's own "deterministic": dQ summed in a fixed order), independently
    # of its forward; None for a stage without one (every stage outside the backward track).
    backward_features: frozenset | None = None

    def runs_on(self, capability: tuple) -> bool:
        """Whether a GPU of this compute capability, e.g. (9, 0), runs the stage's machine code: sm_90a
        code (wgmma, setmaxnreg) runs on 9.0 alone, sm_80 code on 8.0 and everything newer."""
        cc = capability[0] * 10 + capability[1]
        return cc == 90 if self.target == "sm_90a" else cc >= 80


def stages_dir() -> Path:
    return REPO / "stages"


@lru_cache(maxsize=None)
def catalogue(directory: str | None = None) -> tuple:
    """Every declared stage, track by track in the order of stages/tracks.json, by folder name within
    a track (the order CMake builds them in and the library lists them)."""
    root = Path(directory) if directory else stages_dir()
    tracks_file = root / "tracks.json"
    if not tracks_file.is_file():
        raise RuntimeError("flash_stages reads the stage declarations from the repository it lives in, and %s does not "
                           "exist: use the package from the source tree (PYTHONPATH=<repo>/python, or "
                           "`pip install -e <repo>/python`, an editable install)" % tracks_file)
    result = []
    for track in json.loads(tracks_file.read_text())["tracks"]:
        name = track["name"]
        if not (root / name).is_dir():  # a track declared before its first stage exists
            continue
        for folder in sorted(p for p in (root / name).iterdir() if (p / "stage.json").is_file()):
            declared = json.loads((folder / "stage.json").read_text())
            backward = declared.get("backward")
            backward_features = None if backward is None else frozenset(backward.get("features", []))
            result.append(Stage(id="%s_%s" % (name, folder.name), track=name, target=declared["target"],
                                features=frozenset(declared.get("features", [])), parent=declared.get("parent"),
                                backward_features=backward_features))
    return tuple(result)


def find(requested: str, stages) -> Stage | None:
    """A stage by its id (hopper_17_warp_redo) or its track and number alone (hopper_17), as fa_run and
    the C library take it (common/registry.cpp.in)."""
    for stage in stages:
        track_number = "_".join(stage.id.split("_")[:2])
        if requested in (stage.id, track_number):
            return stage
    return None


def _feature_list(features) -> str:
    return ", ".join(sorted(features)) if features else "none"


def choose(needed: frozenset, capability: tuple, built, requested: str | None = None, stages=None) -> Stage:
    """The stage that runs a call needing `needed` on a GPU of `capability`, among the `built` ids.

    requested None: the fastest stage this GPU runs that declares what the call needs. Each track's
    stages add one idea each to their parent, so a track's last stage is its fastest: on compute
    capability 9.0 the last Hopper-track stage that declares the features, else (ALiBi, which only
    the Ampere track has, or any other GPU of compute capability 8.0 or newer) the last Ampere-track
    stage that declares them, else (per-sequence K/V lengths and paged caches, which only the decoding
    track has) the last decoding-track stage that does. The experiments (measured, not adopted) and the backward
    track are never picked, only named.
    Only stages that handle any sequence length ("any_length") are picked, so that the default
    takes every shape.

    requested a stage id: that stage, if it is built, runs on this GPU and declares the features;
    otherwise ValueError saying which of these it is not."""
    stages = catalogue() if stages is None else stages
    built = set(built)
    cc_text = "%d.%d" % tuple(capability[:2])
    if requested:
        stage = find(requested, stages)
        if stage is None:
            raise ValueError("no stage '%s': a stage is named by its id, <track>_NN_name, or by <track>_NN "
                             "(flash_stages.stages() lists them)" % requested)
        if stage.id not in built:
            raise ValueError("the library was built without stage %s: rebuild it (cmake --build build --target fa_capi)"
                             % stage.id)
        if not stage.runs_on(capability):
            raise ValueError("stage %s is %s code, which runs on compute capability %s, not on this GPU's %s"
                             % (stage.id, stage.target, "9.0 only" if stage.target == "sm_90a" else "8.0 or newer",
                                cc_text))
        missing = needed - stage.features
        if missing:
            raise ValueError("stage %s does not support %s (it declares: %s)"
                             % (stage.id, _feature_list(missing), _feature_list(stage.features)))
        return stage

    if capability[0] * 10 + capability[1] < 80:
        raise ValueError("this GPU has compute capability %s: the kernels need 8.0 or newer" % cc_text)
    # The decoding track last: only it has per-sequence lengths (seqlens_k) and paged caches
    # (paged_kv), and its speed at other calls is its parent's at best.
    tracks = ("hopper", "ampere", "decode") if tuple(capability[:2]) == (9, 0) else ("ampere", "decode")
    for track in tracks:
        fitting = [s for s in stages if s.track == track and s.id in built and s.runs_on(capability)
                   and (needed | {"any_length"}) <= s.features]
        if fitting:
            return fitting[-1]
    raise ValueError("no stage in the library runs on compute capability %s with %s (tracks tried: %s)"
                     % (cc_text, _feature_list(needed), ", ".join(tracks)))


def choose_backward(needed: frozenset, capability: tuple, with_backward, stages=None, reasons=None) -> Stage:
    """The stage whose backward pass computes the gradients of a call that needs the backward features
    `needed` ("any_length", "causal", "gqa", "deterministic") on a GPU of `capability`, among the
    stages whose backward the library has (`with_backward`, ids): the backward track's last stage that
    declares them and runs on this GPU, as each track's last stage is its fastest. (A stage that
    declares "deterministic" runs its deterministic mode only for a call that needs it: the launch
    asks for it, FaCapiBackwardParams.deterministic.) The forward of the call is chosen on its own
    (choose()): the backward reads only its output and its LSE, which every stage computes alike.

    No such stage: NotImplementedError naming the features needed (with `reasons`, {feature: why},
    where given) and what the library's backward stages declare."""
    stages = catalogue() if stages is None else stages
    with_backward = set(with_backward)
    usable = [s for s in stages if s.track == "backward" and s.backward_features is not None
              and s.id in with_backward and s.runs_on(capability)]
    fitting = [s for s in usable if needed <= s.backward_features]
    if fitting:
        return fitting[-1]
    cc_text = "%d.%d" % tuple(capability[:2])
    without = ("compute it without gradients (under torch.no_grad() or torch.inference_mode(), or on detached "
               "inputs)")
    if not usable:
        raise NotImplementedError("no backward pass: the library has no backward-track stage that runs on compute "
                                  "capability %s; %s" % (cc_text, without))
    if "deterministic" in needed:  # the one need the caller can drop
        without = "pass deterministic=False (dQ's last bits may then differ from run to run), or " + without
    reasons = reasons or {}
    wanted = ", ".join("%s (%s)" % (f, reasons[f]) if f in reasons else f for f in sorted(needed))
    declared = "; ".join("%s: %s" % (s.id, _feature_list(s.backward_features)) for s in usable)
    raise NotImplementedError("the gradient of this call needs the backward feature%s %s, and no backward stage of the "
                              "library that runs on compute capability %s declares %s (%s); %s"
                              % ("s" if len(needed) > 1 else "", wanted, cc_text,
                                 "them all" if len(needed) > 1 else "it", declared, without))
