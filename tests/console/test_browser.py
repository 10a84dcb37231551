#!/usr/bin/env python3
"""The web console in a real browser (headless Chromium through Selenium), over a real database.

ctest runs it (label browser) with DURABLE_DATABASE_URL set:

    test_browser.py --fixture build/tests/console_fixture --cli build/bin/durable \
                    --screenshots build/console-screenshots

console_fixture fills a fresh schema with workflows in every state and serves the console from
its own process, with a token (its actions on); `durable ui` serves the same schema from the
command-line program (no token: read-only), and a second fixture serves it with the token but
--read-only. Every page is opened and saved as a screenshot; what the pages show is checked
against the fixture's data and the API's answers; hostile ids, names and outputs must stay
text; the actions (test_actions.py) are taken through the pages and checked in the database;
any SEVERE entry in the browser's log (a JavaScript error, a CSP violation) fails the test,
except the refusals a step provokes on purpose. Exits 77 (ctest: skipped, not passed) when
Chromium, its driver or Selenium is missing.
"""
import argparse
import http.client as http_client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

SKIP = 77

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIPPED: python3-selenium is not installed ({e}); scripts/test installs it with "
          "chromium and chromium-driver", flush=True)
    sys.exit(SKIP)

# The helpers (checks, processes, HTTP, psql, the browser) and the actions' tests, beside this
# file; no __pycache__ is left in the source tree.
sys.dont_write_bytecode = True
from browser_kit import CHROMIUM, DRIVER, Browser, api, check, failures, holding, http, sql, start_server, stop_server, wait_until  # noqa: E402
import test_actions  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--screenshots", required=True)
    args = ap.parse_args()

    missing = [p for p in (CHROMIUM, DRIVER) if not os.path.exists(p)]
    if missing:
        print(f"SKIPPED: {', '.join(missing)} not found; install Debian's chromium and "
              "chromium-driver (scripts/test does)", flush=True)
        return SKIP
    if "DURABLE_DATABASE_URL" not in os.environ:
        print("FAILED: DURABLE_DATABASE_URL is not set (scripts/test sets it)", flush=True)
        return 1
    os.makedirs(args.screenshots, exist_ok=True)
    schema = f"console_browser_{os.getpid()}"
    env = dict(os.environ)
    token = f"console-token-{os.getpid()}-{time.time_ns()}"
    token_dir = tempfile.mkdtemp(prefix="console_browser_")
    token_file = os.path.join(token_dir, "token")
    with open(token_file, "w") as f:
        f.write(f"  {token}\n")  # the fixture trims the whitespace around it

    fixture, base = start_server([args.fixture, schema, "--token-file", token_file], env)
    cli = None
    readonly = None
    browser = None
    try:
        print(f"console (application): {base}", flush=True)
        cli, cli_base = start_server(
            [args.cli, "--schema", schema, "ui", "--listen", "127.0.0.1:0", "--max-scan",
             str(CLI_MAX_SCAN)], env)
        print(f"console (durable ui): {cli_base}", flush=True)
        readonly, ro_base = start_server(
            [args.fixture, schema, "--token-file", token_file, "--read-only", "--no-seed"], env)
        print(f"console (read-only, with the token): {ro_base}", flush=True)
        http_checks(base, cli_base)
        test_actions.auth_checks(base, token, schema)
        test_actions.nul_checks(base, token, schema)
        test_actions.queue_and_body_checks(base, token, schema)
        test_actions.documented_queries(base, schema)
        test_actions.audit_first_checks(base, token, schema)
        test_actions.read_only_checks(ro_base, cli_base, token)
        browser = Browser(args.screenshots)
        browser.open(base + "#/")
        browser.probe()
        pages(browser, base)
        search_and_cards(browser, base)
        attempt_history(browser, base)
        why_waiting(browser, base, schema)
        bounded_search(browser, base, cli_base, schema)
        hostile(browser, base)
        stream_page(browser, base, args.cli, schema)
        stale_page(browser, base, schema)
        browser.open(cli_base + "#/workflows", "cli-workflows")
        check(len(browser.css("tr.wf-row")) > 0, "durable ui lists the workflows too")
        test_actions.browser_actions(browser, base, token, schema)
        test_actions.read_only_pages(browser, ro_base, cli_base)
        browser.d.quit()
        browser = None
        shutdown_with_open_connection(fixture, base)
    finally:
        if browser:
            browser.d.quit()
        if cli:
            stop_server(cli)
        if readonly:
            stop_server(readonly)
        stop_server(fixture)
        shutil.rmtree(token_dir, ignore_errors=True)
        drop = ["psql", os.environ["DURABLE_DATABASE_URL"], "-qc", f'DROP SCHEMA "{schema}" CASCADE']
        if shutil.which("psql"):
            subprocess.run(drop, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if failures:
        print(f"FAILED: {len(failures)} check(s): " + "; ".join(failures), flush=True)
        return 1
    print("OK", flush=True)
    return 0


def shutdown_with_open_connection(fixture, base):
    """The application stops its console and its engine and exits while a client keeps an idle
    keep-alive connection open (it closes within the console's idle limit, 10 s)."""
    print("shutdown:", flush=True)
    at = urllib.parse.urlparse(base)
    conn = http_client.HTTPConnection(at.hostname, at.port, timeout=60)
    conn.request("GET", "/api/session")
    r = conn.getresponse()
    r.read()
    check(r.status == 200, "a request on a keep-alive connection is answered")
    fixture.stdin.close()  # the fixture's signal to stop
    try:
        rc = fixture.wait(timeout=30)  # RESTinio would keep an idle connection 60 s by default
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"the application exits cleanly with a client connected (exit status {rc})")
    conn.close()


