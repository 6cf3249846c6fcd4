"""Side by side: per codebase and tool, findings in all, in _test.go files, in
generated files; and which findings of one tool another reports on the same line.
   python3 compare.py OUT"""
import collections
import os
import re
import sys

out = sys.argv[1]
names = ["grpc-examples", "connect", "grpc-gateway", "oauth2-proxy", "kratos", "go-kit", "deadlinekit"]
tools = ["deadlinevet", "contextcheck", "noctx"]


def load(name, tool):
    p = os.path.join(out, "%s.%s.txt" % (name, tool))
    rows = []
    if not os.path.exists(p):
        return rows
    for line in open(p):
        m = re.match(r"([^:]+):(\d+):\d+: (.*)", line.rstrip("\n"))
        if m:
            rows.append((m.group(1), int(m.group(2)), m.group(3)))
    return rows


def generated(name, f):
    try:
        head = open(os.path.join(out, "src", name, f), errors="replace").read(4000)
    except OSError:
        return False
    return re.search(r"^// Code generated .* DO NOT EDIT\.$", head, re.M) is not None


print("| codebase | tool | findings | in _test.go | in generated files | same line as deadlinevet | same line as contextcheck | same line as noctx |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for n in names:
    data = {t: load(n, t) for t in tools}
    lines = {t: {(f, l) for f, l, _ in data[t]} for t in tools}
    for t in tools:
        rows = data[t]
        tests = sum(1 for f, _, _ in rows if f.endswith("_test.go"))
        gen = sum(1 for f, _, _ in rows if generated(n, f))
        same = []
        for o in tools:
            same.append("—" if o == t else str(sum(1 for f, l, _ in rows if (f, l) in lines[o])))
        print("| %s | %s | %d | %d | %d | %s |" % (n, t, len(rows), tests, gen, " | ".join(same)))
if "-v" in sys.argv:
    for n in names:
        for t in tools[1:]:
            kinds = collections.Counter(re.sub(r"`[^`]*`", "`…`", m) for f, l, m in load(n, t) if not f.endswith("_test.go"))
            for k, c in kinds.most_common():
                print(n, t, c, k)
