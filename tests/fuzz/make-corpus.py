#!/usr/bin/env python3
"""make-corpus.py - writes the seed corpora of the fuzz targets
(tests/fuzz/corpus/NAME), each seed named for what it is: the messages and
sources cube really exchanges, as PROTOCOL.md and the kernels of the suites
and examples show them, and malformed ones the readers must refuse. A fuzzer
starts from them.

    tests/fuzz/make-corpus.py [CORPUS_DIR]

Rewrites each directory it writes; the pre-scan's corpus is not one of them
(a fuzzer grew it).
"""
import os
import re
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Raw(bytes):
    """Bytes packed as they are: a value msgpack would not produce."""


def pack(v):
    """msgpack, smallest encoding, as msgpack-c packs it."""
    if isinstance(v, Raw):
        return bytes(v)
    if v is None:
        return b"\xc0"
    if v is True or v is False:
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 0x80:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack("b", v)
        if v >= 0:
            for tag, fmt, top in ((0xcc, "B", 1 << 8), (0xcd, ">H", 1 << 16),
                                  (0xce, ">I", 1 << 32), (0xcf, ">Q", 1 << 64)):
                if v < top:
                    return bytes([tag]) + struct.pack(fmt, v)
        for tag, fmt, low in ((0xd0, "b", -(1 << 7)), (0xd1, ">h", -(1 << 15)),
                              (0xd2, ">i", -(1 << 31)), (0xd3, ">q", -(1 << 63))):
            if v >= low:
                return bytes([tag]) + struct.pack(fmt, v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xa0 | len(b)]) + b
        if len(b) < 1 << 8:
            return b"\xd9" + struct.pack("B", len(b)) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(v, bytes):
        if len(v) < 1 << 8:
            return b"\xc4" + struct.pack("B", len(v)) + v
        return b"\xc5" + struct.pack(">H", len(v)) + v
    if isinstance(v, list):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(v)


def request(msgid, method, params):
    return [0, msgid, method, params]


def notify(method, params):
    return [2, method, params]


def response(msgid, error, result):
    return [1, msgid, error, result]


SERVICE = 0x5eed
MEM = (1 << 40) | 1
H = [SERVICE, MEM, 0, 0]
H_SLICE = [SERVICE, MEM, 256, 512]
U64_MAX = (1 << 64) - 1


def err(variant, payload=None):
    return [variant, payload]