def http_checks(base, cli_base):
    print("HTTP:", flush=True)
    status, headers, body = http(base)
    check(status == 200 and "<script" in body, "the page is served at /")
    csp = headers.get("Content-Security-Policy", "")
    check("default-src 'none'" in csp and "script-src 'self'" in csp, "the page carries a CSP")
    check(headers.get("X-Content-Type-Options") == "nosniff", "nosniff on the page")
    status, headers, _ = http(base + "api/overview")
    check(status == 200 and headers.get("Content-Type", "").startswith("application/json"),
          "the API answers JSON")
    check("Content-Security-Policy" in headers, "the API carries the CSP too")
    for b in (base, cli_base):
        status, _, body = http(b + "api/workflow?id=charge-7", method="POST", data=b"")
        check(status == 405, f"a POST to a page of data is refused ({b}: {status} {body})")
        status, _, body = http(b + "api/action", method="PUT", data=b"{}")
        check(status == 405, f"a PUT is refused ({b}: {status})")
    status, _, body = http(base + "api/overview", headers={"Host": "evil.example:80"})
    check(status == 421, "a request for another host is refused (DNS rebinding)")
    status, _, body = http(base + "api/workflow?id=" + urllib.parse.quote("no-such-id"))
    check(status == 404 and "no-such-id" in json.loads(body).get("error", ""),
          "an unknown workflow is a 404 that names the id")
    status, _, body = http(base + "api/workflows?status=nonsense")
    check(status == 400 and "unknown status" in body, "a bad status filter is a 400")
    status, _, body = http(base + "api/workflows?since=yesterday-ish")
    check(status == 400, "a bad time bound is a 400, not a 500")
    # The database password never reaches a page or the API.
    password = urllib.parse.urlparse(os.environ["DURABLE_DATABASE_URL"]).password or \
        os.environ.get("PGPASSWORD")
    if password:
        for path in ("", "api/session", "api/overview", "api/executors"):
            check(password not in http(base + path)[2], f"no password in /{path}")
    else:
        print("  skipped: the database has no password here (none in the URL or PGPASSWORD), so "
              "there is none to look for", flush=True)


# `durable ui` of the test reads at most this many rows of each status per request, so that the
# fixture's few dozen workflows are enough to make a sparse filter stop early and page on.
CLI_MAX_SCAN = 3


