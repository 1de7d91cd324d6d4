"""Which `cotraining.credit` constructions hold the two credit properties, measured over random groups: the
table of docs/design.md ("Process credit: two properties").

    python bench/credit_properties.py [--groups 2000]

For each construction, over seeded random groups (2-5 samples of 0-5 steps, random verdicts, final verdicts,
completeness and computing lines; tests/test_credit_properties.py's harness): the share of appends of one step to
one sample that raise an earlier token's process advantage with the group's statistics held (a length bonus), the
same share with the statistics recomputed (the effect through them added), and the share of failed samples' right-prefix steps whose
tokens do not all get a positive process advantage in a group that holds a rejected item. Pure arithmetic: the
figures are the same on any CPU.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_credit_properties import (  # noqa: E402
    CREDITS,
    TOL,
    _fix_computes,
    length_bonus,
    prefix_violations,
    random_group,
)

from cotrain.rl.tango import PROPERTIES  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2000)
    args = ap.parse_args()
    print("| credit | no length bonus | appends raising an earlier token, statistics held | ... "
          "recomputed | right-prefix credit | right-prefix steps not credited |")
    print("|---|---|---|---|---|---|")
    for credit in CREDITS:
        rng = random.Random(0)
        raised = raised_free = appends = uncredited = prefix_steps = 0
        for _ in range(args.groups):
            group = _fix_computes(random_group(rng))
            i = rng.randrange(len(group))
            for verdict in (True, False):
                if group[i]["verdicts"]:
                    appends += 1
                    raised += length_bonus(credit, group, i, verdict) > TOL
                    raised_free += length_bonus(credit, group, i, verdict, held=False) > TOL
            bad = prefix_violations(credit, group)
            uncredited += len(bad)
            prefix_steps += sum(next((k for k, v in enumerate(s["verdicts"]) if not v), len(s["verdicts"]))
                                for s in group if not s["final"])
        holds = PROPERTIES[credit]
        print(f"| `{credit}` | {'holds' if holds[0] else 'fails'} | {raised / max(appends, 1):.1%} | "
              f"{raised_free / max(appends, 1):.1%} | {'holds' if holds[1] else 'fails'} | "
              f"{uncredited / max(prefix_steps, 1):.1%} |")


if __name__ == "__main__":
    main()