def envelope_seeds():
    s = {}
    s["request-hello"] = request(1, "hello", [1, "fuzz"])
    for i, m in enumerate(["status", "kernels", "kernel_cache", "memory", "captures", "failures",
                           "sessions", "streams", "metrics", "config", "bans", "ended_sessions",
                           "recent_failures", "memory_report", "stream_ids", "comms"]):
        s["request-" + m.replace("_", "-")] = request(10 + i, m, [])
    s["notify-create"] = notify("create", [1, MEM, 1024])
    s["notify-write-inline"] = notify("write", [1, H, b"\x01\x02\x03\x04" * 4])
    s["notify-write-region"] = notify("write", [1, H_SLICE, [7, 0, 256]])
    s["notify-free"] = notify("free", [1, H])
    s["request-read"] = request(2, "read", [1, H_SLICE])
    s["request-sync"] = request(3, "sync", [1])
    s["request-check"] = request(4, "check", [1, [H, H_SLICE]])
    s["request-region"] = request(5, "region", [1 << 20])
    s["notify-region-free"] = notify("region_free", [7])
    s["notify-allocation-mode"] = notify("allocation_mode", [1, 2])
    s["request-export"] = request(6, "export", [H, False])
    s["request-import"] = request(7, "import", ["0123456789abcdef" * 4, True])
    s["notify-kernel"] = notify("kernel", [1, "KERNEL void k(uint32_t *out, INFO)\n{\n}\n", "k"])
    s["notify-launch"] = notify("launch", [1, 1, ["static", [4, 1, 1]], [64, 1, 1], [H, H_SLICE],
                                           [0, None], b"\0" * 16, [0, 2], 0])
    s["request-debug-inject"] = request(8, "debug_inject", ["launch", "Unknown", "a fault", 0])
    s["request-all-reduce"] = request(9, "all_reduce", [1, ["cpu0", "cpu1"], H, H, ["f32", "sum"]])
    s["request-peer-bind"] = request(30, "peer_bind", ["cpu1", 4096, 1024])
    s["response-hello"] = response(1, None, {
        "version": 1, "service": SERVICE, "session": 3, "backend": "cpu",
        "properties": {"max_cube_dim": [1024, 1024, 64], "max_units_per_cube": 1024,
                       "memory": 1 << 30, "name": "cpu0"},
        "limits": {"max_message_bytes": 80 << 20, "max_depth": 16, "max_container": 65536,
                   "max_str_bytes": 1 << 20, "max_objects": 1 << 20}})
    s["response-read"] = response(2, None, [b"\xa5" * 32])
    s["response-empty-str"] = response(2, None, "")
    s["response-validation"] = response(3, err("Validation", {"message": "no such stream"}), None)
    s["response-foreign-handle"] = response(4, err("ForeignHandle", {"handle": "a", "client": "b"}),
                                            None)
    s["response-several-unwritten"] = response(5, err("Several", {"errors": [
        err("Unwritten", {"failure": 7, "claimed": 2, "chain": ["launch `k`", "copy"],
                          "root": err("Launch", err("CompilationError",
                                                    err("Validation", {"reason": "line 3"})))}),
        err("Skipped"), err("TornDown")]}), None)
    s["response-io-storage-mapping"] = response(6, err("Io", err("StorageMappingFailed", {
        "size": 4096, "source": err("OutOfMemory", {"size": 4096})})), None)
    s["response-cube-dim"] = response(7, err("Launch", err("TooManyResources", err("CubeDim", {
        "requested": [2048, 1, 1], "max": [1024, 1024, 64]}))), None)
    s["response-no-device-transport"] = response(8, err("NoDeviceTransport",
                                                        {"operation": "all_reduce"}), None)
    s["notify-protocol-error"] = notify("protocol_error",
                                        [err("Generic", {"reason": "the message could not be "
                                                                   "decoded"})])
    deep = err("Generic", {"reason": "root"})
    for _ in range(20):
        deep = err("Launch", err("DevicePoisoned", err("Unknown", {"reason": "x"})))
    s["response-deep-error"] = response(9, deep, None)
    # Malformed: each one refused for one reason.
    s["bad-empty-array"] = []
    s["bad-map"] = {"type": 0}
    s["bad-type-3"] = [3, "m", []]
    s["bad-msgid-too-big"] = [0, 1 << 32, "status", []]
    s["bad-msgid-negative"] = [0, -1, "status", []]
    s["bad-empty-method"] = notify("", [])
    s["bad-method-not-str"] = [0, 1, 7, []]
    s["bad-params-map"] = notify("create", {"stream": 1})
    s["bad-notify-four"] = [2, "free", [1, H], None]
    s["bad-request-three"] = [0, 1, "status"]
    s["method-with-nul"] = notify("cre\0ate", [1])
    s["params-every-type"] = request(40, "status", [
        None, True, False, 0, 127, 255, 65535, U64_MAX, -1, -(1 << 40), 1.5, float("nan"),
        Raw(b"\xca\x3f\xc0\x00\x00"), "", "x" * 70, b"", b"\xff" * 300, [], {}, {"message": 1},
        H, [1, 2, 3, -4], [SERVICE, MEM, 1 << 63, 1 << 63]])
    return s


def launch_params(count=("static", [4, 1, 1]), dim=(64, 1, 1), handles=(H, H_SLICE),
                  io=(0, None), info=b"\0" * 16, offsets=(0, 2), mode=0):
    return [1, 1, list(count), list(dim), list(handles), list(io), info, list(offsets), mode]