def bounded_search(b, base, cli_base, schema):
    """A filter that few rows match stops at max_scan rows of a status and says so; following
    Next finds every match once, newest first, the same as the unbounded list of the fixture."""
    print("bounded search:", flush=True)
    want = [r["id"] for r in api(base, "api/workflows?name=invoice&limit=500")["rows"]]
    db = sql(f"SELECT count(*) FROM {test_actions.q(schema)}.workflows WHERE name = 'invoice'")
    check(str(len(want)) == db, f"the list of the invoices is whole ({len(want)}, database {db})")
    seen, cursor, notes, pages_read = [], None, 0, 0
    while pages_read < 100:
        page = api(cli_base, "api/workflows?name=invoice&limit=4" +
                   (f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""))
        pages_read += 1
        seen += [r["id"] for r in page["rows"]]
        if page.get("searched"):
            notes += 1
            check(page["searched"]["rows"] == CLI_MAX_SCAN and len(page["rows"]) <= 4,
                  f"a stopped search says how much it read ({page['searched']})")
        cursor = page["next"]
        if not cursor:
            break
    check(seen == want, f"the bounded pages list every invoice once, in order ({len(seen)} of {len(want)})")
    check(notes > 0, f"the search stopped at --max-scan {CLI_MAX_SCAN} on some page ({notes} of {pages_read})")
    # The same in the page: the note, and Next until there is none.
    b.open(cli_base + "#/workflows?name=invoice", "workflows-searched")
    check(b.shown("#searched"), "the page says how far back it has searched")
    shown = []
    for _ in range(50):
        shown += [r.get_attribute("data-id") for r in b.css("tr.wf-row")]
        nxt = b.css("#next-page")
        if not nxt or not nxt[0].is_enabled():
            break
        before = b.d.current_url
        nxt[0].click()
        WebDriverWait(b.d, 15).until(lambda d: d.current_url != before)
        b.ready()
    check(shown == want, f"Next through the stopped searches shows every invoice once ({len(shown)} of {len(want)})")


def search_and_cards(b, base):
    """Each overview card links to the list of what it counts; the list finds a workflow by a text
    in its inputs or its last error."""
    print("cards and search:", flush=True)
    stats = api(base, "api/overview")["stats"]
    b.open(base + "#/")
    failed_hour = b.css("[data-stat=failed_last_hour]")[0]
    check("changed_since=1h" in (failed_hour.get_attribute("href") or ""),
          f"'failed, last hour' links to the failures of the last hour ({failed_hour.get_attribute('href')})")
    retrying = b.css("[data-stat=steps_retrying]")
    check(retrying and "retrying=1" in (retrying[0].get_attribute("href") or ""),
          "'steps retrying' links to the workflows retrying a step")
    failed_hour.click()
    b.ready("workflows-failed-last-hour")
    rows = b.rows_by_data("tr.wf-row", "data-id")
    check(len(rows) == stats["failed_last_hour"] and "charge-7" in rows and "report-broken" in rows,
          f"the card's list shows the {stats['failed_last_hour']} it counts ({list(rows)})")
    check(b.d.find_element(By.ID, "f-changed_since").get_attribute("value") == "1h",
          "the filter form shows the change window")
    # By a text of the last error (any case), then of the inputs.
    b.open(base + "#/workflows")
    b.type("#f-text", "DECLINED")
    b.click("#apply")
    b.wait(lambda d: "text=DECLINED" in d.current_url and list(b.rows_by_data("tr.wf-row", "data-id")) == ["charge-7"],
           "a search for a word of the last error finds charge-7 alone")
    b.shot("workflows-search")
    found = api(base, "api/workflows?text=4200")["rows"]
    check([r["id"] for r in found] == ["charge-7"], f"a search for its input (4200) finds charge-7 ({found})")
    status, _, text = http(base + "api/workflows?changed_since=2026-01-01")
    check(status == 400 and "not an age" in text, f"changed_since takes an age ({status} {text})")
    b.log()


