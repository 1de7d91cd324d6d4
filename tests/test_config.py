"""Config loading, overrides and validation messages."""
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
    ({}, ["train.lr"], "not of the form key.sub=value"),
    # a section given a scalar
    ({"train": 3}, [], "must be a mapping"),
    # compiled decoding has no drafting
    ({}, ["rollout.compile=true", "rollout.draft_tokens=4"], "rollout.compile and rollout.draft_tokens cannot be combined"),
    ({}, ["verifier.compile=true", "verifier.draft_tokens=4"], "cannot be combined"),
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
    t = build_config({"tango": {"alpha": "auto"}}).tango
    assert t.alpha == 0.1 and t.alpha_schedule == "auto"
    t = build_config({"tango": {"alpha": 0.3, "alpha_schedule": "auto"}}).tango
    assert t.alpha == 0.3 and t.alpha_schedule == "auto"
