/*
 * main.c - cubed's command line.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"

static void usage(FILE *f)
{
        fprintf(f,
"Usage: cubed [OPTION]...\n"
"Serve one compute device to many processes over a Unix socket.\n"
"\n"
"  --socket PATH          listen on PATH (default " CUBE_DEFAULT_SOCKET ")\n"
"  --backend NAME         device backend: cpu (default cpu)\n"
"  --device N             device index on the backend (default 0)\n"
"  --cache-dir DIR        the persistent kernel cache (default\n"
"                         /var/cache/cube/BACKEND+DEVICE, e.g. /var/cache/cube/cpu0)\n"
"  --memory-limit BYTES   device memory to hand out (cpu backend; default 4G)\n"
"  --max-message BYTES    largest message accepted (default 80M)\n"
"  --max-depth N          deepest nesting accepted, at most 32 (default 16)\n"
"  --max-container N      most elements in one array or map (default 65536)\n"
"  --max-str BYTES        longest string accepted (default 1M)\n"
"  --max-objects N        most objects in one message (default 1048576)\n"
"  --log-level LEVEL      error, warning, notice, info or debug (default notice)\n"
"  --enable-fault-injection\n"
"                         accept debug_inject requests (tests only; off by default)\n"
"  --help                 show this help\n"
"  --version              show the version\n"
"\n"
"Sizes take an optional K, M, G or T suffix (powers of 1024).\n");
}

/* Parses "64M" and friends; refuses anything that is not a whole size. */
static int parse_size(const char *s, uint64_t *ret)
{
        char *end;
        unsigned long long v;
        uint64_t mult = 1;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || end == s)
                return -EINVAL;
        switch (*end) {
        case 'K': case 'k': mult = 1ull << 10; end++; break;
        case 'M': case 'm': mult = 1ull << 20; end++; break;
        case 'G': case 'g': mult = 1ull << 30; end++; break;
        case 'T': case 't': mult = 1ull << 40; end++; break;
        default: break;
        }
        if (*end != '\0' || (v && mult > UINT64_MAX / v))
                return -EINVAL;
        *ret = v * mult;
        return 0;
}

static int parse_level(const char *s)
{
        static const char *const names[] = { "error", "warning", "notice", "info", "debug" };

        for (int i = 0; i < 5; i++)
                if (strcmp(s, names[i]) == 0)
                        return CUBE__LOG_ERR + i;
        return -1;
}

int main(int argc, char **argv)
{
        enum { OPT_SOCKET = 256, OPT_BACKEND, OPT_CACHE_DIR, OPT_DEVICE, OPT_MEMORY, OPT_MAX_MESSAGE,
               OPT_MAX_DEPTH, OPT_MAX_CONTAINER, OPT_MAX_STR, OPT_MAX_OBJECTS, OPT_LOG_LEVEL,
               OPT_HELP, OPT_VERSION, OPT_FAULTS };
        static const struct option options[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "backend", required_argument, NULL, OPT_BACKEND },
                { "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
                { "device", required_argument, NULL, OPT_DEVICE },
                { "memory-limit", required_argument, NULL, OPT_MEMORY },
                { "max-message", required_argument, NULL, OPT_MAX_MESSAGE },
                { "max-depth", required_argument, NULL, OPT_MAX_DEPTH },
                { "max-container", required_argument, NULL, OPT_MAX_CONTAINER },
                { "max-str", required_argument, NULL, OPT_MAX_STR },
                { "max-objects", required_argument, NULL, OPT_MAX_OBJECTS },
                { "log-level", required_argument, NULL, OPT_LOG_LEVEL },
                { "help", no_argument, NULL, OPT_HELP },
                { "version", no_argument, NULL, OPT_VERSION },
                { "enable-fault-injection", no_argument, NULL, OPT_FAULTS },
                {}
        };
        cube__options opts = {
                .socket_path = CUBE_DEFAULT_SOCKET,
                .backend = "cpu",
                .log_level = CUBE__LOG_NOTICE,
        };
        cube__server srv;
        uint64_t v;
        int c, r;

        cube__limits_daemon_default(&opts.limits);
        while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
                switch (c) {
                case OPT_SOCKET: opts.socket_path = optarg; break;
                case OPT_BACKEND: opts.backend = optarg; break;
                case OPT_CACHE_DIR: opts.cache_dir = optarg; break;
                case OPT_LOG_LEVEL:
                        if ((opts.log_level = parse_level(optarg)) < 0)
                                goto bad;
                        break;
                case OPT_HELP: usage(stdout); return 0;
                case OPT_FAULTS: opts.fault_injection = true; break;
                case OPT_VERSION: printf("cubed %s, protocol %d\n", CUBE_VERSION,
                                         CUBE_PROTOCOL_VERSION); return 0;
                case '?': usage(stderr); return 2;
                default:
                        if (parse_size(optarg, &v) < 0)
                                goto bad;
                        switch (c) {
                        case OPT_DEVICE: if (v > 255) goto bad; opts.device_index = (unsigned) v; break;
                        case OPT_MEMORY: opts.memory_limit = v; break;
                        case OPT_MAX_MESSAGE: if (v < 1024) goto bad; opts.limits.max_message_bytes = v; break;
                        case OPT_MAX_DEPTH: if (!v || v > 32) goto bad; opts.limits.max_depth = (uint32_t) v; break;
                        case OPT_MAX_CONTAINER: if (!v || v > UINT32_MAX) goto bad; opts.limits.max_container = (uint32_t) v; break;
                        case OPT_MAX_STR: if (!v) goto bad; opts.limits.max_str_bytes = v; break;
                        case OPT_MAX_OBJECTS: if (v < 16) goto bad; opts.limits.max_objects = v; break;
                        }
                }
                continue;
bad:
                fprintf(stderr, "cubed: invalid value '%s' for --%s\n", optarg,
                        options[c - OPT_SOCKET].name);
                return 2;
        }
        if (optind < argc) {
                fprintf(stderr, "cubed: unexpected argument '%s'\n", argv[optind]);
                return 2;
        }

        char default_cache[256];
        if (!opts.cache_dir) {
                snprintf(default_cache, sizeof(default_cache), "/var/cache/cube/%s%u", opts.backend,
                         opts.device_index);
                opts.cache_dir = default_cache;
        }
        cube__log_init(opts.log_level);
        signal(SIGPIPE, SIG_IGN);
        /* A daemon that cannot start has served nothing: it exits at once and
         * leaves the cleanup to the kernel. */
        if (cube__server_init(&srv, &opts) < 0)
                return 1;
        r = cube__server_run(&srv);
        cube__server_done(&srv);
        return r == 0 ? 0 : 1;
}