def attempt_history(b, base):
    """A step that failed twice and then succeeded shows its three attempts: each failure with
    its error, start, end and duration, and the attempt that succeeded."""
    print("attempt history:", flush=True)
    b.open(base + "#/workflow?id=capture-3")
    b.d.execute_script("document.getElementById('wf-attempts').scrollIntoView(); window.scrollBy(0, -200)")
    b.shot("workflow-attempts")
    rows = b.css("tr.attempt-row")
    got = [(r.get_attribute("data-seq"), r.get_attribute("data-attempt"), r.get_attribute("data-outcome")) for r in rows]
    check(got == [("0", "1", "retrying"), ("0", "2", "retrying"), ("0", "3", "succeeded")],
          f"the attempts section lists the three attempts of step 0 in order ({got})")
    texts = [r.text for r in rows]
    check(all("gateway answered 503 for 990 cents" in t for t in texts[:2]) and "gateway" not in texts[2],
          f"each failed attempt shows its error, the succeeded one none ({texts})")
    cells = [r.find_elements(By.TAG_NAME, "td") for r in rows]
    check(all(c[4].text.strip() not in ("", "–") and c[5].text.strip() not in ("", "–") and c[6].text.strip().endswith("ms")
              for c in cells), "each attempt shows its start, its end and its duration")
    api_rows = api(base, "api/workflow?id=capture-3")["attempts"]
    check(all(a["duration_ms"] is not None and a["duration_ms"] >= 0 for a in api_rows),
          f"no attempt ends before it starts ({[a['duration_ms'] for a in api_rows]})")
    b.log()


