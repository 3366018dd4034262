"""A page loaded in a real headless Chromium, watched through the DevTools protocol.

Chromium is started with ``--remote-debugging-pipe``: the protocol's JSON messages, each ended by a
NUL byte, go in on its file descriptor 3 and come out on 4, so the standard library is enough (no
websocket client). The page's own session reports its console messages, uncaught exceptions, log
entries (a resource that failed to load is one) and every network request it makes; host names
resolve to nothing (``--host-resolver-rules``), so a page that reaches out fails to, and says so.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    """The Chromium executable on PATH (``DLBRICKS_CHROMIUM`` to name another), or None."""
    given = os.environ.get("DLBRICKS_CHROMIUM")
    if given:
        return shutil.which(given) or (given if os.path.isfile(given) else None)
    return next((found for name in CANDIDATES if (found := shutil.which(name))), None)


@dataclass
class PageLoad:
    """What a page did while it loaded: console messages and log entries of level warning or
    error, uncaught exceptions, every URL it requested, and its screenshot (PNG bytes)."""

    console: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    height: int = 0


class _Pipe:
    def __init__(self, executable: str, profile: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds() -> None:  # the protocol's descriptors, 3 (in) and 4 (out), in the child only
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={profile}", "--host-resolver-rules=MAP * ~NOTFOUND", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking", "--disable-extensions",
                "--disable-sync", "--disable-component-update", "--hide-scrollbars", "--mute-audio",
                "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False,
                                     preexec_fn=child_fds)  # noqa: PLW1509 (tests start no threads around it)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


def load(url: str, executable: str, *, width: int = 1280, height: int = 2000, full_page: bool = True,
         timeout: float = 60.0) -> PageLoad:
    """Load ``url`` in a fresh headless Chromium, wait for its load event and a moment after, and
    return what it did and its screenshot (the whole page with ``full_page``, else the first
    ``height`` pixels)."""
    with tempfile.TemporaryDirectory(prefix="dlbricks-chromium-") as profile:
        pipe = _Pipe(executable, profile)
        try:
            target = next(t["targetId"] for t in pipe.send("Target.getTargets", timeout=timeout)["targetInfos"]
                          if t["type"] == "page")
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                pipe.send(f"{domain}.enable", session=session)
            metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            pipe.send("Emulation.setDeviceMetricsOverride", metrics, session=session)
            pipe.send("Page.navigate", {"url": url}, session=session)
            pipe.wait_for("Page.loadEventFired", timeout=timeout)
            time.sleep(0.5)  # late messages: a resource that failed after the load event
            page_height = height
            if full_page:
                size = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                page_height = int(size["height"]) + 1
                pipe.send("Emulation.setDeviceMetricsOverride", {**metrics, "height": page_height}, session=session)
            shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session, timeout=timeout)
            result = PageLoad(screenshot=base64.b64decode(shot["data"]), height=page_height)
        finally:
            pipe.close()
    for event in pipe.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
            result.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
            entry = params["entry"]
            result.console.append(f"{entry.get('text')} ({entry.get('url', '')})")
        elif method == "Runtime.exceptionThrown":
            result.exceptions.append(params["exceptionDetails"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            result.requests.append(params["request"]["url"])
    return result


def write_screenshot(page: PageLoad, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(page.screenshot)
    return out
