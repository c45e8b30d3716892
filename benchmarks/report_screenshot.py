"""A real-browser check of the report's first screen: a run's report.html rebuilt into a temporary
folder, rendered by headless Chromium at 1280 x 800, a screenshot of the first screen and of
question 1's section, and the lead sentences' boxes measured in the page (issue 57, deliverable 5).

    .venv/bin/python benchmarks/report_screenshot.py [--run reports/h200-btcusdt-1m-second-edition]
        [--out reports/bench/report-screenshot] [--width 1280] [--height 800] [--chromium PATH]

Writes into OUT: first-screen.png, question-1.png, boxes.json (viewport, each lead's box and
text, whether both answers' leads lie above the fold) and README.md. The run's folder is never
written. Chromium is the system's (`apt install chromium`); no browser is downloaded.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the repository's tsflash

from tsflash.report import build_report  # noqa: E402

LEADS = ("lead-forecast", "lead-trading", "q1-lead", "q2-lead")  # the ids report.html.j2 gives the leads
ABOVE = ("lead-forecast", "lead-trading")  # the two answers of the first screen
CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# measures each lead's box after layout and writes it into the page, for --dump-dom to read back;
# appended after every other element, so it moves nothing it measures
MEASURE = """<script>
const out = {viewport: {width: window.innerWidth, height: window.innerHeight}, boxes: {}};
for (const id of %s) {
  const e = document.getElementById(id);
  if (e) { const r = e.getBoundingClientRect();
           out.boxes[id] = {x: r.x, y: r.y + window.scrollY, width: r.width, height: r.height,
                            text: e.textContent}; }
}
const pre = document.createElement("pre"); pre.id = "tsflash-boxes"; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def find_chromium(path: str | None = None) -> str | None:
    """The Chromium to run: `path`, else the first of CHROMIUMS on PATH; None when there is none."""
    if path:
        return shutil.which(path) or (path if Path(path).is_file() else None)
    return next((found for name in CHROMIUMS if (found := shutil.which(name))), None)


def _chromium(chromium: str, width: int, height: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           f"--window-size={width},{height}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def measure(chromium: str, page: Path, width: int, height: int) -> dict:
    """{"viewport", "boxes"} of the leads of `page`, as Chromium lays it out at width x height."""
    probe = page.with_name("measure.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE % json.dumps(list(LEADS)) + "</body>"))
    done = _chromium(chromium, width, height, "--dump-dom", probe.as_uri())
    found = re.search(r"<pre id=\"tsflash-boxes\">(.*?)</pre>", done.stdout, flags=re.S)
    if found is None:
        raise RuntimeError(f"chromium --dump-dom gave no boxes (exit {done.returncode}): {done.stderr[-500:]}")
    return json.loads(html.unescape(found.group(1)))


# question 1's section as the first screen: every element before its heading removed (a fragment URL
# is not scrolled to before headless Chromium's screenshot)
FROM_QUESTION_1 = """<script>
const heading = document.getElementById("q1-lead").previousElementSibling;
while (document.body.firstElementChild !== heading) document.body.firstElementChild.remove();
</script>"""


def screenshot(chromium: str, url: str, path: Path, width: int, height: int) -> Path:
    done = _chromium(chromium, width, height, f"--screenshot={path}", url)
    if not path.is_file():
        raise RuntimeError(f"chromium --screenshot wrote nothing (exit {done.returncode}): {done.stderr[-500:]}")
    return path


def run(run_dir: Path, out: Path, width: int = 1280, height: int = 800, chromium: str | None = None) -> dict:
    """Rebuild `run_dir`'s report elsewhere, render it and write the screenshots, boxes.json and
    README.md into `out`; returns boxes.json's content."""
    found = find_chromium(chromium)
    if found is None:
        raise SystemExit("report_screenshot: no Chromium found (apt install chromium, or --chromium PATH)")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _, page = build_report(run_dir, out_dir=Path(tmp) / "report")
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        measured = measure(found, page, width, height)
        screenshot(found, page.as_uri(), out / "first-screen.png", width, height)
        section = page.with_name("question-1.html")
        section.write_text(page.read_text().replace("</body>", FROM_QUESTION_1 + "</body>"))
        screenshot(found, section.as_uri(), out / "question-1.png", width, height)
        rendered = time.perf_counter() - t0
    boxes = measured["boxes"]
    fold = measured["viewport"]["height"]
    result = {
        "run": run_dir.resolve().relative_to(REPO).as_posix() if run_dir.resolve().is_relative_to(REPO) else str(run_dir),
        "chromium": version, "viewport": measured["viewport"], "boxes": boxes,
        "above_the_fold": {k: k in boxes and boxes[k]["y"] + boxes[k]["height"] <= fold for k in ABOVE},
        "words": {k: len(b["text"].split()) for k, b in boxes.items()},
        "seconds": {"report": round(built, 1), "chromium": round(rendered, 1)},
    }
    (out / "boxes.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    (out / "README.md").write_text(readme(result, width, height))
    return result


def opening_words(report_md: Path) -> int | None:
    """Words of the first "Question 1 (forecasting)" answer of a committed report.md, or None."""
    if not report_md.is_file():
        return None
    line = next((x for x in report_md.read_text().splitlines() if x.startswith("**Question 1 (forecasting)")), None)
    return None if line is None else len(line.split())


def readme(result: dict, width: int, height: int) -> str:
    old_words = opening_words(REPO / result["run"] / "rereport-2026-12-nesting" / "report.md")
    rows = "\n".join(f"| `{k}` | {b['y']:.0f} | {b['y'] + b['height']:.0f} | {result['words'][k]} |"
                     for k, b in result["boxes"].items())
    above = all(result["above_the_fold"].values())
    return f"""# The report's first screen in a real browser

`benchmarks/report_screenshot.py` rebuilt the report of `{result['run']}` into a temporary folder and
rendered its report.html in headless {result['chromium']} at {width} x {height}.
The published folder was not written.

Both answers' lead sentences lie {'above' if above else 'NOT above'} the fold: the page's own viewport,
{result['viewport']['width']} x {result['viewport']['height']} px inside the {width} x {height} window (`boxes.json`).

| lead (element id) | top (px) | bottom (px) | words (the first screen's with their "Question N" prefix) |
|---|---|---|---|
{rows}

The committed re-report this run's answer is quoted from (`rereport-2026-12-nesting/report.md`, the
earlier layout) opens question 1 with one bold sentence of {old_words} words.

- `first-screen.png`: the first {width} x {height} screen.
- `question-1.png`: question 1's section as a first screen (what comes before it removed): its lead,
  its table and the figure.

Rebuild: `python benchmarks/report_screenshot.py` ({result['seconds']['report']} s for the report,
{result['seconds']['chromium']} s for Chromium, on 2 CPU cores).
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", type=Path, default=REPO / "reports" / "h200-btcusdt-1m-second-edition")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "bench" / "report-screenshot")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=800)
    p.add_argument("--chromium", default=None)
    args = p.parse_args(argv)
    result = run(args.run, args.out, args.width, args.height, args.chromium)
    print(json.dumps({"above_the_fold": result["above_the_fold"], "words": result["words"]}))
    return 0 if all(result["above_the_fold"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
