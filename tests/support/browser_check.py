"""Opens a `flow report` page in Debian's chromium, through chromedriver
and Selenium, headless, as a reader would. It prints one JSON object:
each SVG (id, lines, bars, drawn width), every network request the page
made (Chrome's performance log) and every resource it loaded (the page's
Performance API), how many scripts it holds, its title. It writes a
full-page screenshot.

Usage: browser_check.py PAGE.html SCREENSHOT.png
"""

import json
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def main():
    page, shot = os.path.abspath(sys.argv[1]), sys.argv[2]
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=opts)
    try:
        driver.get("file://" + page)
        svgs = driver.execute_script(
            "return Array.from(document.querySelectorAll('svg')).map(s => ({"
            "id: s.id, lines: s.querySelectorAll('polyline').length,"
            "bars: s.querySelectorAll('g.bar').length,"
            "width: Math.round(s.getBoundingClientRect().width)}))"
        )
        resources = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        scripts = driver.execute_script("return document.scripts.length")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(max(height + 40, 600), 8000))
        driver.save_screenshot(shot)
        requests = []
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                requests.append(message["params"]["request"]["url"])
        print(json.dumps({
            "title": driver.title, "svgs": svgs, "resources": resources,
            "requests": requests, "scripts": scripts, "page": "file://" + page,
        }))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
