"""Rebuild the stored start checkpoints of the test world (see tests/conftest.py for why they are stored).

    python tests/assets/build.py

nano_sft/: the nano model (float64) after the SFT run `SFT_START` of conftest.py, its eval.json, metrics.jsonl and config.yaml.
nano_verifier/: that model warmed up as a verifier (tango's labelled SFT warm-up, `WARMUP` of test_tango.py).
Rebuilding changes every golden value of the recipes' tests: do it only when the model format changes,
and update the goldens in the same commit.
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from cotrain.config import build_config  # noqa: E402
from cotrain.recipes import sft, tango  # noqa: E402
from tests.conftest import ASSETS, SFT_START, nano_config  # noqa: E402
from tests.test_tango import WARMUP  # noqa: E402


def main() -> None:
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "sft"
        results = sft.run(build_config(nano_config("sft", **SFT_START)), run)
        shutil.rmtree(ASSETS / "nano_sft", ignore_errors=True)
        shutil.copytree(run / "final" / "generator", ASSETS / "nano_sft" / "generator")
        for name in ("metrics.jsonl", "config.yaml"):  # so that the stored run plots as a run
            shutil.copy(run / name, ASSETS / "nano_sft" / name)
        (ASSETS / "nano_sft" / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
        warm = Path(tmp) / "warm"
        raw = nano_config("tango", init=str(run), train={"steps": 0}, verifier=dict(WARMUP), tango={"eval_n": 20},
                          eval={"k": 0, "n": 10, "every": 0})
        tango.run(build_config(raw), warm)
        shutil.rmtree(ASSETS / "nano_verifier", ignore_errors=True)
        shutil.copytree(warm / "warmup" / "verifier", ASSETS / "nano_verifier")
    print(f"wrote {ASSETS / 'nano_sft'} (test pass@1 {results['generator']['test']['pass@1']:.3f}) and "
          f"{ASSETS / 'nano_verifier'}")


if __name__ == "__main__":
    main()
