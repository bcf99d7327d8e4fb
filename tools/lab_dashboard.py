#!/usr/bin/env python3
"""The lab's dashboard in headless Chromium, as the verifiers open it (the
lab pass's monitoring tests, the vLLM lab's): the browser launched, the
operator's account on the lab's self-signed proxy, one page. Each panel
says how it was drawn in its data attributes (roles/monitoring/files/
dashboard/dashboard.js)."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator

BASE = "https://127.0.0.1:8443"  # the lab's proxy, published on the controller


@contextlib.contextmanager
def dashboard_page(password: str) -> Iterator:
    """A page logged in as the operator (Playwright's), closed afterwards."""
    from playwright.sync_api import sync_playwright  # pylint: disable=import-outside-toplevel

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=["--no-proxy-server"])
        try:
            context = browser.new_context(ignore_https_errors=True, viewport={"width": 1400, "height": 1200},
                                          http_credentials={"username": "operator", "password": password})
            yield context.new_page()
        finally:
            browser.close()


def panels(page) -> dict[str, tuple[str, list[str], int]]:
    """Each panel of a drawn dashboard: {id: (state, its lines' labels, points)}."""
    return {pid: (state, json.loads(labels or "[]"), points) for pid, state, labels, points in
            page.eval_on_selector_all(".panel", "els => els.map(e => [e.id, e.dataset.state, e.dataset.labels, "
                                                "Number(e.dataset.points || 0)])")}