def why_waiting(b, base, schema):
    """Every workflow that has not ended says why it waits, in words, on its page and in the list,
    from real runs of each kind: a message sent under a mistyped topic, a child that waits, a
    retry an hour away, a long sleep, a paused queue, a dead letter; and a workflow whose
    executor stopped 47 minutes ago (planted: its name is one no live executor runs, so nobody
    takes it over while the test looks). A schedule whose slot passed 11 minutes ago unfired (a
    session holds its row, so the fixture's scheduler skips it) is marked overdue."""
    print("why a workflow waits:", flush=True)
    s = test_actions.q(schema)
    sql(f"INSERT INTO {s}.executors (id, host, pid, heartbeat_at, lease_ms) "
        "VALUES ('gone-exec', 'old-host', 4242, now() - interval '47 minutes', 10000); "
        f"INSERT INTO {s}.workflows (id, name, status, inputs, executor_id, started_at) "
        "VALUES ('orphan-1', 'ledger', 'running', '[]', 'gone-exec', now() - interval '50 minutes')")
    want = {
        "approval-5": ("message", False, ["waiting for a message on topic 'approval' since ",
                                          "(1 unconsumed message on topic 'aproval')"]),
        "supervisor-2": ("child", False, ["waiting for child '", "(sleeping)"]),
        "settle-1": ("retrying", False, ["retrying step 0 'settle batch': attempt 2 of 4 at ",
                                         "(attempt 1 failed: the bank's API answered 503)"]),
        "shipment-9": ("sleeping", False, ["sleeping until "]),
        "email-1": ("queue_paused", True, ["pending: queue 'emails' is paused (durable queue resume emails)"]),
        # (47 min or more by the time it is looked at: the checks before it take a while; the
        # SQL test checks the number)
        "orphan-1": ("takeover", True, ["running on executor 'gone-exec', last heartbeat ",
                                        " min ago — its lease ended at ",
                                        "no live executor runs the workflow 'ledger'"]),
        "charge-7": ("dead_letter", True, ["dead-lettered: ", "durable retry"]),
    }
    for wf, (kind, blocked, parts) in want.items():
        # The waits unload after the fixture's unload_after (2 s): until then they are running.
        # Until it says all of it: a parent unloads about when its child does, so the child may
        # still be running when the parent first reads as waiting for it.
        said = lambda v: v.get("kind") == kind and all(p in v.get("reason", "") for p in parts)
        seen = wait_until(lambda: (lambda v: v if said(v) else None)(
            api(base, "api/workflow?id=" + urllib.parse.quote(wf, safe="")).get("waiting") or {}), timeout=30)
        check(seen and seen.get("blocked") is blocked and all(p in seen.get("reason", "") for p in parts)
              and (wf != "approval-5" or "until" not in seen.get("reason", "")),
              f"{wf}: {kind}{', blocked' if blocked else ''}: {seen}")
        shot = {"approval-5": "workflow-waiting-message", "orphan-1": "workflow-waiting-takeover",
                "settle-1": "workflow-waiting-retry"}.get(wf)
        b.open(base + "#/workflow?id=" + urllib.parse.quote(wf, safe=""), shot)
        line = b.css("#wf-waiting")
        check(line and all(p in line[0].text for p in parts)
              and line[0].get_attribute("data-kind") == kind
              and line[0].get_attribute("data-blocked") == ("true" if blocked else "false"),
              f"{wf}'s page says why it waits ({line[0].text if line else None})")
    b.open(base + "#/workflows?status=pending,running,sleeping", "workflows-why")
    rows = b.rows_by_data("tr.wf-row", "data-id")
    reason = lambda wf: rows[wf].find_element(By.CSS_SELECTOR, "td.reason") if wf in rows else None
    check(reason("approval-5") is not None and "unconsumed message on topic 'aproval'" in (reason("approval-5").get_attribute("title") or ""),
          "the list's reason says what a run waits for")
    check(reason("email-1") is not None and "blocked" in (reason("email-1").get_attribute("class") or ""),
          "the list marks a workflow that cannot move on its own")
    b.open(base + "#/workflow?id=invoice-1")
    check(not b.css("#wf-waiting"), "a finished workflow says nothing about waiting")

    # An overdue schedule: its slot passed 11 minutes ago. Planted paused, so that the fixture's
    # scheduler cannot fire it before a session holds its row; that session's FOR KEY SHARE
    # lock makes the scheduler's FOR UPDATE SKIP LOCKED pass the row by, while plain UPDATEs
    # (unpausing it now, pausing it again below) still go through.
    sql(f"INSERT INTO {s}.schedules (id, cron, time_zone, workflow_name, inputs, next_fire_at, paused) "
        "VALUES ('late-report', '*/5 * * * *', 'UTC', 'report', '[\"late\"]', now() - interval '11 minutes', true)")
    with holding(f"SELECT 1 FROM {s}.schedules WHERE id = 'late-report' FOR KEY SHARE",
                 "durable-schedule-lock"):
        sql(f"UPDATE {s}.schedules SET paused = false WHERE id = 'late-report'")
        check(sql(f"SELECT next_fire_at < now() - interval '10 minutes' FROM {s}.schedules WHERE id = 'late-report'") == "t",
              "the planted slot is still unfired")
        b.open(base + "#/schedules", "schedules-overdue")
        badge = b.css("tr.schedule-row[data-id='late-report'] .badge.overdue")
        check(badge and badge[0].text.startswith("overdue by 1") and "min" in badge[0].text,
              f"the schedules page marks the schedule overdue ({badge[0].text if badge else None})")
        check(not b.css("tr.schedule-row[data-id='nightly-report'] .badge.overdue"), "an on-time schedule is not marked")
        # Paused again before the lock goes: the scheduler never fires it.
        sql(f"UPDATE {s}.schedules SET paused = true WHERE id = 'late-report'")
    sql(f"DELETE FROM {s}.schedules WHERE id = 'late-report'")
    sql(f"DELETE FROM {s}.workflows WHERE id = 'orphan-1'; DELETE FROM {s}.executors WHERE id = 'gone-exec'")
    b.log()


