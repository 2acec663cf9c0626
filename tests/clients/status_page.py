#!/usr/bin/env python3
"""Checks Strait's status page in headless Chromium against the admin API.

    status_page.py ADMIN_URL SCREENSHOT.png

Loads ADMIN_URL + "/" in Debian's headless Chromium (`chromium`, which
scripts/peers installs) until the page's JS has rendered (body
data-loaded="true"), parses the dumped DOM, fetches /api/v1/mirrors,
/api/v1/gateway and /api/v1/groups right after and compares:

- the set of partition rows (mirror, topic, partition) with the API's;
- each row's status and each mirror's status (statuses change only on the
  5 s samples: on a difference the page is dumped and compared once more);
- each row's lag records, when the API's now_ms equals the page's
  data-updated-ms (the same sample, e.g. a static fixture); else only that
  they are non-negative integers;
- the upstream rows and their up flags ("true", "false", "unknown" for a
  null `up`) with /api/v1/gateway's; "no mirrors configured" when there
  are none;
- the consumer groups listed as not OK, and their statuses, with the
  groups /api/v1/groups says are not OK.

Then takes a 1280x1000 screenshot to SCREENSHOT.png and checks it is a real
PNG of that size. Prints one JSON line: {"rows", "mirrors": {name: status},
"upstreams": {name: up}, "groups_not_ok": {"cluster/group": status},
"screenshot", "lag_exact"}; exit 0 when all
matched, 1 on a mismatch (what differed on stderr), 2 on bad arguments,
3 on a crash or a missing Chromium. Standard library only.
"""

import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

from _common import emit, run

LOAD_DEADLINE_S = 30
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--mute-audio",
]


def chromium_binary():
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        print(
            "status_page.py: chromium not found on PATH (Debian's headless Chromium, "
            "/usr/bin/chromium). scripts/peers installs it (apt-get install -y chromium).",
            file=sys.stderr,
        )
        sys.exit(3)
    return path


