#!/usr/bin/env python3
"""check-layout.py - the daemon's walls and its headers' maps, as the code is.

    check-layout.py SOURCE_ROOT layers       each daemon file is in one layer,
                                             includes only headers of its own
                                             layer or below, and calls no
                                             function a higher layer defines
    check-layout.py SOURCE_ROOT header-map   every function a header declares
                                             sits under the banner of the file
                                             that defines it

The layers, lowest first (README.md, "Layout"): the state and services of
services.h; the work of cubed.h (the executor, allocations, launches, the
memory methods, graphs, profiling, collectives), which reaches up only
through the upcalls the layer above fills; the requests of requests.h
(connections, dispatch, admin, sessions, the server). A file not listed
below fails the check: a new file says where it stands.
"""
import os
import re
import sys

LAYERS = [
    ("services", ["idmap.c", "log.c", "history.c", "failures.c", "pools.c", "cache.c",
                  "sha256.c", "config.c", "access.c", "progress.c", "closer.c"],
     ["services.h", "sha256.h"]),
    ("work", ["executor.c", "work.c", "reply.c", "allocations.c", "regions.c", "kernels.c",
              "shapes.c", "kernel-check.c", "launches.c", "tensormaps.c", "memory-methods.c", "graphs.c",
              "profile.c", "groups.c", "collectives.c", "peer.c", "share.c", "inject.c", "tenants.c"],
     ["cubed.h", "comms.h"]),
    ("requests", ["conn.c", "linger.c", "direct.c", "dispatch.c", "admin.c", "session.c", "server.c",
                  "main.c"],
     ["requests.h"]),
]
# Headers below the daemon that any layer may include.
BELOW = {"cube.h", "driver.h", "errors.h", "prescan.h", "wire.h", "transport.h", "launch.h",
         "layout.h", "cursor.h", "poll-window.h",
         "frame.h", "rbuf.h", "frontend.h", "sandbox.h"}

DEF_RE = re.compile(r"^(?!static\b)(?!typedef\b)[A-Za-z_][\w \t\*]*?\b(cube__\w+)\s*\(")
CALL_RE = re.compile(r"\b(cube__\w+)\s*\(")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def definitions(path):
    """The non-static functions path defines: a signature at the start of a
    line whose parameter list ends in a line that opens a body."""
    names = set()
    lines = strip_comments(open(path).read()).split("\n")
    for i, line in enumerate(lines):
        m = DEF_RE.match(line)
        if not m:
            continue
        for j in range(i, min(i + 8, len(lines))):
            if lines[j].rstrip().endswith(";"):
                break
            if lines[j].startswith("{"):
                names.add(m.group(1))
                break
    return names


def layers(root):
    daemon = os.path.join(root, "daemon")
    problems = []
    layer_of = {}
    headers_of = []
    for rank, (name, files, headers) in enumerate(LAYERS):
        for f in files:
            layer_of[f] = (rank, name)
        headers_of.append(set(headers))
    upper_rank = len(LAYERS)
    sources = sorted(f for f in os.listdir(daemon) if f.endswith(".c"))
    defined_by = {}
    for f in sources:
        for n in definitions(os.path.join(daemon, f)):
            defined_by[n] = f
    for rank, (name, _, headers) in enumerate(LAYERS):
        allowed = set(BELOW).union(*headers_of[:rank + 1])
        for h in headers:
            for inc in INCLUDE_RE.findall(open(os.path.join(daemon, h)).read()):
                if inc not in allowed:
                    problems.append(f"daemon/{h} ({name}) includes {inc}, which is above its layer")
    for f in sorted(layer_of):
        if not os.path.exists(os.path.join(daemon, f)):
            problems.append(f"daemon/{f} is listed in a layer but does not exist")
    for f in sources:
        if f not in layer_of:
            problems.append(f"daemon/{f} is in no layer: say where it stands in check-layout.py")
            continue
        rank, name = layer_of[f]
        allowed = set(BELOW)
        for r in range(rank + 1):
            if r < len(headers_of):
                allowed |= headers_of[r]
        text = open(os.path.join(daemon, f)).read()
        if rank < upper_rank:
            for inc in INCLUDE_RE.findall(text):
                if inc not in allowed:
                    problems.append(f"daemon/{f} ({name}) includes {inc}, which is above its layer")
            for callee in sorted(set(CALL_RE.findall(strip_comments(text)))):
                owner = defined_by.get(callee)
                if owner and layer_of.get(owner, (upper_rank,))[0] > rank:
                    problems.append(f"daemon/{f} ({name}) calls {callee}, which "
                                    f"daemon/{owner} defines in a higher layer")
    return problems


# "/* ---- what (file.c) ---- */", or a section that is only "/* file.c */".
BANNER_RE = re.compile(r"^/\* (?:---- .*\(([\w.-]+\.c(?:, [\w.-]+\.c)*)\)|([\w.-]+\.c(?:, [\w.-]+\.c)*) \*/)")
DECL_RE = re.compile(r"^(?!static\b)(?!typedef\b)(?!#)[A-Za-z_][\w \t\*]*?\b(cube__\w+)\s*\(")


def header_map(root):
    problems = []
    headers = []
    for d in ("daemon", "backends/cpu", "backends"):
        for f in sorted(os.listdir(os.path.join(root, d))):
            if f.endswith(".h"):
                headers.append(os.path.join(d, f))
    defined = {}
    for d in ("daemon", "backends/cpu", "backends"):
        for f in os.listdir(os.path.join(root, d)):
            if f.endswith(".c"):
                for n in definitions(os.path.join(root, d, f)):
                    defined.setdefault(n, []).append(os.path.join(d, f))
    for h in headers:
        banner = None
        lines = strip_comments_keep_banners(open(os.path.join(root, h)).read()).split("\n")
        has_banners = any(BANNER_RE.match(l) for l in lines)
        if not has_banners:
            continue
        for no, line in enumerate(lines, 1):
            b = BANNER_RE.match(line)
            if b:
                banner = [x.strip() for x in (b.group(1) or b.group(2)).split(",")]
                continue
            m = DECL_RE.match(line)
            if not m or line.rstrip().endswith("\\"):
                continue
            name = m.group(1)
            where = defined.get(name)
            if not where:
                continue        # a macro's, or defined outside these folders
            if banner is None:
                problems.append(f"{h}:{no}: {name} is declared before any banner")
            elif not any(os.path.basename(w) in banner and os.path.dirname(w) == os.path.dirname(h)
                         for w in where):
                problems.append(f"{h}:{no}: {name} sits under the banner of {', '.join(banner)} "
                                f"but is defined in {', '.join(where)}")
    return problems


def strip_comments_keep_banners(text):
    out = []
    for line in text.split("\n"):
        out.append(line if BANNER_RE.match(line) else line)
    # Comments other than banners become blank lines, keeping line numbers.
    joined = "\n".join(out)
    return re.sub(r"/\*(?! ---- | [\w.-]+\.c(?:, [\w.-]+\.c)* \*/).*?\*/",
                  lambda m: "\n" * m.group(0).count("\n"), joined, flags=re.S)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("layers", "header-map"):
        print(__doc__, file=sys.stderr)
        return 2
    problems = layers(sys.argv[1]) if sys.argv[2] == "layers" else header_map(sys.argv[1])
    for p in problems:
        print("check-layout: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