def pages(b, base):
    print("pages:", flush=True)
    stats = api(base, "api/overview")["stats"]
    counts = stats["workflows"]

    b.open(base + "#/", "overview")
    cards = b.rows_by_data(".status-card", "data-status")
    for status, n in counts.items():
        shown = cards[status].find_element(By.CSS_SELECTOR, ".count").text if status in cards else None
        check(shown == str(n), f"the overview shows {n} {status} ({shown})")
    check(counts.get("dead_letter") == 1, "the fixture has one dead letter")

    # From the overview to the dead letter, through the filtered list.
    cards["dead_letter"].click()
    b.ready("workflows-dead-letter")
    check("status=dead_letter" in b.d.current_url, "the filter is in the URL")
    rows = b.rows_by_data("tr.wf-row", "data-id")
    check(list(rows) == ["charge-7"], "the dead-letter filter lists charge-7 only")
    rows["charge-7"].find_element(By.CSS_SELECTOR, "a").click()
    b.ready("workflow-dead-letter")
    check(b.text("#wf-status") is not None and "dead_letter" in b.text("#wf-status"),
          "the workflow page shows dead_letter")
    check("card declined" in b.d.find_element(By.TAG_NAME, "body").text,
          "the workflow page shows the step's error")
    check(len(b.css("tr.step-row")) == 1, "the timeline has the failed step")

    # A shared filter (reload from the URL) and exact paging.
    b.open(base + "#/workflows?name=invoice", "workflows-invoice")
    total = len(api(base, "api/workflows?name=invoice&limit=500")["rows"])
    check(total == 15, "the fixture has 15 invoices (12 run, 3 queued)")
    check(len(b.css("tr.wf-row")) == total, "the name filter from the URL lists every invoice")
    seen, cursor = [], None
    while True:
        page = api(base, "api/workflows?name=invoice&limit=4" +
                   (f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""))
        seen += [r["id"] for r in page["rows"]]
        cursor = page["next"]
        if not cursor:
            break
    check(len(seen) == total and len(set(seen)) == total,
          f"cursor paging returns every invoice once ({len(seen)} of {total})")

    b.open(base + "#/workflows", "workflows")
    toggle = b.css("#refresh-toggle")[0]
    before = b.text("#updated")
    toggle.click()
    check(toggle.get_attribute("data-paused") == "1", "the toggle pauses auto refresh")
    time.sleep(6.5)  # longer than the 5 s refresh
    check(b.text("#updated") == before, f"nothing refreshes while paused ({before})")
    toggle.click()
    check(toggle.get_attribute("data-paused") == "0", "the toggle resumes auto refresh")
    WebDriverWait(b.d, 15).until(lambda d: b.text("#updated") != before)
    check(b.text("#updated") != before, "a resumed page refreshes")
    b.open(base + "#/workflow?id=order-tree", "workflow-parent")
    check(len(b.css("#wf-children a")) >= 2, "the parent shows its two children")
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    check(b.text("#wf-trace") == trace_id, f"the parent shows its trace id ({b.text('#wf-trace')!r})")
    check(b.attr("#wf-trace", "title").startswith("00-" + trace_id + "-00f067aa0ba902b7-"),
          "the trace id's tooltip is the whole traceparent")
    b.open(b.attr("#wf-children a", "href"), "workflow-child-trace")
    check(b.text("#wf-trace") == trace_id, "a child shows its parent's trace id")
    check(b.attr("#wf-trace", "title") != "00-" + trace_id + "-00f067aa0ba902b7-01",
          "a child's parent span is its parent's step, not its parent's caller")
    b.open(base + "#/workflow?id=shipment-9", "workflow-without-trace")
    check(not b.css("#wf-trace"), "a workflow started without trace context shows no trace")
    b.open(base + "#/workflow?id=shipment-9", "workflow-sleeping")
    body = b.d.find_element(By.TAG_NAME, "body").text
    check("<u>alice</u>" in body, "the unconsumed message is shown, as text")
    check("waiting for the warehouse" in body, "the event is shown")

    b.open(base + "#/queues", "queues")
    queues = b.rows_by_data("tr.queue-row", "data-queue")
    check("emails" in queues and queues["emails"].find_elements(By.CSS_SELECTOR, ".paused"),
          "the emails queue is shown paused")
    b.open(base + "#/executors", "executors")
    executors = b.rows_by_data("tr.executor-row", "data-id")
    check("console-fixture" in executors and "alive" in executors["console-fixture"].text,
          "the fixture's executor is alive")
    b.open(base + "#/schedules", "schedules")
    check("nightly-report" in b.rows_by_data("tr.schedule-row", "data-id"),
          "the schedule is listed")
    b.open(base + "#/schedule?id=nightly-report", "schedule")
    check(b.text("#schedule-id") == "nightly-report", "the schedule page shows the schedule")
    runs = list(b.rows_by_data("tr.wf-row", "data-id"))
    check(len(runs) == 1 and runs[0].startswith("nightly-report@trigger:"),
          f"the schedule's page lists its one run ({runs})")


