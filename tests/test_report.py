"""`cotrain report`: the page's content for a run and a committed study, its refusals, and the page in
headless Chromium driven by selenium (no console error, the named charts and the criteria table in the
DOM, each chart's box on a screenshot not blank). The browser test fails, never skips, without
Debian's `chromium` and `chromium-driver` (`make install` installs them)."""
import io
import shutil
from pathlib import Path

import pytest

from cotrain.analysis.report import build_report, kind_of
from cotrain.cli import main
from cotrain.config import build_config
from cotrain.errors import UserError
from tests.conftest import nano_config, run_recipe

STUDY = Path(__file__).resolve().parents[1] / "results" / "sparse_zen4"


@pytest.fixture(scope="module")
def page(sft_run, tmp_path_factory):
    """(the HTML path, the run dir): a 3-step nano tango run and the committed sparse_zen4 study."""
    out = tmp_path_factory.mktemp("report")
    raw = nano_config("tango", init=str(sft_run[0]), train={"steps": 3},
                      verifier={"warmup_sft_steps": 10, "warmup_samples": 64, "solutions": 8, "max_new_tokens": 40},
                      tango={"eval_n": 10}, eval={"every": 0, "k": 0, "n": 10, "n_sampled": 8})
    run_recipe(build_config(raw), out / "run")
    return build_report([out / "run", STUDY], out / "report.html"), out / "run"


def test_the_page_holds_the_run_and_the_study(page):
    html_path, run_dir = page
    text = html_path.read_text(encoding="utf-8")
    assert kind_of(run_dir) == "run" and kind_of(STUDY) == "study"
    for ident in ("chart-0-run-curves", "chart-0-run-cotrain", "criteria-1-sparse_zen4", "chart-1-sparse_zen4-study",
                  "chart-1-sparse_zen4-bon",     # its vstar arm measured best-of-N
                  "chart-1-sparse_zen4-judge"):  # its self_rewarding arm logged its judge against the truth
        assert f'id="{ident}"' in text
    assert "http://" not in text and "https://" not in text  # self-contained: nothing to fetch
    assert "tango_auto" in text and "auto safe" in text       # the study's arms and criteria
    assert "train.steps" in text and "samples.jsonl" in text  # the config's differences, the samples table
    assert (run_dir / "samples.jsonl").is_file() and '"verdict"' in (run_dir / "samples.jsonl").read_text()
    # a directory of runs (the demo's) shows each run in it
    whole = build_report([run_dir.parent], run_dir.parent / "dir.html").read_text(encoding="utf-8")
    assert 'id="run-0-run"' in whole and 'id="chart-0-run-curves"' in whole


def test_report_refuses_what_is_not_a_run_sweep_or_study(tmp_path):
    with pytest.raises(UserError, match="holds no run"):
        build_report([tmp_path], tmp_path / "r.html")
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "r.html")]) == 2
    assert not (tmp_path / "r.html").exists()


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are missing: run `make install` (apt-get install chromium chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def test_the_page_in_headless_chromium(page):
    from PIL import Image
    from selenium.webdriver.common.by import By

    browser = _browser()
    try:
        browser.get(page[0].resolve().as_uri())
        assert browser.title == "cotrain report"
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert not errors, errors
        charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
        names = {c.get_attribute("id") for c in charts}
        assert {"chart-0-run-curves", "chart-1-sparse_zen4-study"} <= names, names
        criteria = browser.find_element(By.ID, "criteria-1-sparse_zen4")
        assert len(criteria.find_elements(By.TAG_NAME, "tr")) > 5
        for chart in charts:
            browser.execute_script("arguments[0].scrollIntoView();", chart)
            img = chart.find_element(By.TAG_NAME, "img")
            assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 100
            shot = Image.open(io.BytesIO(chart.screenshot_as_png)).convert("L")
            low, high = shot.getextrema()
            assert high - low > 100 and len(set(shot.getdata())) > 20, f"{chart.get_attribute('id')} looks blank"
    finally:
        browser.quit()


def _fake_run(run: Path, recipe: str, correct: str, outcomes: bool = True) -> Path:
    """A run directory as a finished run leaves it, written by hand: its config, two metrics rows, eval.json."""
    import json

    run.mkdir(parents=True)
    (run / "config.yaml").write_text(f"recipe: {recipe}\n")
    (run / "metrics.jsonl").write_text('{"step": 1, "gen/reward": 0.1}\n{"step": 2, "gen/reward": 0.2}\n')
    n, right = len(correct), correct.count("1")
    (run / "eval.json").write_text(json.dumps({"generator": {"test": {
        "pass@1": right / n, "n": n, "pass@1_ci95_lo": 0.1, "pass@1_ci95_hi": 0.9}}}))
    if outcomes:
        (run / "outcomes.json").write_text(json.dumps({"test": {"correct": correct, "questions_sha256": "q"}}))
    return run


def test_a_report_of_several_runs_opens_with_their_comparison(tmp_path):
    """Each run's final pass@1 with its interval, then each run's difference from the first: paired over the
    problems where both kept their outcomes on the same problems, unpaired (wider) otherwise; the demo's figure
    where the directory of runs holds one."""
    from PIL import Image

    demo = tmp_path / "demo"
    _fake_run(demo / "grpo", "grpo", "1100")
    _fake_run(demo / "tango", "tango", "1110")
    _fake_run(demo / "other", "tango", "1110", outcomes=False)
    Image.new("RGB", (40, 30), "white").save(demo / "demo.png")
    text = build_report([demo], tmp_path / "report.html").read_text(encoding="utf-8")
    assert text.index('id="comparison"') < text.index('id="run-0-grpo"')
    assert "0.500 [0.100, 0.900] (n 4)" in text and "0.750 [0.100, 0.900] (n 4)" in text
    # paired: the per-problem differences 0, 0, 1, 0 have sd 0.5, over sqrt(4): ±1.96 × 0.25 around +25 points
    assert "tango − grpo" in text and "+25.0 [-24.0, +74.0] paired" in text
    # unpaired: ±1.96 × sqrt((0.25 + 0.1875) / 4) = ±64.8 points
    assert "other − grpo" in text and "+25.0 [-39.8, +89.8] unpaired" in text
    assert 'id="chart-demo"' in text
    single = build_report([demo / "grpo"], tmp_path / "one.html").read_text(encoding="utf-8")
    assert 'id="comparison"' not in single
