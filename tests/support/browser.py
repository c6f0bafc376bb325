"""A real headless Chromium, driven over the DevTools protocol through a pipe.

No browser driver and no Python package beyond the standard library: Chromium
started with ``--remote-debugging-pipe`` reads DevTools commands from its file
descriptor 3 and writes replies and events to its descriptor 4, one JSON
message per NUL-terminated record. The browser is Debian's ``chromium``
(``scripts/get-browser.sh`` installs it), or ``CHROMIUM_BIN``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The flags that keep a headless Chromium quiet on a machine without a network.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-pipe",
)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> tuple[str | None, str]:
    """The browser to run (``CHROMIUM_BIN`` first, then PATH), else ``None`` and why."""
    given = os.environ.get("CHROMIUM_BIN")
    if given:
        if shutil.which(given):
            return given, ""
        return None, f"CHROMIUM_BIN={given} is not an executable"
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path, ""
    return None, (
        "no Chromium found (looked for CHROMIUM_BIN, then "
        + ", ".join(CANDIDATES)
        + " on PATH): run `bash scripts/get-browser.sh` (or `make browser`) as root"
        " to install Debian's chromium"
    )


class BrowserError(RuntimeError):
    pass


def _high_fd(fd: int) -> int:
    """A copy of ``fd`` numbered 10 or more, so that moving it to 3 or 4 clobbers nothing."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD, 10)


class Chromium:
    """One headless browser process; ``page()`` opens a tab at a given viewport."""

    def __init__(self, binary: str, log: Path, timeout: float = 30) -> None:
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
        commands_r, self._commands_w = os.pipe()
        self._replies_r, replies_w = os.pipe()
        high_r, high_w = _high_fd(commands_r), _high_fd(replies_w)

        def wire() -> None:  # in the child, before exec: fd 3 = commands, fd 4 = replies
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self._log = log.open("ab")
        try:
            self.proc = subprocess.Popen(
                [binary, *FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                preexec_fn=wire,
                close_fds=False,
            )
        finally:
            for fd in (commands_r, replies_w, high_r, high_w):
                os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []

    # --- the protocol ---------------------------------------------------------

    def _send(self, method: str, params: dict[str, Any], session: str | None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._commands_w, data) :]
        return self._next_id

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("no reply from Chromium in time")
            ready, _, _ = select.select([self._replies_r], [], [], left)
            if ready:
                chunk = os.read(self._replies_r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium closed its pipe (exit {self.proc.poll()})")
                self._buffer += chunk
        record, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(record)
        return message

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self._events.append(message)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and event.get("sessionId") == session:
                    del self._events[i]
                    return event
            message = self._read_message(deadline)
            if "method" in message:
                self._events.append(message)

    # --- pages ----------------------------------------------------------------

    def page(self, width: int, height: int, mobile: bool) -> Page:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )
        return Page(self, target, session)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(BrowserError, OSError):
                    self.call("Browser.close")
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            for fd in (self._commands_w, self._replies_r):
                os.close(fd)
            self._log.close()
            self._profile.cleanup()


class Page:
    """One tab with a fixed viewport."""

    def __init__(self, browser: Chromium, target: str, session: str) -> None:
        self.browser, self.target, self.session = browser, target, session

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.call(method, self.session, **params)

    def open(self, url: str) -> None:
        """Load ``url`` and wait for its load event and its web fonts."""
        self.call("Page.navigate", url=url)
        self.browser.wait_event("Page.loadEventFired", self.session)
        self.evaluate("document.fonts.ready.then(() => true)")

    def evaluate(self, expression: str) -> Any:
        reply = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"script failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path) -> None:
        """The whole page, not only the viewport, as a PNG."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call(
            "Page.captureScreenshot", format="png", clip=clip, captureBeyondViewport=True
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        self.browser.call("Target.closeTarget", targetId=self.target)


def with_page(
    browser: Chromium, width: int, height: int, mobile: bool, use: Callable[[Page], Any]
) -> Any:
    page = browser.page(width, height, mobile)
    try:
        return use(page)
    finally:
        page.close()
