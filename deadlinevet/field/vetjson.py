"""Turns the output of go vet -json (one JSON object per package, after a
"# package" line) into one "file:line:col: [category] message" line per finding,
the file relative to the current directory."""
import json
import os
import sys

text = sys.stdin.read()
root = os.path.realpath(os.getcwd()) + "/"
dec = json.JSONDecoder()
i = 0
out = set()
while True:
    j = text.find("{", i)
    if j < 0:
        break
    try:
        obj, i = dec.raw_decode(text, j)
    except ValueError:
        i = j + 1
        continue
    for analyzers in obj.values():
        for diags in analyzers.values():
            if not isinstance(diags, list):  # {"error": ...}
                print("error:", diags, file=sys.stderr)
                continue
            for d in diags:
                cat = " [%s]" % d["category"] if d.get("category") else ""
                out.add("%s:%s %s" % (os.path.realpath(d["posn"].rsplit(":", 2)[0]).replace(root, "") + ":" + ":".join(d["posn"].rsplit(":", 2)[1:]), cat, d["message"]))
for line in sorted(out):
    print(line)
