"""The console's actions (test_browser.py runs these): signing in, the workflow, queue and
schedule controls, the bulk bar with its confirmed count, the audit, and the refusals (no
credentials, a wrong CSRF value, a foreign Origin, a read-only console), each checked in the
database through psql as well as on the page.
"""
import json

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from browser_kit import api, check, http, post, sql, wait_until

BULK_FILTER = {"queue": "bulk", "status": "pending"}
ACTOR = "Ops <b>Alice</b>"  # a name with markup: shown as text in the header and the audit


def q(schema):
    return f'"{schema}"'


def status_of(schema, wf):
    return sql(f"SELECT status FROM {q(schema)}.workflows WHERE id = '{wf}'")


def bulk_count(schema, status="pending"):
    return int(sql(f"SELECT count(*) FROM {q(schema)}.workflows WHERE queue = 'bulk' AND status = '{status}'"))


# ---- over HTTP ------------------------------------------------------------------------------

def auth_checks(base, token, schema):
    print("actions over HTTP:", flush=True)
    s = api(base, "api/session")
    check(s.get("actions") is True and s.get("read_only") is False and s.get("signed_in") is False
          and s.get("csrf") is None, f"the session says actions are on, not signed in ({s})")
    dry = {"action": "cancel", "filter": BULK_FILTER}
    bearer = {"Authorization": f"Bearer {token}"}
    status, _, body = post(base, "api/bulk", dry)
    check(status == 401, f"a POST without a cookie or a token is refused 401 ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, {"Authorization": "Bearer not-the-token"})
    check(status == 401, f"a wrong token as Bearer is refused 401 ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, bearer)
    check(status == 200 and body.get("dry_run") is True and body.get("count") == 4
          and sorted(body.get("sample", [])) == [f"bulk-{i}" for i in range(1, 5)]
          and isinstance(body.get("fingerprint"), str),
          f"with the token as Bearer, a dry run counts the 4 bulk workflows ({status} {body})")
    check(bulk_count(schema) == 4, "a dry run changes nothing")
    # Status-aware: a retry applies to dead letters only, a resume to cancelled, parked and dead
    # letters; the 4 pending matches are counted as skipped, with the reason.
    for verb in ("retry", "resume"):
        status, _, body = post(base, "api/bulk", {"action": verb, "filter": BULK_FILTER}, bearer)
        check(status == 200 and body.get("count") == 0 and body.get("matched") == 4
              and body.get("skipped") == [{"status": "pending", "count": 4}]
              and "dead-lettered" in body.get("skip_reason", ""),
              f"a {verb} dry run counts what it applies to: 0 of 4, 4 pending skipped ({status} {body})")
    # Without a status: only the statuses a cancel applies to are read (the finished ones of a
    # big table would exceed max_scan, and a cancel skips them anyway); with every status named,
    # the finished ones are read, counted as skipped, with the reason.
    status, _, body = post(base, "api/bulk", {"action": "cancel", "filter": {}}, bearer)
    by = dict(tuple(line.split("|")) for line in sql(
        f"SELECT status || '|' || count(*) FROM {q(schema)}.workflows GROUP BY status").splitlines())
    unfinished = sum(int(n) for st, n in by.items() if st not in ("succeeded", "failed", "cancelled"))
    finished = {st: int(n) for st, n in by.items() if st in ("succeeded", "failed", "cancelled")}
    check(status == 200 and body.get("count") == unfinished and body.get("matched") == unfinished
          and body.get("skipped") == []
          and body.get("statuses_read") == ["pending", "running", "sleeping", "parked", "dead_letter"],
          f"a cancel dry run without a status reads the {unfinished} unfinished ones only ({status} {body})")
    every = ",".join(["pending", "running", "sleeping", "succeeded", "failed", "parked", "cancelled", "dead_letter"])
    status, _, body = post(base, "api/bulk", {"action": "cancel", "filter": {"status": every}}, bearer)
    check(status == 200 and finished and body.get("count") == unfinished
          and body.get("matched") == unfinished + sum(finished.values())
          and {x["status"]: x["count"] for x in body.get("skipped", [])} == finished
          and body.get("statuses_read") is None,
          f"a cancel dry run over every status counts the {unfinished} unfinished ones and skips "
          f"{finished} ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, dict(bearer, Origin="http://evil.example"))
    check(status == 403, f"a POST from a foreign Origin is refused 403, even with the token ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, dict(bearer, Origin=base.rstrip("/")))
    check(status == 200, f"a POST from the console's own Origin is accepted ({status} {body})")
    status, _, body = post(base, "api/action", {"action": "explode", "id": "invoice-1"}, bearer)
    check(status == 400 and body and "error" in body, f"an unknown action is a 400 ({status} {body})")
    status, _, body = post(base, "api/action", {"action": "cancel", "id": "invoice-1"}, bearer)
    check(status == 409 and body and "error" in body,
          f"cancelling a finished workflow is a 409 ({status} {body})")

    status, _, body = post(base, "api/login", {"token": "not-the-token", "name": "x-refused"})
    check(status == 401 and body and body.get("error"), f"signing in with a wrong token is a 401 ({status} {body})")
    signs = lambda who, result: int(sql(
        f"SELECT count(*) FROM {q(schema)}.audit WHERE action = 'sign_in' AND actor = '{who}' "
        f"AND result = '{result}'"))
    check(wait_until(lambda: signs("x-refused", "refused") == 1) and signs("x-refused", "done") == 0,
          "a refused sign-in is written in the audit: 'sign_in', refused, with the name given")
    check(wait_until(lambda: signs("token", "refused") >= 1),
          "a wrong Bearer token is written in the audit as a refused sign-in")
    status, headers, body = post(base, "api/login", {"token": token, "name": "http-check"})
    check(status == 200 and body.get("signed_in") is True and body.get("who") == "http-check"
          and isinstance(body.get("csrf"), str) and body["csrf"],
          f"signing in with the token answers who and a CSRF value ({status} {body})")
    check(signs("http-check", "done") == 1, "a sign-in is in the audit before its session answers")
    set_cookie = headers.get("Set-Cookie", "")
    check("httponly" in set_cookie.lower(), f"the session cookie is HttpOnly ({set_cookie.split(';')[1:]})")
    cookie = {"Cookie": set_cookie.split(";")[0]}
    csrf = (body or {}).get("csrf") or ""
    s = api_with(base, "api/session", cookie)
    check(s.get("signed_in") is True and s.get("who") == "http-check" and s.get("csrf") == csrf,
          "with the cookie, the session says signed in, who, and the same CSRF value")
    status, _, body = post(base, "api/bulk", dry, cookie)
    check(status == 403, f"the cookie without the CSRF header is refused 403 ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, dict(cookie, **{"X-Durable-CSRF": csrf + "x"}))
    check(status == 403, f"the cookie with a wrong CSRF header is refused 403 ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, dict(cookie, **{"X-Durable-CSRF": csrf}))
    check(status == 200 and body.get("count") == 4, f"the cookie with its CSRF header is accepted ({status})")
    status, _, body = post(base, "api/bulk", dry, dict(cookie, **{"X-Durable-CSRF": csrf, "Origin": "http://evil.example"}))
    check(status == 403, f"the cookie and CSRF from a foreign Origin are refused 403 ({status} {body})")
    status, _, body = post(base, "api/logout", {}, dict(cookie, **{"X-Durable-CSRF": csrf}))
    check(status == 200 and body.get("signed_in") is False, f"signing out ({status} {body})")
    status, _, body = post(base, "api/bulk", dry, dict(cookie, **{"X-Durable-CSRF": csrf}))
    check(status == 401, f"the cookie is void after signing out: 401 ({status} {body})")


def queue_and_body_checks(base, token, schema):
    """A queue nobody named is not created by a pause (a typo would pause nothing while the real
    queue runs on) unless asked; a body over 1 MiB is answered 413, not dropped."""
    print("unknown queues and large bodies:", flush=True)
    bearer = {"Authorization": f"Bearer {token}"}
    queues = lambda: sql(f"SELECT string_agg(name || ':' || paused, ',' ORDER BY name) FROM {q(schema)}.queues")
    before = queues()
    for verb in ("pause_queue", "resume_queue"):
        status, _, body = post(base, "api/action", {"action": verb, "queue": "emials"}, bearer)
        check(status == 404 and "no queue is named 'emials'" in body.get("error", "")
              and '"create": true' in body.get("error", "") and queues() == before,
              f"{verb} of an unknown queue is refused 404 and creates nothing ({status} {body})")
    check(sql(f"SELECT result FROM {q(schema)}.audit WHERE action = 'pause_queue' "
              f"AND target->>'queue' = 'emials' ORDER BY id DESC LIMIT 1") == "refused",
          "the refused pause is in the audit")
    status, _, body = post(base, "api/action", {"action": "pause_queue", "queue": "emials", "create": True}, bearer)
    check(status == 200 and "emials:t" in queues(), f"with create, the pause makes a paused queue ({status} {body})")
    sql(f"DELETE FROM {q(schema)}.queues WHERE name = 'emials'")
    status, _, body = post(base, "api/action", {"action": "pause_queue", "queue": "emails", "create": "yes"}, bearer)
    check(status == 400 and "'create'" in body.get("error", ""), f"create must be a boolean ({status} {body})")
    big = {"action": "cancel", "id": "x" * (1536 * 1024)}
    status, _, body = post(base, "api/action", big, bearer)
    check(status == 413 and "over 1 MiB" in (body or {}).get("error", ""),
          f"a body of 1.5 MiB is answered 413 with the reason ({status} {str(body)[:200]})")


def snapshot(schema):
    """Everything an action could change: workflows, queues, schedules, messages, the audit."""
    s = q(schema)
    return sql(
        "SELECT md5(concat_ws('|',"
        f" (SELECT string_agg(id || ':' || status || ':' || updated_at, ',' ORDER BY id) FROM {s}.workflows),"
        f" (SELECT string_agg(name || ':' || paused, ',' ORDER BY name) FROM {s}.queues),"
        f" (SELECT string_agg(id || ':' || paused || ':' || coalesce(next_fire_at::text, ''), ',' ORDER BY id) FROM {s}.schedules),"
        f" (SELECT count(*) FROM {s}.messages),"
        f" (SELECT count(*) FROM {s}.audit)))")


def with_nul(text):
    return text + "\u0000x"


def nul_checks(base, token, schema):
    """Every text field of every action, and of the bulk filter, sent with a NUL character: each
    is refused 400 before anything is done (acted on as the text before the NUL, an action would
    cancel bulk-1 or resume the paused queue 'bulk'), and no audit row is written."""
    print("text with a NUL character:", flush=True)
    bearer = {"Authorization": f"Bearer {token}"}
    before = snapshot(schema)
    actions = [
        {"action": "cancel", "id": "bulk-1"},
        {"action": "resume", "id": "bulk-1"},
        {"action": "retry", "id": "bulk-1"},
        {"action": "fork", "id": "invoice-1", "from_step": 0, "new_id": "forked-by-nul"},
        {"action": "send", "id": "bulk-1", "topic": "t", "value": "v", "key": "k"},
        {"action": "pause_queue", "queue": "default"},
        {"action": "resume_queue", "queue": "bulk"},
        {"action": "pause_schedule", "schedule": "nightly-report"},
        {"action": "resume_schedule", "schedule": "nightly-report"},
        {"action": "trigger_schedule", "schedule": "nightly-report"},
    ]
    sent = 0
    for body in actions:
        for field, value in body.items():
            if not isinstance(value, str):
                continue
            bad = dict(body, **{field: with_nul(value)})
            status, _, answer = post(base, "api/action", bad, bearer)
            sent += 1
            check(status == 400 and answer and "NUL character" in answer.get("error", ""),
                  f"{body['action']} with a NUL in '{field}' is refused 400 ({status} {answer})")
    for field in ("status", "name", "queue", "executor", "since", "until", "id_prefix"):
        value = {"status": "pending", "since": "1d", "until": "1s"}.get(field, "bulk")
        bad = {"action": "cancel", "filter": dict(BULK_FILTER, **{field: with_nul(value)})}
        status, _, answer = post(base, "api/bulk", bad, bearer)
        sent += 1
        check(status == 400 and answer and f"'filter.{field}' holds a NUL" in answer.get("error", ""),
              f"a bulk filter with a NUL in '{field}' is refused 400 ({status} {answer})")
    status, _, answer = post(base, "api/bulk", {"action": "cancel", "filter": BULK_FILTER,
                                                "confirm": {"count": 4, "fingerprint": with_nul("4-")}}, bearer)
    check(status == 400, f"a bulk confirmation with a NUL is refused 400 ({status} {answer})")
    status, _, answer = post(base, "api/login", {"token": token, "name": with_nul("mallory")})
    check(status == 400, f"a sign-in name with a NUL is refused 400 ({status} {answer})")
    status, _, text = http(base + "api/workflow?id=invoice-1%00x")
    check(status == 400 and "NUL character" in text, f"a query parameter with a NUL is refused 400 ({status} {text})")
    after = snapshot(schema)
    check(before == after, f"none of the {sent} refused actions changed anything, or wrote an audit row")


def documented_queries(base, schema):
    """The query strings docs/console.md shows, sent as written (unencoded): a list of statuses,
    a timestamp, a child's id with '/', a schedule run's id with '@' and ':'."""
    print("documented query strings:", flush=True)
    child = sql(f"SELECT id FROM {q(schema)}.workflows WHERE parent_id IS NOT NULL ORDER BY id LIMIT 1")
    run = sql(f"SELECT id FROM {q(schema)}.workflows WHERE id LIKE 'nightly-report@%' ORDER BY id LIMIT 1")
    check("/" in child and "@" in run and ":" in run, f"the fixture has such ids ({child}, {run})")
    for path in ("api/workflows?status=failed,dead_letter",
                 "api/workflows?status=failed,dead_letter&since=2026-01-01T20:00:00Z&limit=20",
                 f"api/workflow?id={child}", f"api/workflow?id={run}"):
        status, _, body = http(base + path)
        check(status == 200, f"GET {path} is answered 200 ({status} {body[:200]})")
        if "workflow?id=" in path:
            check(json.loads(body).get("workflow", {}).get("id") == path.split("id=", 1)[1],
                  f"{path} shows that workflow")


def audit_first_checks(base, token, schema):
    """An action whose audit row cannot be written is not done: the audit refuses rows (a trigger
    for the test), and a cancel and a confirmed bulk cancel answer 503 and change nothing."""
    print("an action the audit cannot record:", flush=True)
    bearer = {"Authorization": f"Bearer {token}"}
    s = q(schema)
    sql(f"CREATE FUNCTION {s}.refuse_audit() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'the audit is closed for this test'; END$$; "
        f"CREATE TRIGGER refuse_audit BEFORE INSERT ON {s}.audit FOR EACH ROW "
        f"EXECUTE FUNCTION {s}.refuse_audit()")
    try:
        before = snapshot(schema)
        status, _, answer = post(base, "api/action", {"action": "cancel", "id": "bulk-1"}, bearer)
        check(status == 503 and answer and "nothing was done" in answer.get("error", "")
              and "the audit is closed for this test" in answer.get("error", ""),
              f"a cancel the audit cannot record is refused 503, saying why ({status} {answer})")
        dry = {"action": "cancel", "filter": BULK_FILTER}
        status, _, answer = post(base, "api/bulk", dry, bearer)
        check(status == 200 and answer.get("count") == 4, f"a dry run needs no audit row ({status} {answer})")
        confirmed = dict(dry, confirm={"count": answer.get("count"), "fingerprint": answer.get("fingerprint")})
        status, _, answer = post(base, "api/bulk", confirmed, bearer)
        check(status == 503 and answer and "nothing was done" in answer.get("error", ""),
              f"a bulk cancel the audit cannot record is refused 503 ({status} {answer})")
        check(snapshot(schema) == before and bulk_count(schema) == 4,
              "neither changed anything: bulk-1..4 are still pending")
    finally:
        sql(f"DROP TRIGGER refuse_audit ON {s}.audit; DROP FUNCTION {s}.refuse_audit()")
    # A schema older than migration 16 cannot record an action before it: nothing is done.
    old_check = "CHECK (result IN ('done', 'refused', 'failed'))"
    new_check = "CHECK (result IN ('started', 'done', 'refused', 'failed'))"
    sql(f"ALTER TABLE {s}.audit DROP CONSTRAINT audit_result_check, "
        f"ADD CONSTRAINT audit_result_check {old_check}")
    try:
        before = snapshot(schema)
        status, _, answer = post(base, "api/action", {"action": "cancel", "id": "bulk-1"}, bearer)
        check(status == 503 and "older than migration 16" in answer.get("error", "")
              and "durable migrate" in answer.get("error", "") and snapshot(schema) == before,
              f"under migration 15's audit table a cancel is refused 503, nothing done ({status} {answer})")
    finally:
        sql(f"ALTER TABLE {s}.audit DROP CONSTRAINT audit_result_check, "
            f"ADD CONSTRAINT audit_result_check {new_check}")
    # The action done, its result not written: 200, with audit_error, and the row says 'started'.
    sql(f"CREATE FUNCTION {s}.refuse_end() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN RAISE EXCEPTION 'the audit cannot end rows in this test'; END$$; "
        f"CREATE TRIGGER refuse_end BEFORE UPDATE ON {s}.audit FOR EACH ROW "
        f"EXECUTE FUNCTION {s}.refuse_end()")
    try:
        status, _, answer = post(base, "api/action", {"action": "pause_queue", "queue": "emails"}, bearer)
        audit_id = answer.get("audit_id") if answer else None
        check(status == 200 and "still says 'started'" in answer.get("audit_error", "")
              and sql(f"SELECT result FROM {s}.audit WHERE id = {int(audit_id or 0)}") == "started",
              f"an action whose result cannot be written is done and says so ({status} {answer})")
    finally:
        sql(f"DROP TRIGGER refuse_end ON {s}.audit; DROP FUNCTION {s}.refuse_end()")


def api_with(base, path, headers):
    status, _, body = http(base + path, headers=headers)
    return json.loads(body) if status == 200 else {}


def read_only_checks(ro_base, cli_base, token):
    print("read-only consoles over HTTP:", flush=True)
    bearer = {"Authorization": f"Bearer {token}"}
    s = api(ro_base, "api/session")
    check(s.get("read_only") is True and s.get("actions") is False,
          f"the --read-only console says read-only, no actions ({s})")
    status, _, body = post(ro_base, "api/action", {"action": "pause_queue", "queue": "default"}, bearer)
    check(status == 403, f"read-only: a POST with the right token as Bearer is refused 403 ({status} {body})")
    status, _, body = post(ro_base, "api/bulk", {"action": "cancel", "filter": BULK_FILTER}, bearer)
    check(status == 403, f"read-only: a bulk dry run is refused 403 ({status} {body})")
    status, _, body = post(ro_base, "api/login", {"token": token, "name": "x"})
    check(status == 403, f"read-only: signing in is refused 403 ({status} {body})")
    s = api(cli_base, "api/session")
    check(s.get("actions") is False, f"durable ui without a token takes no actions ({s})")
    status, _, body = post(cli_base, "api/login", {"token": token, "name": "x"})
    check(status == 403, f"durable ui without a token: signing in is refused 403 ({status} {body})")
    status, _, body = post(cli_base, "api/action", {"action": "pause_queue", "queue": "default"}, bearer)
    check(status in (401, 403), f"durable ui without a token: an action is refused ({status} {body})")


# ---- in the browser -------------------------------------------------------------------------

def browser_actions(b, base, token, schema):
    sign_in(b, base, token)
    retry_dead_letter(b, base, schema)
    cancel_and_resume(b, base, schema)
    bulk_cancel(b, base, schema)
    audit_page(b, base, schema)
    queue_and_schedule(b, base, schema)
    fork_and_send(b, base, schema)
    sign_out(b, base)


def sign_in(b, base, token):
    print("signing in:", flush=True)
    b.open(base + "#/queues")
    check(not b.css("#read-only"), "the header does not say read-only when actions are on")
    check(not b.css(".queue-action"), "no queue buttons before signing in")
    check(len(b.css("#sign-in-hint")) == 1, "the page says to sign in to act")
    b.click("#sign-in")
    b.ready("login")
    check(b.d.execute_script("return document.body.dataset.page") == "login", "Sign in opens the login page")
    check(b.attr("#login-token", "type") == "password", "the token is typed in a password field")
    b.type("#login-token", "not-the-token")
    b.type("#login-name", ACTOR)
    b.expect_status(401, "/api/login")
    b.click("#login-submit")
    b.wait(lambda d: b.text("#login-message"), "a wrong token is refused on the page")
    banner = b.d.execute_script("const e = document.getElementById('error'); return e.hidden ? null : e.textContent")
    check(bool(banner) and banner == b.text("#login-message"), f"the banner shows the server's error ({banner})")
    b.log()
    b.type("#login-token", token)
    b.click("#login-submit")
    b.wait(lambda d: d.execute_script("return document.body.dataset.page") == "queues", "signing in returns to the queues page")
    b.ready()
    check(b.text("#who") == f"signed in as {ACTOR}", f"the header says who, as text ({b.text('#who')})")
    check(len(b.css(".queue-action")) > 0, "the queue buttons show once signed in")
    stored = b.d.execute_script("return JSON.stringify(Object.assign({}, localStorage, sessionStorage))")
    check("csrf" not in stored.lower() and token not in stored, "nothing of the session is in web storage")
    cookies = b.d.execute_script("return document.cookie")
    check(token not in cookies, "the page's script cannot read the session (HttpOnly cookie)")


def retry_dead_letter(b, base, schema):
    print("retrying a dead letter:", flush=True)
    b.open(base + "#/")
    b.css(".status-card[data-status='dead_letter']")[0].click()
    b.ready()
    b.css("tr.wf-row[data-id='charge-7'] a")[0].click()
    b.ready("workflow-actions")
    shown = [e.get_attribute("id") for e in b.shown("#wf-actions .act")]
    check(shown == ["act-cancel", "act-resume", "act-retry"], f"a dead letter offers cancel, resume and retry ({shown})")
    check(len(b.css("tr.step-row .fork-step")) == 1, "its step row has Fork from here")
    b.click("#act-retry")
    check(bool(b.shown("#act-confirm")), "retry asks first")
    check(status_of(schema, "charge-7") == "dead_letter", "nothing is done before the confirmation")
    b.click("#act-yes")
    b.wait(lambda d: b.attr("#act-result", "data-state") in ("ok", "error"), "the retry is answered")
    check(b.attr("#act-result", "data-state") == "ok", f"the retry is done ({b.text('#act-result')})")
    final = wait_until(lambda: status_of(schema, "charge-7") == "succeeded", 60)
    check(final, f"charge-7 succeeds in the database after the retry ({status_of(schema, 'charge-7')})")
    b.wait(lambda d: "succeeded" in (b.text("#wf-status") or ""), "the page shows it succeeded", 20)
    check(not b.shown("#wf-actions .act"), "a succeeded workflow offers no cancel, resume or retry")
    row = sql(f"SELECT actor || '|' || result FROM {q(schema)}.audit WHERE action = 'retry' "
              f"AND target->>'id' = 'charge-7' ORDER BY id DESC LIMIT 1")
    check(row == f"{ACTOR}|done", f"the retry is in the audit with who did it ({row})")
    b.log()


def cancel_and_resume(b, base, schema):
    print("cancelling and resuming:", flush=True)
    b.open(base + "#/workflow?id=shipment-9")
    b.click("#act-cancel")
    b.click("#act-no")
    check(not b.shown("#act-confirm") and status_of(schema, "shipment-9") == "sleeping",
          "answering No to the question cancels nothing")
    b.click("#act-cancel")
    b.click("#act-yes")
    b.wait(lambda d: b.attr("#act-result", "data-state") == "ok", "the cancel is done")
    check(status_of(schema, "shipment-9") == "cancelled", "shipment-9 is cancelled in the database")
    b.wait(lambda d: b.shown("#act-resume") and not b.shown("#act-cancel"), "the page then offers Resume only")
    b.click("#act-resume")
    b.click("#act-yes")
    b.wait(lambda d: b.attr("#act-result", "data-state") == "ok", "the resume is done")
    back = wait_until(lambda: status_of(schema, "shipment-9") in ("pending", "running", "sleeping"), 30)
    check(back, f"shipment-9 runs again after the resume ({status_of(schema, 'shipment-9')})")
    b.log()


def bulk_cancel(b, base, schema):
    print("bulk cancel:", flush=True)
    b.open(base + "#/workflows?queue=bulk&status=pending")
    check(len(b.css("#bulk")) == 1, "the list has the bulk bar")
    # A retry of pending workflows applies to none: the count says so, and why.
    Select(b.css("#bulk-action")[0]).select_by_value("retry")
    b.click("#bulk-count")
    b.wait(lambda d: b.attr("#bulk-plan", "data-count"), "the retry's dry run answers")
    skip = b.text("#bulk-skip") or ""
    check(b.attr("#bulk-plan", "data-count") == "0" and b.attr("#bulk-skip", "data-skipped") == "4"
          and "4 pending" in skip and "dead-lettered" in skip and not b.css("#bulk-run"),
          f"0 of 4 to retry, 4 pending skipped with the reason, nothing to run ({b.text('#bulk-summary')} / {skip})")
    b.shot("bulk-dry-run-skips")
    Select(b.css("#bulk-action")[0]).select_by_value("cancel")
    # A count, then the filter edited: the count is void.
    b.click("#bulk-count")
    b.wait(lambda d: b.attr("#bulk-plan", "data-count"), "the dry run answers")
    b.css("#f-name")[0].send_keys("x")
    check(not b.shown("#bulk-plan") and not b.css("#bulk-run"), "editing the filter discards the count")
    b.type("#f-name", "")
    b.click("#bulk-count")
    n = b.wait(lambda d: b.attr("#bulk-plan", "data-count"), "the dry run answers again")
    db = bulk_count(schema)
    check(n == str(db) == "4", f"the count shown is the database's count for the filter ({n}, {db})")
    summary = b.text("#bulk-summary") or ""
    check("4 workflows match status pending, queue “bulk”" in summary, f"the filter is said in words ({summary})")
    sample = sorted(a.text for a in b.css("#bulk-sample a"))
    check(sample == [f"bulk-{i}" for i in range(1, 5)], f"the sample lists them ({sample})")
    b.shot("bulk-dry-run")
    run = b.css("#bulk-run")[0]
    check(not run.is_enabled(), "Run is disabled before the count is typed")
    b.type("#bulk-confirm", "3")
    check(not run.is_enabled(), "Run stays disabled with another number")
    b.type("#bulk-confirm", "4")
    check(run.is_enabled(), "Run is enabled once the count is typed")
    # The set changes between the count and Run: refused, with the new count.
    sql(f"INSERT INTO {q(schema)}.workflows (id, name, status, inputs, queue, app_version) "
        f"SELECT 'bulk-5', name, status, inputs, queue, app_version FROM {q(schema)}.workflows WHERE id = 'bulk-1'")
    b.expect_status(409, "/api/bulk")
    run.click()
    b.wait(lambda d: b.attr("#bulk-plan", "data-changed") == "1", "a changed set is refused")
    check(b.text("#bulk-n") == "5", f"the refusal shows the new count ({b.text('#bulk-n')})")
    check("changed" in (b.text("#bulk-summary") or ""), f"the page says the set changed ({b.text('#bulk-summary')})")
    check(bulk_count(schema) == 5 and bulk_count(schema, "cancelled") == 0, "nothing was cancelled")
    run = b.css("#bulk-run")[0]
    check(not run.is_enabled(), "Run is disabled until the new count is typed")
    b.type("#bulk-confirm", "5")
    run.click()
    done = b.wait(lambda d: b.attr("#bulk-done", "data-done"), "the bulk cancel is answered")
    check(done == "5" and b.attr("#bulk-done", "data-skipped") == "0", f"5 done, none skipped ({b.text('#bulk-result')})")
    check(bulk_count(schema, "cancelled") == 5 and bulk_count(schema) == 0, "the database shows the 5 cancelled")
    row = sql(f"SELECT count || '|' || result || '|' || actor FROM {q(schema)}.audit "
              f"WHERE action = 'bulk_cancel' AND result = 'done' ORDER BY id DESC LIMIT 1")
    check(row == f"5|done|{ACTOR}", f"the audit has the bulk cancel with its count ({row})")
    b.log()


def audit_page(b, base, schema):
    print("audit:", flush=True)
    b.open(base + "#/audit", "audit")
    rows = b.css("tr.audit-row")
    total = int(sql(f"SELECT count(*) FROM {q(schema)}.audit"))
    check(len(rows) == min(total, 50), f"the audit page lists the audit's rows ({len(rows)} of {total})")
    bulk = [r for r in rows if r.get_attribute("data-action") == "bulk_cancel" and "done" in r.text]
    cells = bulk[0].find_elements(By.CSS_SELECTOR, "td") if bulk else []
    check(len(cells) == 8 and cells[5].text == "5" and cells[2].text == ACTOR and "bulk-5" in cells[4].text,
          "the bulk cancel's row shows its count, who (as text) and its target")
    ids = [int(r.get_attribute("data-id")) for r in rows]
    check(ids == sorted(ids, reverse=True), "newest first")


def queue_and_schedule(b, base, schema):
    print("queues and schedules:", flush=True)
    paused = lambda: sql(f"SELECT paused FROM {q(schema)}.queues WHERE name = 'emails'")  # noqa: E731
    b.open(base + "#/queues")
    for action, label, want in (("resume_queue", "active", "f"), ("pause_queue", "paused", "t")):
        b.click(f"tr.queue-row[data-queue='emails'] .queue-action[data-action='{action}']")
        b.wait(lambda d: b.css(f"tr.queue-row[data-queue='emails'] .badge.{label}"), f"the emails queue shows {label}")
        check(paused() == want, f"{action}: the database agrees ({paused()})")
    sched = lambda: sql(f"SELECT paused FROM {q(schema)}.schedules WHERE id = 'nightly-report'")  # noqa: E731
    b.open(base + "#/schedules")
    for action, label, want in (("pause_schedule", "paused", "t"), ("resume_schedule", "active", "f")):
        b.click(f".schedule-action[data-action='{action}'][data-schedule='nightly-report']")
        b.wait(lambda d: b.css(f"tr.schedule-row[data-id='nightly-report'] .badge.{label}"), f"the schedule shows {label}")
        check(sched() == want, f"{action}: the database agrees ({sched()})")
    b.click(".schedule-action[data-action='trigger_schedule'][data-schedule='nightly-report']")
    run = b.wait(lambda d: b.text("#trigger-link"), "Trigger links to the new run")
    check(bool(run) and run.startswith("nightly-report@")
          and sql(f"SELECT count(*) FROM {q(schema)}.workflows WHERE id = '{run}'") == "1",
          f"the triggered run is in the database ({run})")
    b.shot("schedules-trigger")
    b.css("#trigger-link")[0].click()
    b.ready()
    check(b.text("#wf-id") == run, "the link opens the run")


def fork_and_send(b, base, schema):
    print("fork and send:", flush=True)
    b.open(base + "#/workflow?id=invoice-1")
    buttons = b.css("tr.step-row .fork-step")
    check(len(buttons) == 3, f"each step row has Fork from here ({len(buttons)})")
    buttons[-1].click()
    b.type("#fork-new-id", "invoice-1-refork")
    b.click("#fork-run")
    link = b.wait(lambda d: b.text("#fork-link"), "the fork links to the new workflow")
    check(link == "invoice-1-refork", f"the new workflow has the id given ({link})")
    done = wait_until(lambda: status_of(schema, "invoice-1-refork") == "succeeded", 30)
    check(done, "the fork runs to success in the database")
    b.open(base + "#/workflow?id=shipment-9")
    sent = lambda: int(sql(f"SELECT count(*) FROM {q(schema)}.messages WHERE workflow_id = 'shipment-9' AND topic = 'note'"))  # noqa: E731
    b.css("#send-box summary")[0].click()
    b.type("#send-topic", "note")
    b.type("#send-value", "not json")
    b.click("#send-run")
    b.wait(lambda d: b.attr("#send-result", "data-state") == "error", "a value that is not JSON is refused in the page")
    check(sent() == 0, "and nothing was sent")
    b.type("#send-value", '{"by": "<b>ops</b>"}')
    b.click("#send-run")
    b.wait(lambda d: b.attr("#send-result", "data-state") == "ok", "the message is sent")
    payload = sql(f"SELECT payload->>'by' FROM {q(schema)}.messages WHERE workflow_id = 'shipment-9' AND topic = 'note'")
    check(payload == "<b>ops</b>", f"the database has the message ({payload})")
    b.log()


def sign_out(b, base):
    print("signing out:", flush=True)
    b.open(base + "#/workflow?id=bulk-1")
    b.click("#sign-out")
    b.wait(lambda d: b.css("#sign-in") and not b.css("#wf-actions"), "after signing out the controls are gone")
    b.ready()


def read_only_pages(b, ro_base, cli_base):
    print("read-only pages:", flush=True)
    controls = "#bulk, #wf-actions, .act, .fork-step, .queue-action, .schedule-action, #send-form, #sign-in, #sign-in-hint"
    for base, what in ((ro_base, "--read-only"), (cli_base, "durable ui without a token")):
        for page in ("#/workflows?queue=bulk", "#/workflow?id=charge-7", "#/queues", "#/schedules", "#/audit"):
            b.open(base + page, "read-only-workflow" if page.startswith("#/workflow?") and base == ro_base else None)
            check(b.text("#read-only") == "read-only", f"{what}: the header says read-only on {page}")
            found = [e.get_attribute("id") or e.get_attribute("class") for e in b.css(controls)]
            check(not found, f"{what}: no action control on {page} ({found})")
        b.open(base + "#/login")
        check(len(b.css("#login-off")) == 1 and not b.css("#login-form"), f"{what}: the login page says there is nothing to sign in to")
