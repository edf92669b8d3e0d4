"""How soon `turboyolo review` shows the first picture and the next one, on a folder of 12-MP photos.

The folder: ``--count`` (500) JPEGs of 4000 x 3000 (12 MP). Encoding 500 distinct photos of that size
would take minutes, so five real photos (the camera wallpapers of /usr/share/backgrounds, resized to 12
MP and encoded once at quality 92) are hard-linked under 500 names; each name is its own file to the
review (its own reduced picture, made from its own decode), but the OS keeps the five photos' bytes in
memory: a cold disk would add its read time (~2-5 MB a photo).

Measured in headless Chromium (Selenium), with the browser already started:

* ``first_from_start_s``: from starting ``turboyolo review`` (a new process: Python, imports, listing
  the folder) to the first picture on screen (its ``load`` event), reduced pictures not yet made;
* ``first_from_url_s``: from the URL being printed to the first picture on screen;
* ``next_warm_ms``: from the key press (right arrow) to the next picture on screen, after the page has
  had time to make the next ones ahead (the median and the worst of ``--steps``);
* ``next_cold_ms``: the same, pressing again as soon as a picture is shown (the next is being made).

Usage::

    .venv/bin/python bench/review_speed.py [--count 500] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PHOTOS = ["Dragonfly_by_Bolly.jpg", "seeding_by_Clements_Engelhardt.jpg", "Kleiber_by_Lukas_Baubkus.jpg",
          "Fossa_by_Jasper_Roks.jpg", "Wine_by_Jakkub_Mede.jpg"]


def make_folder(root: Path, count: int) -> Path:
    import cv2

    images = root / "images"
    images.mkdir(parents=True)
    sources = []
    for k, name in enumerate(PHOTOS):
        photo = cv2.imread(str(Path("/usr/share/backgrounds") / name))
        photo = cv2.resize(photo, (4000, 3000), interpolation=cv2.INTER_AREA)
        path = root / f"source{k}.jpg"
        cv2.imwrite(str(path), photo, [cv2.IMWRITE_JPEG_QUALITY, 92])
        sources.append(path)
    for k in range(count):
        os.link(sources[k % len(sources)], images / f"photo{k:04d}.jpg")
    (root / "labels").mkdir()
    for k in range(count):  # a few boxes each, as a labelled set has
        (root / "labels" / f"photo{k:04d}.txt").write_text("0 0.5 0.5 0.2 0.3\n1 0.2 0.3 0.1 0.1\n")
    return images


def browser():
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1600,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options,
                            service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))


def wait(driver, script: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return {script}")
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError(script)


def step(driver, keys, settle: float) -> float:
    from selenium.webdriver.common.action_chains import ActionChains

    time.sleep(settle)
    shown = driver.execute_script("return window.review.shown.length")
    ActionChains(driver).send_keys(keys.ARROW_RIGHT).perform()
    wait(driver, f"window.review.shown.length > {shown}")
    return driver.execute_script("return window.review.shown[window.review.shown.length - 1].at - "
                                 "window.review.keyAt")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    from selenium.webdriver.common.keys import Keys

    root = Path(tempfile.mkdtemp(prefix="review_speed_"))
    try:
        images = make_folder(root, args.count)
        driver = browser()
        env = {**os.environ, "TURBOYOLO_CACHE": str(root / "cache")}
        started = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "turboyolo", "review", str(images), "--no-browser",
                                 "--order", "name"], stdout=subprocess.PIPE, text=True, env=env)
        url = None
        while url is None:
            found = re.search(r"(http://\S+)", proc.stdout.readline())
            url = found.group(1) if found else None
        printed = time.time()
        driver.get(url)
        wait(driver, "window.review && window.review.shown.length >= 1")
        first = driver.execute_script("return performance.timeOrigin + window.review.shown[0].at") / 1000
        warm = [step(driver, Keys, 1.5) for _ in range(args.steps)]
        cold = [step(driver, Keys, 0.0) for _ in range(args.steps)]
        result = {"photos": args.count, "megapixels": 12.0, "first_from_start_s": round(first - started, 3),
                  "first_from_url_s": round(first - printed, 3),
                  "next_warm_ms": {"median": round(statistics.median(warm), 1), "max": round(max(warm), 1)},
                  "next_cold_ms": {"median": round(statistics.median(cold), 1), "max": round(max(cold), 1)},
                  "picture_px": driver.execute_script(
                      "const p = document.getElementById('photo'); return [p.naturalWidth, p.naturalHeight]")}
        print(json.dumps(result))
        driver.quit()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