def stream_page(b, base, cli, schema):
    """A workflow's streams on its page, and one stream's page, live: values written while it is
    open appear without a reload, a hostile value stays text, the close ends it."""
    print("stream page:", flush=True)

    def send(value):
        r = subprocess.run([cli, "--schema", schema, "send", "story-1", "more", "--text", value],
                           capture_output=True, text=True, env=os.environ, timeout=60)
        check(r.returncode == 0, f"durable send story-1 more {value!r} ({r.stderr.strip()})")

    b.open(base + "#/workflow?id=story-1", "workflow-streams")
    b.wait(lambda d: "story" in b.rows_by_data("#wf-streams tr.stream-row", "data-key"),
           "the workflow page lists its stream")
    row = b.rows_by_data("#wf-streams tr.stream-row", "data-key")["story"]
    cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "td")]
    check(cells[1] == "2" and cells[2] == "open", f"the stream shows 2 values, open ({cells})")
    row.find_element(By.CSS_SELECTOR, "a").click()
    b.ready("stream-open")
    check(b.text("#stream-key") == "story" and b.text("#stream-workflow") == "story-1",
          "the stream page names the stream and its workflow")
    values = b.rows_by_data("#values tr.value-row", "data-offset")
    check(list(values) == ["0", "1"], f"the page shows the two values ({list(values)})")
    check("<img src=x onerror=alert(3)>" in values["1"].text, "a hostile value is shown as text")
    check(not b.css("#page img"), "no img element came from the value")
    check("live" in (b.attr("#stream-state", "class") or ""), "an open stream is followed live")
    send("and then")
    b.wait(lambda d: "2" in b.rows_by_data("#values tr.value-row", "data-offset"),
           "a value written while the page is open appears without a reload")
    b.shot("stream-live")
    check("and then" in b.rows_by_data("#values tr.value-row", "data-offset")["2"].text,
          "the new value is the one written")
    send("done")
    b.wait(lambda d: "closed after 3 values" in (b.text("#stream-state") or ""),
           "the close ends the stream on the page")
    b.shot("stream-closed")
    check(len(b.css("#values tr.value-row")) == 3, "each value is shown once")
    # The API under the page: values from an offset, and its refusals.
    d = api(base, "api/stream?id=story-1&key=story&from=1")
    check([v["offset"] for v in d["values"]] == [1, 2] and d["closed_at"] == 3 and d["next"] == 3
          and d["length"] == 3,
          f"api/stream reads from an offset ({d})")
    status, _, body = http(base + "api/stream?id=story-1&key=story&from=-1")
    check(status == 400 and "not an offset" in body, f"a negative offset is a 400 ({status} {body})")
    status, _, body = http(base + "api/stream?id=no-such-id&key=story")
    check(status == 404 and "no-such-id" in body, f"an unknown workflow is a 404 ({status})")
    status, _, body = http(base + "api/stream?id=story-1")
    check(status == 400 and "'key' is required" in body, f"the key is required ({status})")


