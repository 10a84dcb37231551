#!/usr/bin/python3
"""Reads the OTLP/JSON file example 04 wrote, as a trace reader would, and checks it.

Usage: check_otlp.py FILE TRACE_ID ROOT_PARENT_ID

It must be valid JSON in the shape of an OTLP ExportTraceServiceRequest; every span has a
32-digit trace id (all the same: TRACE_ID), a 16-digit span id (unique), a name, start and end
times (decimal strings of nanoseconds, start <= end) and a status; every parent resolves to a
span of the file, except the workflow's first run, whose parent is ROOT_PARENT_ID (the caller's
span). And the tree is the one the example's workflow makes: a run of "order" with a step
"charge" whose first attempt failed and second succeeded, a step that started the child "receipt"
and under it the child's run, and a wait for the message "shipped".
"""
import json
import re
import sys


def fail(message):
    print(f"check_otlp: {message}", file=sys.stderr)
    sys.exit(1)


def attributes(span):
    out = {}
    for a in span.get("attributes", []):
        v = a["value"]
        out[a["key"]] = v.get("stringValue", v.get("intValue"))
    return out


def main():
    path, trace_id, root_parent = sys.argv[1:4]
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    if not spans:
        fail("no spans")
    by_id = {}
    for s in spans:
        for key in ("traceId", "spanId", "name", "startTimeUnixNano", "endTimeUnixNano", "status"):
            if key not in s:
                fail(f"span {s.get('name')!r} has no {key}")
        if not re.fullmatch(r"[0-9a-f]{32}", s["traceId"]):
            fail(f"bad trace id {s['traceId']!r}")
        if s["traceId"] != trace_id:
            fail(f"span {s['name']!r} is in trace {s['traceId']}, not {trace_id}")
        if not re.fullmatch(r"[0-9a-f]{16}", s["spanId"]) or s["spanId"] in by_id:
            fail(f"bad or repeated span id {s['spanId']!r}")
        if int(s["startTimeUnixNano"]) > int(s["endTimeUnixNano"]):
            fail(f"span {s['name']!r} ends before it starts")
        by_id[s["spanId"]] = s
    roots = [s for s in spans if s.get("parentSpanId") not in by_id]
    if len(roots) != 1 or roots[0].get("parentSpanId") != root_parent:
        fail(f"expected one span under the caller's {root_parent}, found "
             f"{[(r['name'], r.get('parentSpanId')) for r in roots]}")
    run = roots[0]
    if run["name"] != "run order":
        fail(f"the root is {run['name']!r}, not the run of 'order'")

    def children(parent, name=None):
        return [s for s in spans if s.get("parentSpanId") == parent["spanId"]
                and (name is None or s["name"] == name)]

    charge = children(run, "step charge")
    if len(charge) != 1:
        fail("no single step 'charge' under the run")
    attempts = sorted(children(charge[0]), key=lambda s: int(attributes(s)["durable.attempt"]))
    if [a["status"]["code"] for a in attempts] != [2, 1]:
        fail(f"expected a failed then a succeeded attempt of 'charge': {attempts}")
    if "declined" not in attempts[0]["status"].get("message", ""):
        fail("the failed attempt does not say why")
    started = children(run, "step receipt")
    if len(started) != 1 or attributes(started[0]).get("durable.step.kind") != "child":
        fail("no single step that started the child 'receipt'")
    child_runs = children(started[0], "run receipt")
    if len(child_runs) != 1:
        fail("the child's run does not hang under the step that started it")
    if not children(child_runs[0], "step render"):
        fail("the child's step is not under its run")
    if len(children(run, "wait shipped")) != 1:
        fail("no wait for the message 'shipped' under the run")
    print(f"check_otlp: {len(spans)} spans, one trace, every parent resolves")


if __name__ == "__main__":
    main()