def launch_seeds():
    s = {}
    s["static"] = launch_params()
    s["dynamic"] = launch_params(count=("dynamic", [SERVICE, MEM, 0, 4084]))
    s["no-buffers"] = launch_params(handles=(), io=(), info=b"", offsets=(0, 0))
    s["io-all-kinds"] = launch_params(handles=[H] * 6, io=(0, 1, 2, 3, None, None))
    s["io-fewer-than-buffers"] = launch_params(handles=[H] * 4, io=(1,))
    s["io-more-than-buffers"] = launch_params(handles=[H], io=(0, 1, 2))
    s["io-out-of-range"] = launch_params(io=(4, 0))
    s["io-negative"] = launch_params(io=(-1, 0))
    s["io-not-int"] = launch_params(io=("read", True))
    s["info-not-words"] = launch_params(info=b"\0" * 13)
    s["info-large"] = launch_params(info=b"\x07" * 4096, offsets=(256, 511))
    s["offsets-past-info"] = launch_params(offsets=(3, 9))
    s["mode-compile"] = launch_params(mode=1)
    s["mode-queue"] = launch_params(mode=2)
    s["mode-past-queue"] = launch_params(mode=3)
    s["count-zero"] = launch_params(count=("static", [0, 0, 0]))
    s["count-spread"] = launch_params(count=("static", [(1 << 32) - 1, 1, 1]), dim=(65535, 65535, 1))
    s["count-spread-max-zero"] = launch_params(count=("static", [1000, 7, 1]), dim=(0, 0, 0))
    s["count-spread-y"] = launch_params(count=("static", [1 << 31, 3, 1]), dim=(2, 2, 1024))
    s["count-unknown-kind"] = launch_params(count=("spread", [4, 1, 1]))
    s["count-static-handle"] = launch_params(count=("static", H))
    s["count-too-long"] = [1, 1, ["static", [1, 1, 1], 0], [1, 1, 1], [H], [0], b"", [0, 0], 0]
    s["dim-two"] = launch_params(dim=(64, 1))
    s["dim-too-big"] = launch_params(dim=(1 << 32, 1, 1))
    s["handle-short"] = launch_params(handles=([SERVICE, MEM, 0],))
    s["handle-slice-past-end"] = launch_params(handles=([SERVICE, MEM, U64_MAX, U64_MAX],))
    s["many-buffers"] = launch_params(handles=[H] * 40, io=[1] * 20 + [0] * 20)
    s["eight-params"] = launch_params()[:8]
    s["ten-params"] = launch_params() + [0]
    s["not-array"] = {"stream": 1}
    seeds = {k: pack(v) for k, v in s.items()}
    # Trailing bytes are the compiled kernel's answers.
    seeds["answers-every-kind"] = pack(launch_params(handles=[H] * 6, io=(None,) * 6)) + \
        bytes([0, 1, 2, 3, 0xff, 4])
    seeds["answers-beyond-buffers"] = pack(launch_params()) + bytes([3, 3, 3, 3, 0x80, 0x7f])
    seeds["answers-over-declarations"] = pack(launch_params(handles=[H] * 4, io=(1, 0, 2, 3))) + \
        bytes([0, 0xfe])
    return seeds


