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
