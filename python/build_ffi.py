"""build_ffi.py - the cffi builder of cubeclient._cube (API mode, out of line).

The declarations are cube.h itself: its preprocessor lines are stripped (the
C++ guards with what they enclose; integer #defines are kept and substituted
where they size an array) and the rest is handed to cffi's cdef unchanged.
The extension is then compiled against the same header, so a mismatch between
the two is a compile error, not a crash.

Where libcubeclient is found, in order:
  CUBE_BUILD_DIR   a meson build directory of cube: its meson-uninstalled/
                   pkg-config file is used (the library in BUILD/libclient)
  pkg-config       `pkg-config cubeclient` (after `meson install`, or with
                   PKG_CONFIG_PATH set)
The library directories found are also written into the extension's run path,
so a build-tree library is found without LD_LIBRARY_PATH.
"""
import os
import re
import shlex
import subprocess

from cffi import FFI

# Helpers compiled into the extension. Every call the binding makes names its
# stream first (cube_stream_set is per thread); these fold that into one call
# where it is made often.
HELPERS = r"""
static const char *const pycube_default_socket = CUBE_DEFAULT_SOCKET;

static cube_error *pycube_launch(cube_client *c, uint64_t stream, const cube_launch *l)
{
        cube_stream_set(stream);
        return cube_launch_kernel(c, l);
}

/* Gives a region back: through the connection while it is open, else (the
 * session is gone, and the region with it) only the local mapping. */
static void pycube_region_release(cube_client *c, cube_region *r)
{
        if (!r)
                return;
        if (c) {
                cube_region_free(c, r);
                return;
        }
        if (r->data)
                munmap(r->data, r->size);
        free(r);
}

/* The C side of the benchmark, in the same process and through the same
 * library: n launches then a sync, and a write + sync + read of one handle. */
static cube_error *pycube_c_launches(cube_client *c, uint64_t stream, const cube_launch *l,
                                     uint64_t n)
{
        cube_error *e;

        cube_stream_set(stream);
        for (uint64_t i = 0; i < n; i++)
                if ((e = cube_launch_kernel(c, l)))
                        return e;
        return cube_sync(c, NULL, 0);
}

static cube_error *pycube_c_roundtrip(cube_client *c, uint64_t stream, const cube_handle *h,
                                      const void *src, void *dst, uint64_t n)
{
        cube_error *e;

        cube_stream_set(stream);
        if ((e = cube_write(c, h, src, n)) || (e = cube_sync(c, h, 1)))
                return e;
        return cube_read(c, h, dst, n);
}
"""

HELPER_DECLS = """
void free(void *);
const char *const pycube_default_socket;
cube_error *pycube_launch(cube_client *c, uint64_t stream, const cube_launch *l);
void pycube_region_release(cube_client *c, cube_region *r);
cube_error *pycube_c_launches(cube_client *c, uint64_t stream, const cube_launch *l,
                              uint64_t n);
cube_error *pycube_c_roundtrip(cube_client *c, uint64_t stream, const cube_handle *h,
                               const void *src, void *dst, uint64_t n);
"""


def pkg_config():
    env = dict(os.environ)
    build = os.environ.get("CUBE_BUILD_DIR")
    if build:
        unin = os.path.join(os.path.abspath(build), "meson-uninstalled")
        env["PKG_CONFIG_PATH"] = unin + os.pathsep + env.get("PKG_CONFIG_PATH", "")
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "cubeclient"], env=env,
                             check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("cubeclient: libcubeclient not found: set CUBE_BUILD_DIR to a meson "
                         "build directory of cube, or install it so that "
                         f"`pkg-config cubeclient` answers ({e})")
    inc, libdirs, libs = [], [], []
    for tok in shlex.split(out):
        if tok.startswith("-I"):
            inc.append(tok[2:])
        elif tok.startswith("-L"):
            libdirs.append(tok[2:])
        elif tok.startswith("-l"):
            libs.append(tok[2:])
    return inc, libdirs, libs or ["cubeclient"]


def header_cdef(path):
    """cube.h as cffi's cdef takes it."""
    text = open(path, encoding="utf-8").read()
    # Comments may hide a '#'; cffi drops them anyway.
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines, defines, skip = [], {}, 0
    for line in text.splitlines():
        s = line.strip()
        if skip:
            if s.startswith("#if"):
                skip += 1
            elif s.startswith("#endif"):
                skip -= 1
            continue
        if s.startswith("#ifdef __cplusplus"):
            skip = 1
            continue
        m = re.match(r"#\s*define\s+(\w+)\s+(\d+)\s*$", s)
        if m:
            defines[m.group(1)] = m.group(2)
            continue
        if s.startswith("#"):
            continue
        lines.append(line)
    body = "\n".join(lines).replace("CUBE_DEPRECATED", "")
    for name, value in defines.items():
        body = re.sub(r"\b%s\b" % name, value, body)
    return "".join(f"#define {n} {v}\n" for n, v in defines.items()) + body


inc, libdirs, libs = pkg_config()
header = next((os.path.join(d, "cube.h") for d in inc + ["/usr/include", "/usr/local/include"]
               if os.path.isfile(os.path.join(d, "cube.h"))), None)
if header is None:
    raise SystemExit("cubeclient: cube.h not found in " + " ".join(inc))

ffibuilder = FFI()
ffibuilder.cdef(header_cdef(header) + HELPER_DECLS)
ffibuilder.set_source(
    "cubeclient._cube",
    '#include <stdlib.h>\n#include <sys/mman.h>\n#include "cube.h"\n' + HELPERS,
    include_dirs=inc, library_dirs=libdirs, runtime_library_dirs=libdirs, libraries=libs,
    extra_compile_args=["-O2"])

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
