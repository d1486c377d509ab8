"""The report as a reader sees it: headless Chromium opens the page over the DevTools protocol,
checks that every figure loaded and that nothing was logged as an error, and saves a full-page
screenshot (`emergence-bench report DIR --screenshot`, `make report-screenshot`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emergence_bench.results.atomic import write_atomic

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, MAX_HEIGHT = 1280, 16384  # the screenshot's width, and the tallest page it captures whole
IMAGES = "JSON.stringify(Array.from(document.images).map(i => [i.alt, i.complete && i.naturalWidth > 0]))"


def find_browser() -> str | None:
    """The first headless-capable browser on PATH (Debian's `chromium` package), or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


@dataclass
class PageCheck:
    """What the browser saw: the figures (alt text) and whether each loaded, and every error logged."""

    images: list[tuple[str, bool]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    screenshot: Path | None = None

    @property
    def broken(self) -> list[str]:
        return [alt for alt, loaded in self.images if not loaded]

    @property
    def ok(self) -> bool:
        return not self.broken and not self.errors


class _DevTools:
    """One page target of a running browser: commands and the events that arrive meanwhile."""

    def __init__(self, url: str, timeout: float) -> None:
        import websocket  # websocket-client, in the dev extra: only this check needs it

        # No Origin header: Chromium refuses a DevTools connection from an origin it was not told to allow.
        self.socket = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params: Any) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"DevTools {method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def wait_for(self, event: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page did not fire {event} within {timeout:.0f} s")
            self.events.append(json.loads(self.socket.recv()))

    def errors(self) -> list[str]:
        found = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                    for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append("exception: " + params["exceptionDetails"].get("text", ""))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text', '')}")
        return found


def check_page(page: str | Path, screenshot: str | Path | None = None, browser: str | None = None,
               timeout: float = 60.0) -> PageCheck:
    """Open ``page`` (an HTML file) in headless ``browser`` (default: find_browser()), and return
    which figures loaded and the errors logged; with ``screenshot``, save a full-page PNG there."""
    with _opened(page, browser, timeout) as tools:
        images = json.loads(tools.call("Runtime.evaluate", expression=IMAGES, returnByValue=True)["result"]["value"])
        check = PageCheck(images=[(alt, bool(loaded)) for alt, loaded in images], errors=tools.errors())
        if screenshot is not None:
            height = tools.call("Page.getLayoutMetrics")["cssContentSize"]["height"]
            tools.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=min(int(height) + 1, MAX_HEIGHT),
                       deviceScaleFactor=1, mobile=False)
            data = base64.b64decode(tools.call("Page.captureScreenshot", format="png")["data"])
            write_atomic(screenshot, lambda f: f.write(data))
            check.screenshot = Path(screenshot)
        return check


def evaluate(page: str | Path, expression: str, browser: str | None = None, timeout: float = 60.0) -> Any:
    """The value of the JavaScript ``expression`` in ``page`` (an HTML or SVG file) once loaded in the
    headless browser: what a reader's browser lays out (e.g. where a figure's legend lies)."""
    with _opened(page, browser, timeout) as tools:
        result = tools.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"the expression threw: {result['exceptionDetails'].get('text', '')}")
        return result["result"].get("value")


@contextlib.contextmanager
def _opened(page: str | Path, browser: str | None, timeout: float) -> Iterator[_DevTools]:
    """``page`` loaded in a fresh headless browser (its own throwaway profile), as a DevTools
    connection with the Runtime, Log and Page events enabled; the browser ends with the block."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError(f"no headless browser found (one of {', '.join(BROWSERS)}); "
                                "on Debian: apt-get install chromium")
    page = Path(page).resolve()
    profile = tempfile.mkdtemp(prefix="emergence-bench-browser-")
    # Its own session: the browser's helper processes (crash handler, utility) go with it at the end.
    try:
        process = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        _remove(Path(profile))
        raise
    try:
        port = _port(Path(profile) / "DevToolsActivePort", process, timeout)
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout).read())
        target = next(t for t in targets if t.get("type") == "page")
        tools = _DevTools(target["webSocketDebuggerUrl"], timeout)
        for domain in ("Runtime", "Log", "Page"):
            tools.call(f"{domain}.enable")
        tools.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False)
        tools.call("Page.navigate", url=page.as_uri())
        tools.wait_for("Page.loadEventFired", timeout)
        try:
            yield tools
        finally:
            tools.socket.close()
    finally:
        _stop(process)
        _remove(Path(profile))


def _stop(process: subprocess.Popen) -> None:
    """End the browser and every process of its session, so none writes into the profile afterwards."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return  # the whole group is gone
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            continue
        time.sleep(0.2)  # helpers of the group exit a moment after the main process


def _remove(profile: Path, tries: int = 5) -> None:
    """Delete the throwaway profile; a file a late helper wrote gets a few more tries, then is left."""
    for attempt in range(tries):
        shutil.rmtree(profile, ignore_errors=True)
        if not profile.exists():
            return
        time.sleep(0.2 * (attempt + 1))


def _port(active: Path, process: subprocess.Popen, timeout: float) -> int:
    """The DevTools port the browser wrote into its profile once listening."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the browser exited at start (status {process.returncode})")
        if active.is_file() and active.read_text().strip():
            return int(active.read_text().split()[0])
        time.sleep(0.1)
    raise TimeoutError(f"the browser did not open its DevTools port within {timeout:.0f} s")
