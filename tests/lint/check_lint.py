#!/usr/bin/python3
"""The determinism lint (tools/durable-lint) on the planted bugs: every line of
tests/lint/planted.cpp marked `// lint: <call>` is reported, with that call and file:line, and
no other line; a file without such calls gives exit status 0; a file that does not parse, 2.

    check_lint.py LINT PLANTED CLEAN -- COMPILER_ARGS...
"""

import os
import re
import subprocess
import sys


def run(lint, source, args):
    p = subprocess.run([sys.executable, lint, source, "--"] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def main(argv):
    sep = argv.index("--")
    lint, planted, clean = argv[:sep]
    args = argv[sep + 1:]
    failures = []

    expected = {}  # line -> call
    with open(planted) as f:
        for number, line in enumerate(f, 1):
            m = re.search(r"// lint: (.+)$", line)
            if m:
                expected[number] = m.group(1).strip()
    if len(expected) < 4:
        failures.append("%s marks %d lines, expected at least 4" % (planted, len(expected)))

    status, out, err = run(lint, planted, args)
    if status != 1:
        failures.append("on %s: exit status %d, expected 1 (calls found)\n%s" % (planted, status, err))
    reported = {}
    for line in out.splitlines():
        m = re.match(r"(.+?):(\d+):(\d+): (.+)$", line)
        if not m:
            failures.append("a line of output that names no place: %r" % line)
            continue
        if os.path.basename(m.group(1)) != os.path.basename(planted):
            failures.append("a report for another file: %r" % line)
            continue
        reported[int(m.group(2))] = m.group(4)
    for number, call in sorted(expected.items()):
        text = reported.get(number)
        if text is None:
            failures.append("line %d (%s) was not reported" % (number, call))
        elif not text.startswith(call + " in workflow code '"):
            failures.append("line %d: expected %r first, got %r" % (number, call, text))
        elif "outside a step: it " not in text or "; use " not in text and "; read it" not in text:
            failures.append("line %d: the report gives no reason or fix: %r" % (number, text))
    if len(expected) < 6:
        failures.append("%s marks %d lines, expected at least 6" % (planted, len(expected)))
    for number in sorted(set(reported) - set(expected)):
        failures.append("line %d was reported but is not marked: %r" % (number, reported[number]))

    status, out, err = run(lint, clean, args)
    if status != 0 or out:
        failures.append("on %s: exit status %d, expected 0 and no output\n%s%s"
                        % (clean, status, out, err))

    # The same through a compile database as CMake writes it: one shell-quoted "command" with a
    # define holding a space, -Werror, and a GCC option Clang does not know.
    import json
    import shlex
    import tempfile
    with tempfile.TemporaryDirectory() as build:
        command = ["g++", "-DPLANTED_NOTE=\"a b\"", "-Werror", "-fconcepts-diagnostics-depth=2"]
        command += args + ["-c", os.path.abspath(planted), "-o", "planted.o"]
        with open(os.path.join(build, "compile_commands.json"), "w") as f:
            json.dump([{"directory": build, "file": os.path.abspath(planted),
                        "command": " ".join(shlex.quote(a) for a in command)}], f)
        p = subprocess.run([sys.executable, lint, "-p", build, planted], capture_output=True,
                           text=True)
        lines = {int(m.group(1)) for m in re.finditer(r":(\d+):\d+: ", p.stdout)}
        if p.returncode != 1 or lines != set(expected):
            failures.append("with -p: exit status %d, lines %s, expected 1 and %s\n%s"
                            % (p.returncode, sorted(lines), sorted(expected), p.stderr))

    status, out, err = run(lint, planted, ["-DDURABLE_LINT_BROKEN=\"", "-std=c++20", "-x", "c"])
    if status != 2:
        failures.append("a file that does not parse: exit status %d, expected 2" % status)

    if failures:
        sys.stderr.write("determinism lint: %d problems\n  %s\n" % (len(failures), "\n  ".join(failures)))
        return 1
    print("determinism lint: %d planted calls reported with their lines, the clean file passes"
          % len(expected))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
