"""Headless Chromium for the HTML reports: what a reader's browser lays out, measured in the page.

``plot_layout`` opens a copy of a page with a small script appended that, for every plot
(``svg.plot``), records each ``<text>`` element's string and its box on the screen
(``getBoundingClientRect``: after transforms, in the fonts the browser really used), and reads it
back from ``--dump-dom``. ``overlapping`` then says which texts of one plot cover each other.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.assets.paths import missing_asset

_MEASURE = """<script>
const plots = [...document.querySelectorAll("svg.plot")].map(svg => ({
  label: svg.getAttribute("aria-label"),
  texts: [...svg.querySelectorAll("text")].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom};
  }),
}));
const out = document.createElement("pre");
out.id = "dk-layout";
out.textContent = JSON.stringify(plots);
document.body.appendChild(out);
</script>"""


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        missing_asset("chromium", "apt-get install chromium; `make system-deps` does")
    return browser


def _flags(browser: str, profile: Path) -> list[str]:
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}"]  # fmt: skip


def plot_layout(page: Path, work: Path) -> list[dict]:
    """Per plot of ``page``: its label and its texts with their boxes in CSS pixels."""
    measured = work / f"{page.stem}-measured.html"
    measured.write_text(page.read_text().replace("</body>", _MEASURE + "</body>", 1))
    command = [*_flags(chromium(), work / "profile"), "--window-size=1400,1800", "--dump-dom", measured.as_uri()]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    dom = completed.stdout
    start = dom.index('<pre id="dk-layout">') + len('<pre id="dk-layout">')
    import html

    return json.loads(html.unescape(dom[start : dom.index("</pre>", start)]))


def screenshot(page: Path, png: Path, work: Path, size: str = "1400,1800") -> Path:
    command = [*_flags(chromium(), work / "profile"), f"--screenshot={png}", f"--window-size={size}", page.as_uri()]
    subprocess.run(command, capture_output=True, timeout=120, check=True)
    return png


def overlapping(texts: list[dict], tolerance_px: float = 0.5) -> list[tuple[str, str]]:
    """The pairs of non-empty texts whose boxes overlap by more than ``tolerance_px`` both ways."""
    shown = [t for t in texts if t["text"].strip() and t["right"] > t["left"]]
    pairs = []
    for i, a in enumerate(shown):
        for b in shown[i + 1 :]:
            width = min(a["right"], b["right"]) - max(a["left"], b["left"])
            height = min(a["bottom"], b["bottom"]) - max(a["top"], b["top"])
            if width > tolerance_px and height > tolerance_px:
                pairs.append((a["text"], b["text"]))
    return pairs
