/*
 * cache.c - the kernel cache on disk: what it holds, how large it is, and
 * which artifacts go when it grows past cache-max-bytes.
 *
 * Every artifact is reached through the cache directory held open since the
 * start (openat with O_NOFOLLOW), never by its path, and it is checked on the
 * descriptor that was opened: a regular file this user owns that no one else
 * may write, whose bytes match the digest recorded beside it. What is loaded
 * is read from that same descriptor.
 *
 * The index is the loop thread's: an entry per artifact (KEY.EXT and its
 * KEY.EXT.sha256), its size and when it was last used (written or loaded;
 * the file's mtime carries that across restarts). Storing an artifact that
 * takes the cache past its limit evicts the least recently used ones, never
 * one a compile job is loading (pinned), until it fits again; what went is
 * remembered for cubectl kernels.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "services.h"
#include "sha256.h"

static uint64_t wall_ns(void)
{
        struct timespec t;

        clock_gettime(CLOCK_REALTIME, &t);
        return (uint64_t) t.tv_sec * 1000000000ull + (uint64_t) t.tv_nsec;
}

void cube__artifact_name(const cube__disk_cache *dc, const char *hash, char name[CUBE__ARTIFACT_NAME])
{
        snprintf(name, CUBE__ARTIFACT_NAME, "%.64s.%s", hash, dc->ext);
}

/* The SHA-256 of what fd holds, from its start, in hex; 0 or -EIO. */
static int fd_digest(int fd, char hex[65])
{
        cube__sha256 sha;
        char buf[65536];
        ssize_t n;
        off_t off = 0;

        cube__sha256_init(&sha);
        while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
                cube__sha256_update(&sha, buf, (size_t) n);
                off += n;
        }
        if (n < 0)
                return -EIO;
        cube__sha256_hex(&sha, hex);
        return 0;
}

/* Opens name in the held directory, refusing a symlink, and checks what was
 * opened: a regular file of this user that no one else may write. */
static int open_checked(const cube__disk_cache *dc, const char *name, struct stat *ret_st)
{
        struct stat st;
        int fd = openat(dc->fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);

        if (fd < 0)
                return errno == ELOOP ? -EPERM : -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
            (st.st_mode & 022)) {
                close(fd);
                return -EPERM;
        }
        if (ret_st)
                *ret_st = st;
        return fd;
}

int cube__artifact_open(const cube__disk_cache *dc, const char *name, uint64_t *ret_bytes)
{
        char dname[CUBE__ARTIFACT_NAME + 8], want[65] = "", got[65];
        struct stat st;
        int fd, dfd;
        bool ok;

        fd = open_checked(dc, name, &st);
        if (fd < 0)
                return fd;
        snprintf(dname, sizeof(dname), "%s.sha256", name);
        dfd = open_checked(dc, dname, NULL);
        ok = dfd >= 0 && pread(dfd, want, 64, 0) == 64 && fd_digest(fd, got) == 0 &&
             memcmp(want, got, 64) == 0;
        if (dfd >= 0)
                close(dfd);
        if (!ok) {
                close(fd);
                return -EBADMSG;
        }
        if (ret_bytes)
                *ret_bytes = (uint64_t) st.st_size + 64;
        return fd;
}

int cube__artifact_seal(const cube__disk_cache *dc, const char *name, const char *entry,
                        const char *source, uint64_t *ret_bytes)
{
        char dname[CUBE__ARTIFACT_NAME + 8], tmp[CUBE__ARTIFACT_NAME + 16], hex[65], src[65];
        char record[256];
        struct stat st;
        int fd = open_checked(dc, name, &st), tfd = -1, n;
        cube__sha256 sha;

        if (fd < 0)
                return fd;
        snprintf(dname, sizeof(dname), "%s.sha256", name);
        snprintf(tmp, sizeof(tmp), "%s.tmp", dname);
        if (fd_digest(fd, hex) < 0)
                goto fail;
        cube__sha256_init(&sha);
        cube__sha256_update(&sha, source, strlen(source));
        cube__sha256_hex(&sha, src);
        /* The digest first (all a load reads), then what the artifact is. */
        n = snprintf(record, sizeof(record), "%s\nentry %.63s\nsource %s\n", hex, entry, src);
        tfd = openat(dc->fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                     0600);
        if (tfd < 0 || write(tfd, record, (size_t) n) != n)
                goto fail;
        if (close(tfd) < 0) {
                tfd = -1;
                goto fail;
        }
        tfd = -1;
        if (renameat(dc->fd, tmp, dc->fd, dname) < 0)
                goto fail;
        if (ret_bytes)
                *ret_bytes = (uint64_t) st.st_size + (uint64_t) n;
        return fd;
fail:
        cube__log(CUBE__LOG_WARNING, "cannot record the digest of %s/%s: %s; it will be compiled "
                  "again next time", dc->opts->cache_dir, name, strerror(errno));
        if (tfd >= 0)
                close(tfd);
        (void) unlinkat(dc->fd, tmp, 0);
        close(fd);
        return -EIO;
}

