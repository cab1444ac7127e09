"""Open an HTML file in headless Chromium: a screenshot for people, the DOM for assertions.

Chromium is the Debian package (`make chromium` installs it). Tests run as root in a
container, hence --no-sandbox; --disable-dev-shm-usage because /dev/shm is small there.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Screenshots and other files for people to look at after a run (git-ignored).
ARTIFACTS_DIR = REPO_ROOT / "test-artifacts"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chromium_executable() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"chromium did not finish within {timeout}s: {' '.join(args)}\n"
                             f"stderr (tail):\n{stderr[-3000:]}") from exc


def render_in_chromium(html_path: Path, screenshot: Path, width: int = 1280, height: int = 2000,
                       timeout: float = 120) -> str:
    """Load ``html_path`` from a file:// URL, save a PNG of the first ``width``x``height``
    pixels to ``screenshot`` and return the DOM after load (as serialized by Chromium).

    One Chromium process does both (headless mode handles --dump-dom and --screenshot in the
    same run); if the PNG is missing anyway, a second, screenshot-only run is tried before
    giving up. Raises AssertionError with Chromium's stderr tail on any failure."""
    executable = chromium_executable()
    if executable is None:
        raise AssertionError("chromium not found on PATH (chromium, chromium-browser, google-chrome): "
                             "run `make chromium`")
    url = Path(html_path).resolve().as_uri()
    screenshot = Path(screenshot).resolve()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    screenshot.unlink(missing_ok=True)  # a stale PNG must not pass for a fresh one
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        base = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--hide-scrollbars", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--mute-audio", f"--user-data-dir={profile}",
                f"--window-size={width},{height}"]
        done = _run([*base, f"--screenshot={screenshot}", "--dump-dom", url], timeout)
        stderr = done.stderr
        if done.returncode == 0 and not (screenshot.is_file() and screenshot.stat().st_size):
            retry = _run([*base, f"--screenshot={screenshot}", url], timeout)
            stderr += retry.stderr
    if done.returncode != 0:
        raise AssertionError(f"chromium exited with {done.returncode} on {url}\nstderr (tail):\n{stderr[-3000:]}")
    if not screenshot.is_file() or screenshot.stat().st_size == 0:
        raise AssertionError(f"chromium wrote no screenshot to {screenshot}\nstderr (tail):\n{stderr[-3000:]}")
    if "<html" not in done.stdout.lower():
        raise AssertionError(f"chromium dumped no DOM for {url}\nstdout: {done.stdout[:500]!r}\n"
                             f"stderr (tail):\n{stderr[-3000:]}")
    return done.stdout