def cursor_seeds():
    """Launch messages as cubed reads them, in place where it can, and every
    form of each value a cursor reads, or must leave to msgpack-c."""
    s = {"launch-" + k: pack(notify("launch", Raw(v))) for k, v in launch_seeds().items()
         if not k.startswith("answers-")}
    s["launch-groups"] = pack(notify("launch", launch_params() + [[0, 1, 0, 2, 0, 3]]))
    s["launch-groups-short"] = pack(notify("launch", launch_params() + [[0, 1]]))
    s["launch-tensor-maps"] = pack(notify("launch", launch_params() + [[0] * 6, []]))
    s["launch-trailing"] = pack(notify("launch", launch_params())) + b"\xc0"
    forms = {
        "u8": Raw(b"\xcc\x05"), "u16": Raw(b"\xcd\x00\x05"), "u32": Raw(b"\xce\x00\x00\x00\x05"),
        "u64": Raw(b"\xcf" + struct.pack(">Q", U64_MAX)), "u64-past-u32": Raw(b"\xcf" + struct.pack(">Q", 1 << 32)),
        "i8-positive": Raw(b"\xd0\x05"), "i64-positive": Raw(b"\xd3" + struct.pack(">q", 5)),
        "str8": Raw(b"\xd9\x06static"), "str16": Raw(b"\xda\x00\x06static"),
        "str32": Raw(b"\xdb\x00\x00\x00\x06static"), "bin16": Raw(b"\xc5\x00\x08" + b"\0" * 8),
        "bin32": Raw(b"\xc6\x00\x00\x00\x08" + b"\0" * 8),
        "array16": Raw(b"\xdc\x00\x03\x01\x02\x03"), "array32": Raw(b"\xdd\x00\x00\x00\x03\x01\x02\x03"),
        "float": 1.5, "negative": -3, "map": {"a": 1}, "bool": True,
    }
    for name, v in forms.items():
        s["form-" + name] = pack([v, H, None, "launch", b"\x01"])
    s["form-handle-signed"] = pack([[SERVICE, Raw(b"\xd3" + struct.pack(">q", 7)), 0, 0]])
    s["cut-str"] = b"\x91\xa6lau"
    s["cut-u64"] = b"\x91\xcf\x00\x00"
    s["cut-bin32"] = b"\x91\xc6\xff\xff\xff\xff\x00"
    s["cut-array32"] = b"\xdd\xff\xff"
    return s


C_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "?": "?", "0": "\0"}


def decode(lit):
    return re.sub(r"\\(x[0-9a-fA-F]+|[0-7]{1,3}|.)",
                  lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "x" else
                  chr(int(m.group(1), 8)) if m.group(1)[0] in "01234567" and len(m.group(1)) > 1
                  else ESCAPES.get(m.group(1), m.group(1)), lit)


def kernel_sources(path):
    """Each run of adjacent string literals that holds "KERNEL void"."""
    text = open(path, encoding="utf-8").read()
    runs, cur, last = [], [], None
    for m in C_LITERAL.finditer(text):
        if last is not None and text[last:m.start()].strip():
            runs.append("".join(cur))
            cur = []
        cur.append(decode(m.group(1)))
        last = m.end()
    runs.append("".join(cur))
    return [r for r in runs if "KERNEL void" in r]


def dialect_seeds():
    s = {}
    files = ["examples/vector_add.c", "examples/reduce.c", "examples/matmul.c",
             "tests/test-kernels.c", "tests/test-device.c", "tests/test-failures.c"]
    seen = set()
    for f in files:
        for src in kernel_sources(os.path.join(ROOT, f)):
            m = re.search(r"KERNEL\s+void\s+(\w+)", src)
            if not m:
                continue
            entry = m.group(1)
            name = "kernel-%s-%s" % (os.path.splitext(os.path.basename(f))[0], entry)
            if src in seen or name in s:
                continue
            seen.add(src)
            s[name] = entry + "\n" + src
    body = "{\n        uint64_t i = ABSOLUTE_POS;\n        if (i < BUFFER_LEN(0))\n" \
           "                out[i] = (uint32_t) i;\n}\n"
    k = "KERNEL void k(uint32_t *out, INFO)\n"
    s["refused-asm"] = "k\n" + k + "{\n        asm(\"nop\");\n}\n"
    s["refused-include"] = "k\n#include <stdio.h>\n" + k + body
    s["refused-pragma"] = "k\n  #  pragma once\n" + k + body
    s["refused-printf"] = "k\n" + k + "{\n        printf(out);\n}\n"
    s["refused-string"] = "k\n" + k + "{\n        const char *s = \"x\";\n}\n"
    s["refused-on-line-9"] = "k\n" + "\n" * 8 + k + "{ malloc(4); }\n"
    s["allowed-words-in-comments"] = "k\n/* malloc, printf, #include */\n// asm\n" + k + body
    s["allowed-char-literals"] = "k\n" + k + "{\n        char c = '\\'', d = '\"';\n}\n"
    s["allowed-directives"] = "k\n#define N 4\n#ifdef N\n#undef N\n#elif 1\n#else\n#endif\n" + k + body
    s["comment-unterminated"] = "k\n" + k + "{ /* never closed\n"
    s["char-unterminated"] = "k\n" + k + "{ char c = '\\\n"
    s["identifier-with-forbidden-part"] = "k\n" + k + "{ uint32_t freeze = 1, my_malloc = 2; }\n"
    s["entry-missing"] = "missing\n" + k + body
    s["entry-prefix"] = "k\nKERNEL void kk(uint32_t *out, INFO)\n{}\n" + k + body
    s["kernel-inside-word"] = "k\nMYKERNEL void k(uint32_t *out, INFO) {}\n" + k + body
    s["param-not-pointer"] = "k\nKERNEL void k(uint32_t n, uint32_t *out, INFO)\n" + body
    s["param-nameless"] = "k\nKERNEL void k(uint32_t *, INFO)\n" + body
    s["param-nested-parens"] = "k\nKERNEL void k(uint32_t (*out), INFO)\n" + body
    s["params-unclosed"] = "k\nKERNEL void k(uint32_t *out, INFO"
    s["no-body"] = "k\nKERNEL void k(uint32_t *out, INFO);\n"
    s["sync-and-shared"] = "k\n" + k + "{\n        SHARED uint32_t t[64];\n" \
        "        t[UNIT_POS] = 1;\n        sync_cube();\n        out[0] = t[0];\n}\n"
    s["crlf"] = "k\r\n" + k.replace("\n", "\r\n") + body.replace("\n", "\r\n")
    s["entry-not-identifier"] = "9k\n" + k + body
    s["no-newline"] = "k"
    return {k: v.encode() for k, v in s.items()}


