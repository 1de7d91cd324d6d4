"""The lab: a study read from what `results/<study>/` keeps (runs/archive.py).

Layout read: `<study>/<arm>/seed<S>/{eval.json, metrics.jsonl.gz, env.json}`; the arm named `grpo` is the
baseline every other arm is paired with, seed by seed (cotrain.stats); an arm named `labelfree` is the
label-free arm of the plan's "excellent" criterion, whose gain is read against the start's greedy pass@1
(`<study>/starts/sft/eval.json`, else `starts/model/eval.json`, the published model's, the same problems as
the arms' final evaluation); an arm named
`grpo_long` is GRPO run on past the others' steps, read at each arm's FLOPs (equal compute). A verifier
warmed up once and committed as `<study>/starts/warm/verifier` is a cost the runs that start from it do not
log: the study adds that record's FLOPs (`<study>/starts/warm/metrics.jsonl.gz`) to their warm-up. An arm
whose runs are grpo's but for their precision (`train.bf16`, e.g. `grpo_fp32`) is GRPO run on another machine
kind: a seed of an arm that ran on another machine kind than grpo's is paired with it as well, below the table,
and the plan's criteria read that pairing where it covers every seed the plain one does. A run may also keep its
final model evaluated again on more problems, `<arm>/seed<S>/larger/{eval.json, outcomes.json}` (`eval.larger_n`,
or `cotrain eval RUN --n N --out RUN/larger/eval.json --outcomes RUN/larger/outcomes.json`): the study reads each
seed's pair there too, problem by problem, where both runs of the pair have one on the same problems (`larger_table`).

    cotrain study results/<study>        prints the table, writes <study>/table.md, <study>/curves.png and
                                         <study>/differences.png (each arm's paired difference with grpo)

The modules, by what each holds:

    runs.py      a study's runs loaded (`Run`), their settings, shared warm-ups and curves
    pairing.py   each arm paired with GRPO seed by seed on one machine kind, across kinds, on larger evaluations
    table.py     the plan's criteria and the study's table; `build_study`
    reading.py   the reading fixed before a study's runs (`<study>/reading.yaml`)
    figures.py   curves.png and differences.png
    judges.py    the label-free judges against the truth; best-of-N by each selector
    worlds.py    the worlds and the verifiers' warm-ups against their goals; a verifier on a study's runs
    gains.py     gains over a setting's values (`cotrain gains SPEC`)

Nothing that trains, evaluates or keeps a run imports the lab.
"""