def chromium(binary, profile, args, timeout):
    """Runs Chromium once with a throwaway profile; returns its stdout."""
    env = dict(os.environ, HOME=profile)
    cmd = [binary, *CHROMIUM_FLAGS, "--user-data-dir=" + os.path.join(profile, "chrome"), *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timed out after %ds" % timeout
    err = None if p.returncode == 0 else "chromium exited %d: %s" % (p.returncode, p.stderr.strip()[-800:])
    return p.stdout, err


class Page(html.parser.HTMLParser):
    """What the status page rendered: its data-* attributes and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.body = {}
        self.rows = []  # attribute dicts of partition rows
        self.mirrors = {}  # name -> status
        self.upstreams = {}  # name -> "true" | "false" | "unknown"
        self.groups = {}  # "cluster/group" -> status, of the groups not OK
        self.text = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v if v is not None else "") for k, v in attrs}
        if tag == "body":
            self.body = a
        elif tag == "tr" and "data-mirror" in a and "data-partition" in a:
            self.rows.append(a)
        elif tag == "tr" and "data-group" in a:
            self.groups["%s/%s" % (a.get("data-group-cluster"), a["data-group"])] = a.get("data-group-status")
        elif tag == "tr" and "data-upstream" in a:
            self.upstreams[a["data-upstream"]] = a.get("data-up")
        elif "data-mirror-status" in a:
            self.mirrors[a.get("data-mirror-name")] = a["data-mirror-status"]

    def handle_data(self, data):
        self.text.append(data)


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode("utf-8"))


def up_state(up):
    return "true" if up is True else "false" if up is False else "unknown"


def load(binary, profile, url):
    """Dumps the page until it has rendered; returns (Page, attempts)."""
    deadline = time.monotonic() + LOAD_DEADLINE_S
    attempt, why = 0, "no attempt"
    while time.monotonic() < deadline:
        attempt += 1
        budget = 3000 if attempt == 1 else 6000
        left = max(5, int(deadline - time.monotonic()) + 5)
        dom, err = chromium(binary, profile, ["--dump-dom", "--virtual-time-budget=%d" % budget, url], min(25, left))
        page = Page()
        page.feed(dom or "")
        if page.body.get("data-loaded") == "true":
            return page
        why = err or "body has no data-loaded=\"true\" (banner: %r)" % banner(page)
        time.sleep(1)
    print("status_page.py: the page at %s did not render within %ds after %d attempts: %s"
          % (url, LOAD_DEADLINE_S, attempt, why), file=sys.stderr)
    sys.exit(1)


def banner(page):
    text = " ".join(" ".join(page.text).split())
    i = text.find("cannot reach Strait")
    return text[i:i + 200] if i >= 0 else None


def compare(page, mirrors_api, gateway_api, groups_api):
    """Returns (differences, lag_exact)."""
    diffs = []
    api_rows, api_mirrors = {}, {}
    for m in mirrors_api.get("mirrors", []):
        api_mirrors[m["name"]] = m["status"]
        for p in m.get("partitions", []):
            api_rows[(m["name"], p["topic"], int(p["partition"]))] = p
    page_rows = {}
    for a in page.rows:
        try:
            key = (a["data-mirror"], a.get("data-topic"), int(a["data-partition"]))
        except ValueError:
            diffs.append("row with a bad data-partition: %r" % a)
            continue
        if key in page_rows:
            diffs.append("row %r shown twice" % (key,))
        page_rows[key] = a
    for key in sorted(set(api_rows) - set(page_rows)):
        diffs.append("row %r in the API, not on the page" % (key,))
    for key in sorted(set(page_rows) - set(api_rows)):
        diffs.append("row %r on the page, not in the API" % (key,))
    if page.mirrors != api_mirrors:
        diffs.append("mirror statuses: page %r, API %r" % (page.mirrors, api_mirrors))
    if not api_mirrors and "no mirrors configured" not in " ".join(page.text):
        diffs.append("no mirrors in the API but the page does not say \"no mirrors configured\"")

    lag_exact = str(mirrors_api.get("now_ms")) == page.body.get("data-updated-ms")
    for key in sorted(set(api_rows) & set(page_rows)):
        p, a = api_rows[key], page_rows[key]
        if a.get("data-status") != p["status"]:
            diffs.append("row %r status: page %r, API %r" % (key, a.get("data-status"), p["status"]))
        lag = a.get("data-lag-records", "")
        if not lag.isdigit():
            diffs.append("row %r data-lag-records %r is not a non-negative integer" % (key, lag))
        elif lag_exact and int(lag) != p["lag_records"]:
            diffs.append("row %r lag records: page %s, API %s (same now_ms)" % (key, lag, p["lag_records"]))

    api_ups = {u["name"]: up_state(u.get("up")) for u in gateway_api.get("upstreams", [])}
    if page.upstreams != api_ups:
        diffs.append("upstreams: page %r, API %r" % (page.upstreams, api_ups))
    api_groups = {"%s/%s" % (g["cluster"], g["group"]): g["status"]
                  for g in groups_api.get("groups", []) if g["status"] != "OK"}
    if page.groups != api_groups:
        diffs.append("groups not OK: page %r, API %r" % (page.groups, api_groups))
    return diffs, lag_exact


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def main(t0):
    if len(sys.argv) != 3 or sys.argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    base, shot = sys.argv[1].rstrip("/"), os.path.abspath(sys.argv[2])
    binary = chromium_binary()
    with tempfile.TemporaryDirectory(prefix="strait-status-") as profile:
        for attempt in (1, 2):
            page = load(binary, profile, base + "/")
            mirrors_api = get_json(base + "/api/v1/mirrors")
            gateway_api = get_json(base + "/api/v1/gateway")
            groups_api = get_json(base + "/api/v1/groups")
            diffs, lag_exact = compare(page, mirrors_api, gateway_api, groups_api)
            if not diffs:
                break
            if attempt == 1:
                print("status_page.py: first comparison differed, dumping again: %s" % "; ".join(diffs), file=sys.stderr)

        if os.path.exists(shot):
            os.remove(shot)
        _, err = chromium(binary, profile, ["--hide-scrollbars", "--window-size=1280,1000",
                                            "--virtual-time-budget=8000", "--screenshot=" + shot, base + "/"], 30)
        size = png_size(shot) if os.path.exists(shot) else None
        if size is None:
            diffs.append("no PNG screenshot at %s (%s)" % (shot, err or "chromium wrote none"))
        elif size != (1280, 1000) or os.path.getsize(shot) < 10000:
            diffs.append("screenshot %s is %dx%d, %d bytes: expected 1280x1000 and more than 10 kB"
                         % (shot, size[0], size[1], os.path.getsize(shot)))

    result = {
        "rows": len(page.rows),
        "mirrors": page.mirrors,
        "upstreams": {u["name"]: u.get("up") for u in gateway_api.get("upstreams", [])},
        "groups_not_ok": page.groups,
        "screenshot": shot,
        "lag_exact": lag_exact,
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
    emit(result, ok=not diffs, message="status page mismatch:\n  " + "\n  ".join(diffs) if diffs else None)


if __name__ == "__main__":
    run(main)
