#!/usr/bin/python3
"""`durable dev` run as a user would (ctest: cli_dev).

Three runs over one directory: the first makes the cluster and serves the console (its
/api/session answers, the printed URL reaches a migrated schema, a table written there); it is
then killed with SIGKILL, as a crashed terminal would. The second must start anyway (the server
left behind is stopped or gone) and still holds the table; Ctrl-C stops it, with exit status 0
and no server left. The third, --fresh, starts empty. DURABLE_DATABASE_URL points at nothing:
`durable dev` makes its own database and ignores it. Runs as root too (CI does): the server then
runs as postgres or nobody, which must reach the directory, hence its mode.

usage: test_dev.py --cli build/bin/durable --psql /usr/bin/psql
"""
import argparse
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def fail(message, log=""):
    print(f"FAIL: {message}", file=sys.stderr)
    if log:
        print(log, file=sys.stderr)
    sys.exit(1)


running = []  # stopped however the test ends


class dev_process:
    """`durable dev` started with `args`; its four lines read from stdout (bounded)."""

    def __init__(self, cli, directory, *args):
        self.err = tempfile.TemporaryFile("w+", dir=os.path.dirname(directory))
        env = dict(os.environ, DURABLE_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none")
        self.proc = subprocess.Popen(
            [cli, "dev", "--dir", directory, "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE, stderr=self.err, env=env)
        running.append(self.proc)
        self.lines = []
        text = b""
        deadline = time.monotonic() + 120
        while b"Ctrl-C stops both." not in text:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            chunk = os.read(self.proc.stdout.fileno(), 4096) if ready else b""
            if not chunk:
                self.proc.kill()
                self.proc.wait()
                fail("durable dev did not print its four lines "
                     f"(exit status {self.proc.returncode})", text.decode() + self.stderr())
            text += chunk
        self.lines = text.decode().splitlines()
        self.text = text.decode()
        m = re.search(r"^PostgreSQL (\d+) on 127\.0\.0\.1:(\d+) \(data in (.+)\)$", self.text, re.M)
        if not m:
            fail("no 'PostgreSQL N on 127.0.0.1:PORT (data in DIR)' line", self.text)
        self.pg_port = int(m.group(2))
        if os.path.realpath(m.group(3)) != os.path.realpath(directory):
            fail(f"data in {m.group(3)}, not in --dir {directory}")
        m = re.search(r"^export DURABLE_DATABASE_URL=(postgresql://\S+)$", self.text, re.M)
        if not m:
            fail("no export DURABLE_DATABASE_URL= line", self.text)
        self.url = m.group(1)
        m = re.search(r"^console: (http://127\.0\.0\.1:\d+/)( \(.*\))?$", self.text, re.M)
        if not m:
            fail("no console: line", self.text)
        self.console = m.group(1)

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def server_pid(self, directory):
        with open(os.path.join(directory, "data", "postmaster.pid")) as f:
            return int(f.readline())

    def interrupt(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            status = self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("durable dev did not exit within 90 s of SIGINT", self.stderr())
        if status != 0:
            fail(f"durable dev exited with status {status} after SIGINT", self.stderr())


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def psql(psql_path, url, sql):
    r = subprocess.run([psql_path, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        fail(f"psql {sql!r}: {r.stderr}")
    return r.stdout.strip()


def check_serving(d, cli, psql_path):
    with urllib.request.urlopen(d.console + "api/session", timeout=30) as r:
        session = json.load(r)
    if session.get("schema") != "durable":
        fail(f"/api/session: {session}")
    # The program itself, given the printed URL: the schema is there and up to date.
    r = subprocess.run([cli, "--database", d.url, "--json", "migrate"], capture_output=True,
                       text=True, timeout=60)
    if r.returncode != 0:
        fail(f"durable migrate on the printed URL: {r.stderr}")
    migrated = json.loads(r.stdout)
    if migrated["applied"] != 0 or migrated["version"] < 1:
        fail(f"the schema was not migrated by durable dev: {migrated}")
    if psql(psql_path, d.url, "SELECT current_database()") != "durable":
        fail("the URL does not name the database durable")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cli", required=True)
    parser.add_argument("--psql", default="psql")
    args = parser.parse_args()
    started = time.monotonic()
    top = tempfile.mkdtemp(prefix="durable-dev-test-")
    # As root the server runs as another user, which must pass through to --dir.
    os.chmod(top, 0o755)
    directory = os.path.join(top, "dev")
    try:
        first = dev_process(args.cli, directory)
        check_serving(first, args.cli, args.psql)
        psql(args.psql, first.url, "CREATE TABLE public.kept (note text); "
                                   "INSERT INTO public.kept VALUES ('survives a restart')")
        pid = first.server_pid(directory)
        first.proc.kill()  # no chance to stop its server
        first.proc.wait()

        second = dev_process(args.cli, directory)
        check_serving(second, args.cli, args.psql)
        if psql(args.psql, second.url, "SELECT note FROM public.kept") != "survives a restart":
            fail("the data of the first run is gone")
        if alive(pid):
            fail(f"the first run's server (pid {pid}) still runs beside the second's")
        pid = second.server_pid(directory)
        second.interrupt()
        if alive(pid):
            fail(f"the server (pid {pid}) still runs after durable dev exited", second.stderr())
        if os.path.exists(os.path.join(directory, "data", "postmaster.pid")):
            fail("postmaster.pid is left behind after Ctrl-C")

        third = dev_process(args.cli, directory, "--fresh")
        check_serving(third, args.cli, args.psql)
        if psql(args.psql, third.url, "SELECT count(*) FROM pg_tables WHERE tablename = 'kept'") != "0":
            fail("--fresh kept the data of the earlier runs")
        pid = third.server_pid(directory)
        third.interrupt()
        if alive(pid):
            fail(f"the server (pid {pid}) still runs after durable dev --fresh exited")
    finally:
        for proc in running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()  # its server gets SIGINT as it dies
        shutil.rmtree(top, ignore_errors=True)
    print(f"OK: durable dev: three runs in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