def stale_page(b, base, schema):
    """A database that hangs: a session holds the workflows table locked, so the console's
    queries get no answer. Each ends at the fixture's query_timeout (2 s) with a 503 that says
    so without saying where the database is, and the open Overview keeps its numbers under a
    banner "data as of HH:MM:SS"; once the lock goes, the next refresh clears it."""
    print("a database that does not answer:", flush=True)
    b.open(base + "#/")
    b.wait(lambda d: (b.text("#updated") or "").startswith("updated "), "the overview has loaded")
    url = urllib.parse.urlparse(os.environ["DURABLE_DATABASE_URL"])
    where = [x for x in (url.hostname, str(url.port) if url.port else None) if x]
    with holding(f'LOCK TABLE "{schema}".workflows IN ACCESS EXCLUSIVE MODE', "durable-console-lock"):
        for _ in range(10):  # each refresh while locked: Chromium logs its 503
            b.expect_status(503, "/api/overview")
        status, _, body = http(base + "api/overview")
        error = json.loads(body).get("error", "") if status == 503 else body
        check(status == 503 and "the database is not answering" in error and "2000 ms" in error,
              f"a request the database does not answer ends at the query timeout with a 503 ({status} {error})")
        check(not any(w in error for w in where), f"the 503 does not say where the database is ({where}: {error})")
        before = (b.text("#updated") or "")[len("updated "):]
        banner = b.wait(lambda d: b.shown("#error") and b.text("#error"), "the page says its data is stale", timeout=60)
        check(banner.startswith("data as of ") and "the database is not answering" in banner,
              f"the banner says as of when, and why ({banner})")
        stamp = b.text("#updated") or ""
        check(stamp.startswith("data as of ") and "stale" in (b.attr("#updated", "class") or ""),
              f"the header says 'data as of' too ({stamp}, the last refresh was {before})")
        check(not any(w in banner for w in where), f"the banner does not say where the database is ({banner})")
        b.shot("overview-stale")
    b.wait(lambda d: not b.shown("#error") and (b.text("#updated") or "").startswith("updated "),
           "the next refresh after the lock clears the banner", timeout=60)
    check(b.d.execute_script("return document.body.dataset.stale === undefined"), "the page is live again")
    b.log()


def hostile(b, base):
    print("hostile values:", flush=True)
    script_id = "<script>alert(1)</script>"
    b.open(base + "#/workflows", "workflows-hostile")
    rows = b.rows_by_data("tr.wf-row", "data-id")
    check(script_id in rows and script_id in rows[script_id].text,
          "an id holding <script> is shown as text")
    check(script_id in rows and "<img src=x onerror=alert(2)>" in rows[script_id].text,
          "a name holding <img> is shown as text")
    scripts = b.d.execute_script(
        "return Array.from(document.querySelectorAll('script')).map(s => s.getAttribute('src'))")
    check(scripts == ["/assets/core.js", "/assets/actions.js", "/assets/pages.js"],
          f"no script element came from the data ({scripts})")
    images = b.d.execute_script("return document.querySelectorAll('img').length")
    check(images == 0, f"no img element came from the data ({images})")
    check(b.no_alert(), "no alert fired on the list")
    b.open(base + "#/workflow?id=" + urllib.parse.quote(script_id, safe=""), "workflow-hostile")
    check(b.text("#wf-id") == script_id, "the workflow page's id is the literal text")
    body = b.d.find_element(By.TAG_NAME, "body").text
    check("<b>x</b><script>alert(3)</script>" in body, "the output's markup is shown as text")
    check("javascript:alert(4)" in body, "the javascript: URL in the output is shown as text")
    hrefs = b.d.execute_script(
        "return Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'))")
    check(all(h.startswith("#/") for h in hrefs), "every link is one of the console's own hashes")
    b.open(base + "#/workflow?id=" + urllib.parse.quote("javascript:alert(5)", safe=""))
    check(b.text("#wf-id") == "javascript:alert(5)", "a javascript: id is shown as text")
    check(b.no_alert(), "no alert fired on the pages")
    # A right-to-left override in an id: written out and marked, never applied.
    bidi_id = "mark-\u202eevil\u202c"
    marked = "mark-\u27e8U+202E\u27e9evil\u27e8U+202C\u27e9"
    b.open(base + "#/workflows?name=" + urllib.parse.quote("<img src=x onerror=alert(2)>", safe=""))
    rows = b.rows_by_data("tr.wf-row", "data-id")
    check(bidi_id in rows and marked in rows[bidi_id].text,
          f"the list shows an id's U+202E written out ({rows[bidi_id].text if bidi_id in rows else list(rows)})")
    b.open(base + "#/workflow?id=" + urllib.parse.quote(bidi_id, safe=""), "workflow-hidden-chars")
    check(b.text("#wf-id") == marked, f"the workflow page marks the id's bidi controls ({b.text('#wf-id')!r})")
    check(len(b.css("#wf-id .hidden-char")) == 2, "each hidden character is a marked element")
    body = b.d.find_element(By.TAG_NAME, "body").text
    check("\u202e" not in body and "\u202c" not in body, "no bidi control reaches the page's text")


if __name__ == "__main__":
    sys.exit(main())
