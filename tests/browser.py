"""Debian's chromium, headless, driven by Selenium through the system chromedriver (never a
driver Selenium Manager would download). Its calls block: tests run them in a worker thread, so
the fake servers on the test's event loop keep answering meanwhile."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT = 30.0  # seconds for a page to show what a test waits for, on a loaded machine

T = TypeVar("T")


def require_chromium() -> None:
    """Skip where the browser cannot be had; as root (CI), its absence is a failure: .ci/run
    installs it."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pytest.fail(
            "chromium and chromium-driver are missing: apt-get install chromium chromium-driver (.ci/run does)"
        )
    pytest.skip("no /usr/bin/chromium and /usr/bin/chromedriver, and not root to install them")


class Browser:
    """One headless chromium window; every method runs in a worker thread."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    async def run(self, call: Callable[[], T]) -> T:
        return await asyncio.to_thread(call)

    async def open(self, url: str) -> None:
        await self.run(lambda: self.driver.get(url))

    async def text(self) -> str:
        return await self.run(lambda: str(self.driver.find_element(By.TAG_NAME, "body").text))

    async def click(self, xpath: str) -> None:
        await self.run(lambda: self.driver.find_element(By.XPATH, xpath).click())

    async def wait_text(self, needle: str) -> str:
        """The page's text once it shows `needle` (after a click's navigation)."""
        failures: list[WebDriverException] = []

        def body(driver: Any) -> str:
            return str(driver.find_element(By.TAG_NAME, "body").text)

        def found(driver: Any) -> str:
            # While a click's navigation replaces the document, a read of the old one fails in
            # more ways than one (a stale element, "node does not belong to the document", a
            # script unloaded mid-run): each is a read to try again, kept for the message.
            try:
                text = body(driver)
            except WebDriverException as error:
                failures.append(error)
                return ""
            return text if needle in text else ""

        def shown() -> str:
            try:
                return str(WebDriverWait(self.driver, WAIT).until(found))
            except TimeoutException:
                last = f" (last read failed: {failures[-1].msg})" if failures else ""
                raise AssertionError(
                    f"{needle!r} not shown at {self.driver.current_url}{last}:\n"
                    f"{body(self.driver)[:2000]}"
                ) from None

        return await self.run(shown)

    async def screenshot(self, path: Path) -> None:
        """The whole page (its full height, through the DevTools protocol) as a PNG."""

        def take() -> None:
            metrics = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
            height = min(int(metrics["cssContentSize"]["height"]) + 16, 2400)
            size = {"width": 1100, "height": height, "deviceScaleFactor": 1, "mobile": False}
            self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", size)
            try:
                self.driver.save_screenshot(str(path))
            finally:
                self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

        await self.run(take)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    require_chromium()

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for chromium's own sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--window-size=1100,900",
    ):
        options.add_argument(flag)
    service = Service(executable_path=str(CHROMEDRIVER))
    driver = await asyncio.to_thread(lambda: webdriver.Chrome(service=service, options=options))
    try:
        yield Browser(driver)
    finally:
        await asyncio.to_thread(driver.quit)
