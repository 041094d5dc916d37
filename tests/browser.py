"""A page in a real browser: Debian's headless Chromium loads it from disk and gives back the DOM it
rendered (after the load event) and a screenshot. Without Chromium, `chromium()` skips the test and says why.

Each <img> gets its decoded size written into the DOM as `data-natural="WxH"` by a script added to a copy of
the page, so a test sees what the browser decoded, not what the HTML claims.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# headless, offline: without the background-networking flags Chromium reaches for the network at start
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
DECODED_SIZES = ('<script>window.addEventListener("load", () => { for (const img of document.images) '
                 'img.dataset.natural = img.naturalWidth + "x" + img.naturalHeight; });</script>')


def chromium() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium here (apt-get install chromium; .ci/run installs it): the browser tests need one")


@dataclass(frozen=True)
class Rendered:
    dom: str
    screenshot: Path

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.dom))

    def image_sizes(self, css_class: str) -> list[tuple[int, int]]:
        """The decoded (width, height) of every <img> with this class."""
        sizes = []
        for tag in re.findall(r"<img\b[^>]*>", self.dom):
            if re.search(rf'class="[^"]*\b{css_class}\b', tag):
                found = re.search(r'data-natural="(\d+)x(\d+)"', tag)
                sizes.append((int(found.group(1)), int(found.group(2))) if found else (0, 0))
        return sizes


def render(page: Path, screenshot: Path, width: int = 1400, height: int = 2000) -> Rendered:
    html = page.read_text(encoding="utf-8")
    copy = screenshot.with_suffix(".html")
    copy.write_text(html.replace("</body>", DECODED_SIZES + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                               f"--screenshot={screenshot}", "--dump-dom", copy.as_uri()],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert screenshot.read_bytes().startswith(b"\x89PNG"), "no screenshot"
    return Rendered(done.stdout, screenshot)