def frontend_seeds():
    """The dialect's seeds, the isolation suite's hostile kernels, and the
    constructs the checker rewrites or refuses."""
    s = dict(dialect_seeds())
    for src in kernel_sources(os.path.join(ROOT, "tests/test-isolation.c")):
        m = re.search(r"KERNEL\s+void\s+(\w+)", src)
        if m:
            s["isolation-%s-%d" % (m.group(1), len(s))] = (m.group(1) + "\n" + src).encode()
    k = "KERNEL void k(const uint32_t *in, uint32_t *out, uint32_t n)\n"
    more = {
        "macro-access": "#define AT(i) out[i]\n" + k + "{\n        AT(0) = in[0];\n}\n",
        "macro-argument-twice": "#define SQ(x) ((x) * (x))\n" + k + "{\n        out[0] = SQ(in[n]);\n}\n",
        "index-first": k + "{\n        0[out] = 1[in];\n}\n",
        "deref-chain": k + "{\n        *(out + n) = *(in + 1) + *in;\n}\n",
        "compound-and-incdec": k + "{\n        out[0] += in[0];\n        out[1]++;\n        --out[2];\n}\n",
        "helper-prototype": "static void h(GLOBAL uint32_t *p, uint32_t v);\n" + k +
            "{\n        h(out, n);\n}\nstatic void h(GLOBAL uint32_t *p, uint32_t v) { p[v] = v; }\n",
        "struct-local": "struct s { uint32_t a[4]; };\n" + k + "{\n        struct s x;\n        x.a[n] = 1;\n        out[0] = x.a[0];\n}\n",
        "conditional-skipped": "#ifdef __OPENCL_VERSION__\n#define W 1\n#else\n#define W 2\n#endif\n" + k + "{\n        out[0] = W;\n}\n",
        "entry-called": k + "{\n        if (n) k(in, out, n - 1);\n}\n",
        "sizeof-access": k + "{\n        out[0] = (uint32_t) sizeof(in[n]);\n}\n",
    }
    for name, src in more.items():
        s[name] = ("k\n" + src).encode()
    return s


def write(directory, seeds):
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus")
    write(os.path.join(out, "envelope"), {k: pack(v) for k, v in envelope_seeds().items()})
    write(os.path.join(out, "launch"), launch_seeds())
    write(os.path.join(out, "cursor"), cursor_seeds())
    write(os.path.join(out, "dialect"), dialect_seeds())
    write(os.path.join(out, "frontend"), frontend_seeds())


main()
