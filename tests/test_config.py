"""Config loading, overrides and validation messages."""
from pathlib import Path

import pytest

from cotrain.config import apply_overrides, build_config, load_config
from cotrain.errors import UserError


def test_defaults_and_overrides_parse_yaml_scalars():
    cfg = build_config({"recipe": "grpo"}, ["train.lr=3e-4", "grpo.group_size=4", "eval.splits=[test]",
                                            "task.n_ops=[2,3]", "train.bf16=false"])
    assert cfg.train.lr == 3e-4 and cfg.grpo.group_size == 4 and cfg.eval.splits == ["test"]
    assert cfg.task.options() == {"n_ops": [2, 3]} and cfg.train.bf16 is False


def test_model_path_replaces_default_preset():
    cfg = build_config({"model": {"path": "some/dir"}})
    assert cfg.model.path == "some/dir" and cfg.model.preset is None


@pytest.mark.parametrize("raw, overrides, message", [
    # unknown key names the closest valid one
    ({"train": {"lrr": 1}}, [], "unknown config key 'train.lrr' (did you mean 'train.lr'?)"),
    # a key in the wrong section is found in the right one
    ({}, ["grpo.lr=1e-3"], "did you mean 'train.lr'?"),
    ({}, ["trian.steps=3"], "did you mean 'train'?"),
    # wrong type
    ({}, ["train.steps=many"], "train.steps"),
    # group size below 2
    ({}, ["grpo.group_size=1"], "group_size must be at least 2"),
    # batch not divisible by group size
    ({"train": {"batch_size": 10}, "grpo": {"group_size": 4}}, [], "must be divisible by grpo.group_size"),
    # unknown recipe lists the choices
    ({"recipe": "ppo"}, [], "recipe"),
    # override without '='
    ({}, ["train.lr"], "override 'train.lr' is not of the form key.sub=value"),
    # an unquoted value with spaces reaches the parser as several words: the message says to quote it
    ({}, ["task={name:", "jsonl,", "path:", "f.jsonl}"], "override 'jsonl,' is not of the form key.sub=value (quote a value"),
    # a section given a scalar
    ({"train": 3}, [], "must be a mapping"),
    # compiled decoding has no drafting
    ({}, ["rollout.compile=true", "rollout.draft_tokens=4"], "rollout.compile and rollout.draft_tokens cannot be combined"),
    ({}, ["verifier.compile=true", "verifier.draft_tokens=4"], "cannot be combined"),
    # a larger final evaluation on no more problems than the final one
    ({}, ["eval.n=200", "eval.larger_n=200"], "larger_n (200) must exceed n (200)"),
])
def test_bad_configs_raise_one_clear_line(raw, overrides, message):
    with pytest.raises(UserError) as info:
        build_config(raw, overrides)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {steps: [1, 2\n")
    with pytest.raises(UserError, match="bad YAML .* at line"):
        load_config(bad)
    with pytest.raises(UserError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="mapping at the top level"):
        load_config(top)


def test_apply_overrides_creates_nested_sections():
    assert apply_overrides({}, ["a.b.c=1"]) == {"a": {"b": {"c": 1}}}


def test_tango_alpha_auto_is_the_paper_schedule_gated_by_reliability():
    t = build_config({"tango": {"alpha": "auto"}}).cotraining
    assert t.alpha == 0.1 and t.alpha_schedule == "auto"
    t = build_config({"tango": {"alpha": 0.3, "alpha_schedule": "auto"}}).cotraining
    assert t.alpha == 0.3 and t.alpha_schedule == "auto"


def test_the_cotraining_section_reads_its_old_name_tango():
    """`tango:` and `tango.KEY=` are read as `cotraining:` (its name since the consistency recipe and the
    verifier's RL read it too): in a file, in an override, mixed; one mapping holding both is refused; `cotrain
    keys tango` shows the section under its new name."""
    from cotrain.config import describe_keys

    new = build_config({"cotraining": {"alpha": 0.3, "credit": "min"}}, ["cotraining.gen_steps=5"])
    assert build_config({"tango": {"alpha": 0.3, "credit": "min"}}, ["tango.gen_steps=5"]) == new
    assert build_config({"tango": {"alpha": 0.3}}, ["cotraining.credit=min", "tango.gen_steps=5"]) == new
    assert build_config({}, ["tango.alpha=0.3", "cotraining.credit=min", "tango.gen_steps=5"]) == new
    assert "tango" not in new.to_dict() and new.to_dict()["cotraining"]["alpha"] == 0.3
    with pytest.raises(UserError, match="both tango: and cotraining:"):
        build_config({"tango": {"alpha": 0.3}, "cotraining": {"credit": "min"}})
    with pytest.raises(UserError, match="unknown config key 'cotraining.alpa'"):
        build_config({}, ["tango.alpa=0.3"])
    assert describe_keys("tango") == describe_keys("cotraining") and "cotraining.credit = 'to_go'" in describe_keys("tango")


DESCRIPTION_LIMIT = 150  # characters: a key's description in `cotrain keys` is one sentence


def test_every_key_is_described_in_one_sentence_and_the_longer_ones_in_the_reference():
    """Each config key's description is one short sentence; a key that needs more has its paragraph under
    docs/reference.md's "Keys in detail", and every key named there exists."""
    import re

    from cotrain import config as c

    described = {}
    for section, field in c.RunConfig.model_fields.items():
        model = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation, c.BaseModel) else None
        for name, f in (model.model_fields.items() if model else [(section, field)]):
            described[f"{section}.{name}" if model else section] = f.description or ""
    long = {k: len(d) for k, d in described.items() if len(d) > DESCRIPTION_LIMIT}
    assert not long, f"descriptions over {DESCRIPTION_LIMIT} characters (move the detail to docs/reference.md): {long}"
    reference = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text(encoding="utf-8")
    detail = reference.split("### Keys in detail", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^- `([a-z_]+\.[a-z_]+)`:", detail, flags=re.M)
    assert named and not set(named) - set(described), set(named) - set(described)

def _commands(text: str):
    """(config, overrides) of each `cotrain run|check CONFIG KEY=VALUE... [--flags]` in a COMMAND file."""
    import shlex

    for line in text.splitlines():
        line = line.split("  #")[0].split(" # ")[0].strip()
        for part in line.split("&&"):
            toks = shlex.split(part) if part.strip() and not part.strip().startswith("#") else []
            if len(toks) < 3 or toks[0] != "cotrain" or toks[1] not in ("run", "check"):
                continue
            args, overrides, i = toks[2:], [], 1
            while i < len(args):
                i, item = (i + 2, None) if args[i] == "--out" else (i + 1, args[i])
                if item is not None and not item.startswith("--"):
                    overrides.append(item)
            yield args[0], overrides


def test_every_committed_config_and_command_loads():
    """Every run config and sweep file under configs/, every run's config.yaml and every `cotrain run` or
    `cotrain check` line of a COMMAND under results/ validates with today's loader (old section names
    included): a result stays reproducible from what it records."""
    import copy
    import subprocess
    from functools import cache
    from pathlib import Path

    import yaml

    from cotrain.config import read_yaml_mapping
    from cotrain.runs.sweep import load_sweep

    fast = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the walk reads about a thousand files

    @cache
    def base(path: Path) -> dict:
        read_yaml_mapping(path, "config file")  # the loader's own checks, once a file
        return yaml.load(path.read_text(encoding="utf-8"), Loader=fast) or {}

    repo = Path(__file__).resolve().parents[1]
    files = subprocess.run(["git", "ls-files", "configs", "results"], cwd=repo, capture_output=True, text=True,
                           check=True).stdout.split()
    counts, failed = {"config": 0, "sweep": 0, "run config.yaml": 0, "COMMAND line": 0}, []
    for name in files:
        path = repo / name
        try:
            if name.startswith("configs/sweeps/") and name.endswith(".yaml"):
                load_sweep(path)
                counts["sweep"] += 1
            elif name.startswith("configs/") and name.endswith(".yaml"):
                load_config(path)
                counts["config"] += 1
            elif name.startswith("results/") and name.endswith("/config.yaml"):
                build_config(yaml.load(path.read_text(encoding="utf-8"), Loader=fast))
                counts["run config.yaml"] += 1
            elif name.endswith("/COMMAND"):
                for config, overrides in _commands(path.read_text(encoding="utf-8")):
                    build_config(copy.deepcopy(base(repo / config)), overrides)  # as load_config does
                    counts["COMMAND line"] += 1
        except UserError as err:
            failed.append(f"{name}: {err}")
    print(counts)
    assert not failed, "\n".join(failed[:10])
    assert counts["config"] >= 40 and counts["sweep"] >= 20 and counts["run config.yaml"] >= 400 and counts["COMMAND line"] >= 400
