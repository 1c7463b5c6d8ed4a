"""The dashboard in a real browser: headless Debian Chromium driven by Selenium through the
system's chromedriver, against a real broker. Log in with the token, see an SDK job appear
with its acquisition path, and see a pool's held capacity change when the scaler creates a
pod. Screenshots are saved to `$FIREPOOL_TEST_ARTIFACTS` (default: the test's tmp dir).

Skipped where the browser is not installed, except under CI=true, where `.ci/run` installs
`chromium` and `chromium-driver` and a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from firepool.client import Client
from firepool.testing.service import BrokerThread

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - the dev extras install it
    webdriver = None  # type: ignore[assignment]

if not (CHROMIUM and DRIVER and webdriver is not None):
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI needs chromium, chromium-driver and selenium (see .ci/run)")
    pytest.skip("chromium, chromedriver or selenium is not installed", allow_module_level=True)

WAIT_S = 60.0


@pytest.fixture
def browser() -> Iterator[Any]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or ""
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER or ""), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("FIREPOOL_TEST_ARTIFACTS", tmp_path))
    where.mkdir(parents=True, exist_ok=True)
    return where


def held(driver: Any, pool: str) -> int:
    """The held pod count the page shows for `pool` (-1 when the row is not there yet)."""
    for row in driver.find_elements(By.CSS_SELECTOR, "#pools tbody tr"):
        cells = row.find_elements(By.TAG_NAME, "td")
        if cells and cells[0].text == pool:
            return int(row.find_element(By.CLASS_NAME, "held-count").text)
    return -1


def test_log_in_see_a_job_and_the_held_capacity_change(
    broker: BrokerThread, browser: Any, tmp_path: Path
) -> None:
    shots = artifacts(tmp_path)
    # The panel's markup is replaced at every refresh: an element found before one is stale
    # after it, so every check reads the page afresh inside a wait that retries stale reads.
    wait = WebDriverWait(
        browser, WAIT_S, poll_frequency=0.2, ignored_exceptions=[StaleElementReferenceException]
    )
    browser.get(f"{broker.url}/")
    wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
    browser.save_screenshot(str(shots / "dashboard-login.png"))
    browser.find_element(By.ID, "token").send_keys(broker.token)
    browser.find_element(By.ID, "unlock").click()
    wait.until(lambda d: d.find_element(By.ID, "caller").text == "local")
    wait.until(lambda d: held(d, "hint") == 0)  # no floor: nothing held before a job asks

    with Client(broker.url, broker.token) as client:
        job = client.run("hint", ["python", "-c", "pass"], lease_tag="browser", wait_timeout=60)
    path = job.pods[0].acquisition.value
    assert path == "new"  # the pool was empty: the scaler created the pod for this job

    def job_row(d: Any) -> Any:
        rows = d.find_elements(By.XPATH, f"//table[@id='jobs']//tr[td[1]='{job.id}']")
        return rows[0] if rows else False

    wait.until(job_row)
    wait.until(lambda d: "SUCCEEDED" in job_row(d).text)
    wait.until(lambda d: path in job_row(d).find_element(By.CLASS_NAME, "path").text)
    wait.until(lambda d: held(d, "hint") >= 1)  # the created pod is held capacity now
    wait.until(lambda d: d.find_element(By.ID, "capacity-chart").is_displayed())  # the plots
    wait.until(lambda d: d.find_element(By.ID, "latency-chart").is_displayed())
    browser.save_screenshot(str(shots / "dashboard-after-job.png"))
    assert (shots / "dashboard-after-job.png").stat().st_size > 0
