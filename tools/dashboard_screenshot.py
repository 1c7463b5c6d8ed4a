"""Take the README's dashboard screenshot (docs/dashboard.png) during real demo jobs.

    .venv/bin/python tools/dashboard_screenshot.py [--out docs/dashboard.png]

An embedded broker with the demo's pool (local process pods, cap 4) and a `train` pool runs
the demo's W-Agent loop with four agents (`firepool demo`'s programs and tags, all under one
caller so one token sees every job) and two elastic jobs on `train` sized by OAK rounds every
5 s. After the loop has run a while, headless Chromium (Selenium and the system's
chromedriver, as in tests/service/test_broker_dashboard_browser.py) opens the dashboard, logs
in with the caller's token, waits until the plots have samples and the elastic table has rounds, and
saves the page. Nothing is drawn by hand: every figure on the picture is the broker's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from firepool.client.aio import AsyncClient
from firepool.composition import EmbeddedBroker
from firepool.demo.live import POOL, WORKLOADS, ArmResult, Workload, drive, programs
from firepool.model import PoolSpec
from firepool.service.broker import BrokerConfig
from firepool.service.catalog import Catalog
from firepool.service.elastic import ElasticConfig

TRAIN = PoolSpec(name="train", max_count=4, min_count=0, max_idle_count=0, step=4)
#: A stand-in training job: it checkpoints nothing, but ends cleanly on the resize's SIGTERM.
TRAIN_BODY = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "time.sleep(120)\n"
)


def snapshot(url: str, token: str, out: Path, wait_s: float = 120.0) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1500"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or ""), options=options)
    try:
        wait = WebDriverWait(driver, wait_s, poll_frequency=0.5)
        driver.get(f"{url}/")
        wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "unlock").click()

        def ready(d: Any) -> bool:
            charts = d.find_elements(By.CSS_SELECTOR, "#capacity-chart polyline")
            rounds = d.find_elements(By.CSS_SELECTOR, "#elastic thead th")
            running = d.find_elements(By.XPATH, "//table[@id='jobs']//td[span='RUNNING']")
            return len(charts) >= 2 and len(rounds) >= 4 and bool(running)

        wait.until(ready)
        out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()


async def agents(workload: Workload, client: AsyncClient, scale: float) -> None:
    """The demo's Reuse On loop, again and again (a new seed each time) until cancelled."""
    clients = dict.fromkeys(workload.callers, client)
    result = ArmResult(workload.name, "on")
    for seed in itertools.count(2027):
        loops = [
            drive(p, clients, scale, result, lambda: None) for p in programs(workload, "on", seed)
        ]
        await asyncio.gather(*loops)


async def main(out: Path, scale: float, after_s: float) -> None:
    demo = PoolSpec(name=POOL, max_count=4, min_count=0, max_idle_count=0, step=4)
    config = BrokerConfig(
        reconcile_s=5.0,
        hold_tick_s=0.2,
        exit_poll_s=1.0,
        timeline_s=1.0,
        elastic=ElasticConfig(round_s=5.0, stop_grace_s=5.0),
    )
    scratch = Path.home() / ".cache" / "firepool"
    scratch.mkdir(parents=True, exist_ok=True)
    workload = next(w for w in WORKLOADS if w.key == "agent4")
    with tempfile.TemporaryDirectory(prefix="firepool-shot-", dir=scratch) as tmp:
        catalog = Catalog((demo, TRAIN), {"cpu": 8})
        async with EmbeddedBroker(Path(tmp), catalog=catalog, config=config) as broker:
            token = await asyncio.to_thread(broker.issue, "demo")
            client = AsyncClient(broker.url, token)
            try:
                for i in range(2):
                    await client.submit(
                        TRAIN.name,
                        ["python", "-c", TRAIN_BODY],
                        kind="elastic",
                        elastic={"app": "cifar10", "min_pods": 1, "max_pods": 4},
                        max_retries=20,
                        timeout_s=None,
                        lease_tag=f"trainer-{i}",
                    )
                loops = [asyncio.create_task(agents(workload, client, scale))]
                await asyncio.sleep(after_s)
                began = time.monotonic()
                await asyncio.to_thread(snapshot, broker.url, token, out)
                print(f"wrote {out} ({time.monotonic() - began:.0f} s in the browser)")
                for task in loops:
                    task.cancel()
                await asyncio.gather(*loops, return_exceptions=True)
            finally:
                await client.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--scale", type=float, default=0.5, help="the demo's --scale")
    parser.add_argument("--after", type=float, default=15.0, help="seconds of load first")
    args = parser.parse_args()
    asyncio.run(main(args.out, args.scale, args.after))