void cube__artifact_touch(int fd)
{
        (void) futimens(fd, NULL);
}

static cube__artifact *find(cube__disk_cache *dc, const char *name)
{
        for (size_t i = 0; i < dc->n; i++)
                if (strcmp(dc->v[i].name, name) == 0)
                        return &dc->v[i];
        return NULL;
}

static cube__artifact *add(cube__disk_cache *dc, const char *name)
{
        cube__artifact *a = find(dc, name);

        if (a)
                return a;
        if (dc->n == dc->cap) {
                size_t cap = dc->cap ? dc->cap * 2 : 64;
                cube__artifact *grown = realloc(dc->v, cap * sizeof(*grown));
                if (!grown)
                        return NULL;
                dc->v = grown;
                dc->cap = cap;
        }
        a = &dc->v[dc->n++];
        *a = (cube__artifact) {0};
        snprintf(a->name, sizeof(a->name), "%s", name);
        return a;
}

/* The entry point and source digest its digest file records after the
 * digest (empty for an artifact sealed before they were recorded). */
static void read_record(const cube__disk_cache *dc, cube__artifact *a)
{
        char dname[CUBE__ARTIFACT_NAME + 8], buf[256];
        const char *p;
        ssize_t n;
        int fd;

        a->entry[0] = a->source_hash[0] = '\0';
        snprintf(dname, sizeof(dname), "%s.sha256", a->name);
        fd = openat(dc->fd, dname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return;
        buf[n] = '\0';
        if ((p = strstr(buf, "\nentry ")))
                sscanf(p + 7, "%63[^\n]", a->entry);
        if ((p = strstr(buf, "\nsource ")))
                sscanf(p + 8, "%64[0-9a-f]", a->source_hash);
}

/* Removes one artifact and its digest from the disk and the index. */
static void evict(cube__disk_cache *dc, cube__artifact *a)
{
        char dname[CUBE__ARTIFACT_NAME + 8];
        cube__evicted *ev = &dc->recent[dc->next_recent];

        snprintf(dname, sizeof(dname), "%s.sha256", a->name);
        (void) unlinkat(dc->fd, a->name, 0);
        (void) unlinkat(dc->fd, dname, 0);
        /* The front end's facts of the kernel go with it. */
        snprintf(dname, sizeof(dname), "%.64s.facts", a->name);
        (void) unlinkat(dc->fd, dname, 0);
        snprintf(dname, sizeof(dname), "%.64s.facts.sha256", a->name);
        (void) unlinkat(dc->fd, dname, 0);
        cube__log(CUBE__LOG_INFO, "the kernel cache evicted %s (%" PRIu64 " bytes, the least "
                  "recently used) to stay under cache-max-bytes (%" PRIu64 ")", a->name, a->bytes,
                  dc->opts->cache_max_bytes);
        snprintf(ev->name, sizeof(ev->name), "%s", a->name);
        ev->bytes = a->bytes;
        ev->at_s = (double) (uv_hrtime() - dc->started_ns) / 1e9;
        dc->next_recent = (dc->next_recent + 1) % CUBE__EVICTED_KEPT;
        if (dc->n_recent < CUBE__EVICTED_KEPT)
                dc->n_recent++;
        dc->evictions++;
        dc->evicted_bytes += a->bytes;
        dc->bytes -= a->bytes;
        *a = dc->v[--dc->n];
}

/* Evicts the least recently used artifacts no compile is loading until the
 * cache fits its limit. */
static void trim(cube__disk_cache *dc)
{
        uint64_t limit = dc->opts->cache_max_bytes;

        while (limit && dc->bytes > limit) {
                cube__artifact *oldest = NULL;
                for (size_t i = 0; i < dc->n; i++)
                        if (!dc->v[i].pins && (!oldest || dc->v[i].used_ns < oldest->used_ns))
                                oldest = &dc->v[i];
                if (!oldest)
                        break;
                evict(dc, oldest);
        }
}

/* Whether name is KEY.EXT: 64 hex digits, a dot and the backend's extension. */
static bool artifact_named(const cube__disk_cache *dc, const char *name)
{
        const char *ext = dc->ext;

        if (strlen(name) != 65 + strlen(ext) || name[64] != '.' || strcmp(name + 65, ext) != 0)
                return false;
        for (int i = 0; i < 64; i++)
                if (!strchr("0123456789abcdef", name[i]))
                        return false;
        return true;
}

int cube__disk_cache_init(cube__disk_cache *dc, int dir_fd, const cube__options *opts,
                          const char *ext, uint64_t started_ns)
{
        int fd;
        DIR *d;

        dc->fd = dir_fd;
        dc->opts = opts;
        dc->ext = ext;
        dc->started_ns = started_ns;
        fd = openat(dc->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                cube__log(CUBE__LOG_WARNING, "cannot list the kernel cache %s: %s; its size is "
                          "counted from the artifacts this run stores", dc->opts->cache_dir,
                          strerror(errno));
                return 0;
        }
        for (struct dirent *e; (e = readdir(d));) {
                char dname[CUBE__ARTIFACT_NAME + 8];
                struct stat st, dst;
                cube__artifact *a;

                if (!artifact_named(dc, e->d_name) ||
                    fstatat(dc->fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
                    !S_ISREG(st.st_mode) || !(a = add(dc, e->d_name)))
                        continue;
                snprintf(dname, sizeof(dname), "%s.sha256", e->d_name);
                a->bytes = (uint64_t) st.st_size +
                           (fstatat(dc->fd, dname, &dst, AT_SYMLINK_NOFOLLOW) == 0 ?
                            (uint64_t) dst.st_size : 0);
                a->used_ns = (uint64_t) st.st_mtim.tv_sec * 1000000000ull +
                             (uint64_t) st.st_mtim.tv_nsec;
                read_record(dc, a);
                dc->bytes += a->bytes;
        }
        closedir(d);
        trim(dc);
        return 0;
}

void cube__disk_cache_free(cube__disk_cache *dc)
{
        free(dc->v);
        dc->v = NULL;
        dc->n = dc->cap = 0;
}

bool cube__disk_cache_pin(cube__disk_cache *dc, const char *hash)
{
        char name[CUBE__ARTIFACT_NAME];
        cube__artifact *a;

        cube__artifact_name(dc, hash, name);
        if (!(a = find(dc, name)))
                return false;
        a->pins++;
        return true;
}

void cube__disk_cache_unpin(cube__disk_cache *dc, const char *hash, bool used)
{
        char name[CUBE__ARTIFACT_NAME];
        cube__artifact *a;

        cube__artifact_name(dc, hash, name);
        if (!(a = find(dc, name)))
                return;
        if (a->pins)
                a->pins--;
        if (used)
                a->used_ns = wall_ns();
}

void cube__disk_cache_stored(cube__disk_cache *dc, const char *hash, uint64_t bytes)
{
        char name[CUBE__ARTIFACT_NAME];
        cube__artifact *a;

        cube__artifact_name(dc, hash, name);
        if ((a = add(dc, name))) {
                dc->bytes -= a->bytes;
                a->bytes = bytes;
                a->used_ns = wall_ns();
                read_record(dc, a);
                dc->bytes += bytes;
        }
        trim(dc);
}

int cube__disk_cache_pack(const cube__disk_cache *dc, msgpack_packer *pk, bool names)
{
        size_t n = names ? dc->n_recent : 0;
        int r = 0;

        r |= msgpack_pack_map(pk, 8);
        r |= cube__pack_kv_str(pk, "dir", dc->opts->cache_dir);
        r |= cube__pack_kv_u64(pk, "bytes", dc->bytes);
        r |= cube__pack_kv_u64(pk, "max_bytes", dc->opts->cache_max_bytes);
        r |= cube__pack_kv_u64(pk, "artifacts", dc->n);
        r |= cube__pack_kv_u64(pk, "evictions", dc->evictions);
        r |= cube__pack_kv_u64(pk, "evicted_bytes", dc->evicted_bytes);
        r |= cube__pack_str(pk, "evicted");
        r |= msgpack_pack_array(pk, (uint32_t) n);
        /* Newest first. */
        for (size_t i = 0; i < n; i++) {
                const cube__evicted *ev = &dc->recent[(dc->next_recent + CUBE__EVICTED_KEPT - 1 - i) %
                                                      CUBE__EVICTED_KEPT];
                r |= msgpack_pack_map(pk, 3);
                r |= cube__pack_kv_str(pk, "artifact", ev->name);
                r |= cube__pack_kv_u64(pk, "bytes", ev->bytes);
                r |= cube__pack_str(pk, "at_s");
                r |= msgpack_pack_double(pk, ev->at_s);
        }
        /* What the directory holds, named to an administrator only. */
        n = names ? dc->n : 0;
        r |= cube__pack_str(pk, "stored");
        r |= msgpack_pack_array(pk, (uint32_t) n);
        for (size_t i = 0; i < n; i++) {
                const cube__artifact *a = &dc->v[i];
                char key[65];
                snprintf(key, sizeof(key), "%.64s", a->name);
                r |= msgpack_pack_map(pk, 6);
                r |= cube__pack_kv_str(pk, "hash", key);
                r |= cube__pack_kv_str(pk, "source_hash", a->source_hash);
                r |= cube__pack_kv_str(pk, "entry", a->entry);
                r |= cube__pack_kv_str(pk, "backend", dc->opts->backend);
                r |= cube__pack_kv_u64(pk, "bytes", a->bytes);
                r |= cube__pack_str(pk, "used_at");
                r |= msgpack_pack_double(pk, (double) a->used_ns / 1e9);
        }
        return r;
}
