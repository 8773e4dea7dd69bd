"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``, ``make browser``) driven by Selenium."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import polling


def chrome(download_dir: Path | None = None):
    """A headless Chromium session; skips the test when the browser is not installed (``make browser``)."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("chromium / chromedriver missing: run `make browser`")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1100", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def login(driver, svc) -> None:
    """Airflow's UI keeps the user's JWT in the ``_token`` cookie: give the browser the test user's."""
    driver.get(f"{svc.base}/api/v2/version")
    driver.add_cookie({"name": "_token", "value": svc.token(), "path": "/"})


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", driver=None):
    """:func:`tests.support.polling.wait_for`, showing the end of the page on a timeout."""
    seen = (lambda: driver.page_source[-3000:]) if driver is not None else None
    return polling.wait_for(predicate, timeout, what, poll=0.5, seen=seen)


def click(driver, xpath: str, what: str, timeout: float = 60.0) -> None:
    """Click the first element at ``xpath`` once it is there; again if React re-rendered it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def attempt():
        try:
            found = driver.find_elements("xpath", xpath)
            if found:
                found[0].click()
                return True
        except (StaleElementReferenceException, WebDriverException):
            return False
        return False

    wait_for(attempt, timeout, what, driver)
