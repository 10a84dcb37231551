"""Helpers of the console's browser tests (test_browser.py, test_actions.py): checks, the
console processes, HTTP, the database through psql, and headless Chromium whose log is read
after every page. test_browser.py imports it once Selenium's import succeeded.
"""
import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, StaleElementReferenceException,
                                        TimeoutException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

failures = []


def check(ok, what):
    print(("  ok: " if ok else "  FAILED: ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def wait_until(fn, timeout=20, step=0.2):
    """fn() until it is truthy or `timeout` seconds passed; its last value."""
    deadline = time.time() + timeout
    while True:
        v = fn()
        if v or time.time() >= deadline:
            return v
        time.sleep(step)


def start_server(argv, env):
    """Starts a console process and returns (process, url) once it printed its address."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 180
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} exited ({p.wait()}) before serving the console")
        if "http://" in line:
            return p, line[line.index("http://"):].split()[0]
    raise RuntimeError(f"{argv[0]} did not print the console's address within 180 s")


def stop_server(p):
    if p.poll() is None:
        p.stdin.close()
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def http(url, method="GET", headers=None, data=None):
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def api(base, path):
    status, _, body = http(base + path)
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body}")
    return json.loads(body)


def post(base, path, body, headers=None):
    """POST a JSON body; (status, headers, the answer as JSON or None)."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    status, hdrs, text = http(base + path, "POST", h, json.dumps(body).encode())
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, None


def sql(query):
    """One psql query on the test's database (no psycopg2 needed); its rows as text."""
    r = subprocess.run(["psql", os.environ["DURABLE_DATABASE_URL"], "-XAtqc", query],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"psql: {query}: {r.stderr.strip()}")
    return r.stdout.strip()


@contextlib.contextmanager
def holding(lock_sql, name):
    """A psql session (application_name `name`) that runs `lock_sql` in a transaction and keeps
    it open while the body of the `with` runs, entered once the session holds what it took (it
    has gone on to sleep); then the session is ended, and its locks with it."""
    p = subprocess.Popen(["psql", os.environ["DURABLE_DATABASE_URL"], "-Xqc",
                          f"BEGIN; {lock_sql}; SELECT pg_sleep(300)"],
                         env=dict(os.environ, PGAPPNAME=name), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                               f"'{name}' AND state = 'active' AND query LIKE '%pg_sleep%'") != "0",
                   timeout=30)
        yield
    finally:
        sql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{name}'")
        p.wait(timeout=60)


class Browser:
    def __init__(self, shots):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1280,900"):
            options.add_argument(a)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.d = webdriver.Chrome(service=Service(DRIVER), options=options)
        self.shots = shots
        self.errors = []
        self.expected = []  # answers the next steps provoke on purpose: (status, path)

    def open(self, url, shot=None):
        self.d.get("about:blank")
        self.d.get(url)
        return self.ready(shot)

    def ready(self, shot=None):
        try:
            WebDriverWait(self.d, 30).until(
                lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        except TimeoutException:
            check(False, f"{self.d.current_url} became ready")
        banner = self.d.execute_script(
            "const e = document.getElementById('error'); return e && !e.hidden ? e.textContent : null")
        check(banner is None, f"no error banner on {self.d.current_url} ({banner})")
        if shot:
            self.shot(shot)
        self.log()
        return self

    def shot(self, name):
        path = os.path.join(self.shots, name + ".png")
        self.d.save_screenshot(path)
        print(f"  screenshot: {path}", flush=True)

    def expect_status(self, status, path):
        """Chromium logs a refused fetch ("the server responded with a status of 401") as
        SEVERE: one such entry for `path` is expected, not an error of the page."""
        self.expected.append((status, path))

    def log(self):
        for entry in self.d.get_log("browser"):
            if entry.get("level") != "SEVERE":
                continue
            message = entry.get("message", "")
            hit = next((x for x in self.expected
                        if re.search(re.escape(x[1]) + r" - Failed to load resource: the server "
                                     r"responded with a status of " + str(x[0]) + r"\b", message)),
                       None)
            if hit:
                self.expected.remove(hit)
                continue
            self.errors.append(entry)
            check(False, f"no browser error on {self.d.current_url}: {message}")

    def probe(self):
        """The log reading works: an error thrown by a page script reaches it as SEVERE."""
        self.d.execute_script("setTimeout(() => { throw new Error('durable-log-probe'); }, 0)")
        time.sleep(0.5)
        seen = [e for e in self.d.get_log("browser")
                if e.get("level") == "SEVERE" and "durable-log-probe" in e.get("message", "")]
        check(len(seen) == 1, "a JavaScript error reaches the browser log the test reads")

    def no_alert(self):
        try:
            self.d.switch_to.alert
            return False
        except NoAlertPresentException:
            return True

    def css(self, selector):
        return self.d.find_elements(By.CSS_SELECTOR, selector)

    def text(self, selector):
        found = self.css(selector)
        return found[0].text if found else None

    def attr(self, selector, name):
        found = self.css(selector)
        return found[0].get_attribute(name) if found else None

    def shown(self, selector):
        return [e for e in self.css(selector) if e.is_displayed()]

    def click(self, selector):
        found = self.shown(selector)
        if not check(len(found) > 0, f"{selector} is shown on {self.d.current_url}"):
            return False
        found[0].click()
        return True

    def type(self, selector, value):
        e = self.css(selector)[0]
        e.clear()
        e.send_keys(value)

    def wait(self, fn, what, timeout=20):
        """Waits for fn(driver) to be truthy; a check either way. Its value."""
        try:
            v = WebDriverWait(self.d, timeout, ignored_exceptions=(StaleElementReferenceException,)
                              ).until(lambda d: fn(d))
        except TimeoutException:
            v = None
        check(bool(v), what)
        return v

    def rows_by_data(self, selector, attribute):
        return {e.get_attribute(attribute): e for e in self.css(selector)}
