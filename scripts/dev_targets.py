"""Prints the build outputs (paths relative to the build dir, one a line) that the tests chosen by
ctest arguments need: scripts/test --dev builds only these.

    python3 scripts/dev_targets.py BUILD_DIR [ctest args...]

A Catch2 executable is needed when one of its sources declares a TEST_CASE whose ctest name,
'<executable>:<case name>', matches -R and not -E (BUILD_DIR/test-sources.tsv, written by
tests/CMakeLists.txt, says which sources each executable holds). Any other test (examples,
the browser test, lint) that matches brings its REQUIRED_FILES. Without -R every test may be
chosen, so it prints 'all'.
"""
import json
import os
import re
import subprocess
import sys

TEST_CASE = re.compile(r'^\s*(?:TEMPLATE_)?TEST_CASE\s*\(\s*"((?:[^"\\]|\\.)*)"', re.M)


def option(args, short, long):
    """The values of -Rx, -R x and --tests-regex x forms of one ctest option."""
    values = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in (short, long) and i + 1 < len(args):
            values.append(args[i + 1])
            i += 2
            continue
        if a.startswith(short) and len(a) > len(short) and not a.startswith(short + "E"):
            values.append(a[len(short):])
        elif a.startswith(long + "="):
            values.append(a[len(long) + 1:])
        i += 1
    return values


def main():
    build_dir, args = sys.argv[1], sys.argv[2:]
    include = option(args, "-R", "--tests-regex")
    exclude = option(args, "-E", "--exclude-regex")
    if not include:
        print("all")
        return
    inc = [re.compile(r) for r in include]
    exc = [re.compile(r) for r in exclude]

    def chosen(name):
        return all(r.search(name) for r in inc) and not any(r.search(name) for r in exc)

    needed = []

    def need(path):
        rel = os.path.relpath(path, build_dir)
        if rel not in needed:
            needed.append(rel)

    with open(os.path.join(build_dir, "test-sources.tsv"), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            exe, source = line.rstrip("\n").split("\t")
            if not source.endswith(".cpp") or not os.path.exists(source):
                continue
            with open(source, encoding="utf-8") as src:
                names = TEST_CASE.findall(src.read())
            base = os.path.basename(exe)
            if any(chosen(f"{base}:{n}") for n in names):
                need(exe)

    shown = subprocess.run(["ctest", "--show-only=json-v1", *args], cwd=build_dir, check=True,
                           capture_output=True, text=True).stdout
    for test in json.loads(shown).get("tests", []):
        for prop in test.get("properties", []):
            if prop.get("name") == "REQUIRED_FILES":
                for path in prop.get("value", []):
                    need(path)
    for path in needed:
        print(path)


if __name__ == "__main__":
    main()
