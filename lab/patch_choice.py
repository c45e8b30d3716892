"""The patch arm's recipe, chosen by the rule written before its screen ran (issue 29, deliverable 3;
reports/recipes/README.md, What remains, item 5): code, so that the reading after the screen is
the stated one and nothing else.

Each candidate is a recipes summary (`lab/recipes.py --summary-only --out POOL --pool ...`)
of the patch model on the echo control. The rule:

* the patch arm takes the candidate that finds the echo in more of its N=32768 runs; a tie goes to
  the one with the smaller nesting value (N=32768 cut to 512 bars minus N=512, test log-loss);
* if none finds it in at least 12 of 15 runs (the per-bar rule's bar, `recipes.FOUND_BAR`), the arm
  still takes the better one into the third edition, and the plan says its positive control is
  expected to fail;
* if none finds it at all, nothing is chosen: the next candidates are a smaller patch model
  (`model.d_model=128`) and patches of 4 bars;
* `--final` (the round of those next candidates, read with every earlier round's candidates; stated
  before it ran, 2026-12-05): if none finds it then either, the arm takes the candidate with the
  smallest nesting value into the third edition and the plan says its positive control is expected
  to fail. The screens stop there: patch tokens as screened read no far context on the echo, and
  the answer for them says so.

A candidate with fewer than 15 N=32768 runs decides nothing yet (one line says which), unless no
outcome of the missing runs can change the choice or its verdict (`settled`: one candidate's finders
already exceed what any other could reach, and it has reached the bar or cannot).

    python lab/patch_choice.py reports/recipes/pools/patch-drop-seed0 reports/recipes/pools/patch-drop-q-seed0

prints the verdict and, when one is chosen, the `--arm` item of `tsflash preregister` for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FOUND_BAR = (12, 15)  # recipes.FOUND_BAR: found in at least 12 of the 15 N=32768 runs (5 folds x 3 seeds)
LONGEST, SHORT = 32768, 512
SOURCE = "long-memory"  # the echo control
NEXT_CANDIDATES = ("model.d_model=128", "model.patch=4")
ARM = "patch"  # the plan's patch arm, named with its patch size: patch16, patch4
ARM_KEYS = ("model.", "train.tokens_per_step=")  # a candidate's own settings; the rest is the plan's rule or the screen's


def candidate(folder: Path) -> dict:
    """A candidate's reading from its summary: its overrides, runs found of those at the longest N,
    and its nesting value (None before its runs are complete)."""
    path = Path(folder) / "summary.json"
    if not path.is_file():
        raise SystemExit(f"{folder}: no summary.json (write it with lab/recipes.py --summary-only --out {folder})")
    runs = [r for r in json.loads(path.read_text())["runs"] if r["source"] == SOURCE and r.get("patch", 1) > 1]
    if len(runs) != 1:
        raise SystemExit(f"{path}: expected one patch run on the {SOURCE} control, found {len(runs)}")
    (run,) = runs
    longest = run["per_n"].get(str(LONGEST), {})
    nesting = run["nesting"].get(str(LONGEST), {}).get("log_loss", {}).get("mean")
    return {"folder": str(folder), "overrides": [*run["overrides"], *run["extra"]],
            "found": longest.get("found") or 0, "runs": longest.get("cells", 0), "nesting": nesting}


def settled(candidates: list[dict], need: tuple[int, int] = FOUND_BAR) -> bool:
    """Whether the missing runs (fewer than `need`'s runs) cannot change the choice or its verdict: one
    candidate's finders exceed every other's most (its finders plus its missing runs, all found), and
    that candidate has reached the bar already or cannot reach it with its own missing runs."""
    bar, runs = need
    most = {c["folder"]: c["found"] + max(runs - c["runs"], 0) for c in candidates}
    leader = max(candidates, key=lambda c: c["found"])
    beats_all = all(leader["found"] > most[c["folder"]] for c in candidates if c is not leader)
    return leader["found"] > 0 and beats_all and (leader["found"] >= bar or most[leader["folder"]] < bar)


def choose(candidates: list[dict], need: tuple[int, int] = FOUND_BAR, final: bool = False) -> dict:
    """The stated rule over `candidate` readings: {"verdict", "chosen" (a candidate or None), "sentence"};
    `final`: the last round, where none found still chooses (the smallest nesting value)."""
    bar, runs = need
    tally = ", ".join(f"{c['folder']} {c['found']} of {c['runs']}" for c in candidates)
    if (short := [c for c in candidates if c["runs"] < runs]) and not settled(candidates, need):
        return {"verdict": "undecided", "chosen": None,
                "sentence": f"Undecided: {short[0]['folder']} has {short[0]['runs']} of its {runs} N={LONGEST} runs "
                            f"(found at N={LONGEST}: {tally})."}
    if all(c["found"] == 0 for c in candidates):
        if final:
            if any(c["nesting"] is None for c in candidates):
                return {"verdict": "undecided", "chosen": None,
                        "sentence": f"Undecided: none found, and not every candidate has its nesting value ({tally})."}
            chosen = min(candidates, key=lambda c: c["nesting"])
            return {"verdict": "chosen, control expected to fail", "chosen": chosen,
                    "sentence": f"Chosen: {chosen['folder']} (no candidate finds the echo at N={LONGEST}, the last "
                                f"round: the smallest nesting value, {chosen['nesting']:+.5f} nats per bar; found: "
                                f"{tally}): the plan says the patch arm's positive control is expected to fail."}
        return {"verdict": "none found", "chosen": None,
                "sentence": f"No candidate finds the echo at N={LONGEST} ({tally}): nothing is chosen; the next "
                            f"candidates are {' and '.join(f'`{c}`' for c in NEXT_CANDIDATES)}."}
    most = max(c["found"] for c in candidates)
    tied = [c for c in candidates if c["found"] == most]
    if len(tied) > 1 and any(c["nesting"] is None for c in tied):
        return {"verdict": "undecided", "chosen": None,
                "sentence": f"Undecided: a tie at {most} of {runs} without every nesting value ({tally})."}
    chosen = min(tied, key=lambda c: c["nesting"]) if len(tied) > 1 else tied[0]
    why = (f"the most finders, {most} of {tied[0]['runs']}" if len(tied) == 1 else
           f"a tie at {most} of {runs}, the smaller nesting value ({chosen['nesting']:+.5f} nats per bar)")
    if short:
        why += (f"; settled with {sum(runs - c['runs'] for c in short)} N={LONGEST} run(s) missing, which no "
                "outcome of can change")
    if most >= bar:
        return {"verdict": "chosen", "chosen": chosen,
                "sentence": f"Chosen: {chosen['folder']} ({why}; found at N={LONGEST}: {tally})."}
    return {"verdict": "chosen, control expected to fail", "chosen": chosen,
            "sentence": f"Chosen: {chosen['folder']} ({why}; found at N={LONGEST}: {tally}), below the bar of {bar} "
                        f"of {runs}: the plan says the patch arm's positive control is expected to fail."}


def arm_item(chosen: dict) -> str:
    """The `tsflash preregister --arm` item of the chosen candidate: its own settings (the plan's shared
    --set items carry the rule; a screen's stopping override stays in the screen)."""
    own = [o for o in chosen["overrides"] if o.startswith(ARM_KEYS)]
    patch = next(o.split("=", 1)[1] for o in own if o.startswith("model.patch="))
    return f"{ARM}{patch}=" + ",".join(own)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", type=Path, nargs="+", help="each candidate's recipes output folder (its summary.json)")
    ap.add_argument("--final", action="store_true", help="the last round: none found still chooses (smallest nesting)")
    args = ap.parse_args(argv)
    result = choose([candidate(f) for f in args.folders], final=args.final)
    print(result["sentence"])
    if result["chosen"] is not None:
        print(f"--arm {arm_item(result['chosen'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
