/*
 * main.c - cubed's command line.
 *
 * Every long option is also a key of the configuration file (config.c); an
 * option given here wins over the file, at start and at every reload.
 */
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "requests.h"

static void usage(FILE *f)
{
        fprintf(f,
"Usage: cubed [OPTION]...\n"
"Serve one compute device to many processes over a Unix socket.\n"
"\n"
"  --config FILE          read options from FILE (`key = value` lines; see\n"
"                         docs/OPERATIONS.md); reread on SIGHUP\n"
"  --config-if-exists FILE  the same, when FILE exists\n"
"  --instance NAME        the device as backend and index, e.g. cpu0\n"
"  --socket PATH          listen on PATH (default /run/cube/INSTANCE.sock);\n"
"                         a socket passed by systemd is used instead\n"
"  --backend NAME         device backend: cpu or cuda (default cpu)\n"
"  --device N             device index on the backend (default 0)\n"
"  --cache-dir DIR        the persistent kernel cache (default /var/cache/cube/INSTANCE)\n"
"  --memory-limit BYTES   device memory to hand out (cpu backend; default 4G)\n"
"  --max-message BYTES    largest message accepted (default 80M)\n"
"  --max-depth N          deepest nesting accepted, at most 32 (default 16)\n"
"  --max-container N      most elements in one array or map (default 65536)\n"
"  --max-str BYTES        longest string accepted (default 1M)\n"
"  --max-objects N        most objects in one message (default 1048576)\n"
"  --log-level LEVEL      error, warning, notice, info or debug (default notice)\n"
"  --poison-policy P      after a device fault: exit or reinit (default exit under\n"
"                         systemd, reinit when run by hand)\n"
"  --drain-timeout S      seconds a stop waits for work in flight (default 10)\n"
"  --request-poll-us US   after answering a client on CPUs apart from the daemon's,\n"
"                         poll this long at most for its next request before\n"
"                         sleeping (default 50; 0: never)\n"
"  --poison-grace S       seconds a poisoned device is reported before the policy\n"
"                         acts, once every session was told (default 5)\n"
"  --poison-ban-after N   poisons by one uid or session name before it is refused\n"
"                         (default 3; 0: never)\n"
"  --poison-ban-seconds S for how long (default 600)\n"
"Device time (cubed.conf(5)):\n"
"  --shares RULES         weights, classes, tenants and caps: 'default weight=1;\n"
"                         uid:alice weight=9 class=latency; group:g cap=30'\n"
"  --share-min-percent N  what each lower class keeps while a higher saturates (5)\n"
"  --share-bound-us US    lower-class work on the device while a higher class is\n"
"                         present, in expected device time (default 1000)\n"
"  --share-window-ms MS   the window shares are measured over (default 1000)\n"
"  --share-queue-us US    expected device time handed to the device at once\n"
"                         (default 10000)\n"
"  --kernel-timeout S     seconds one launch may run before it poisons the device\n"
"                         (default 5; 0: no limit)\n"
"  --compile-limit S      CPU seconds one kernel build may take (default 60)\n"
"  --check-mode M         auto, enforce or validate: which launches run checked\n"
"                         (default auto: all but unchecked-uids' unchecked ones)\n"
"  --unchecked-uids LIST  users who may launch unchecked under check-mode auto\n"
"  --compile-memory BYTES address space one kernel build may take (default: the\n"
"                         host's memory / 4 / builds at once, 2G to 4G)\n"
"  --compile-output BYTES bytes one kernel build may write to a file (default: the\n"
"                         host's memory / 256, 16M to 128M)\n"
"  --build-slots N        kernel builds that run at once (default: one per core\n"
"                         up to 4, and one more)\n"
"  --uid-build-slots N    of those, how many one user's builds may hold at once,\n"
"                         so that another's finds one (default 0: all but one)\n"
"Quotas (0: none):\n"
"  --session-memory BYTES device memory one session may hold (default 0)\n"
"  --uid-memory BYTES     device memory one user's sessions may hold (default 0)\n"
"  --max-sessions N       sessions in all (default 4096)\n"
"  --max-sessions-per-uid N  sessions of one user (default 1024)\n"
"  --max-streams N        streams of one session (default 1024)\n"
"  --max-requests N       work and answers one session may have in flight before\n"
"                         the daemon stops reading it (default 4096)\n"
"  --max-queued-bytes BYTES  payloads and unsent answers of one session before the\n"
"                         daemon stops reading it (default 256M)\n"
"  --region-memory BYTES  staging regions one session may hold, in whole pages\n"
"                         (default 1G)\n"
"  --max-regions N        staging regions one session may hold (default 64)\n"
"  --uid-queued-bytes BYTES  messages still arriving on one user's sessions\n"
"                         before they are no longer read (default: the host's\n"
"                         memory / 32, 64M to 1G)\n"
"  --max-receive-bytes BYTES  messages still arriving on every session before\n"
"                         they are no longer read (default 2G)\n"
"  --hello-timeout S      seconds a connection has to say hello (default 10)\n"
"  --frame-timeout S      seconds a message begun may go without a byte\n"
"                         before its connection is closed (default 30)\n"
"  --max-profile-windows N  profiling windows one session may hold open (default 1024)\n"
"  --max-graphs N         graphs one session may hold, captures included; 0: graph\n"
"                         capture off (default 256)\n"
"  --max-graph-launches N launches one graph capture may record (default 65536)\n"
"  --max-kernels N        kernel ids one session may register (default 1024)\n"
"  --max-kernel-source-bytes BYTES  source bytes one session's registrations may\n"
"                         hold (default 64M)\n"
"  --uid-kernels N        kernel ids one user's sessions may register (default 4096)\n"
"  --uid-kernel-source-bytes BYTES  their source bytes (default 256M)\n"
"  --daemon-kernels N     kernel ids every session together may register\n"
"                         (default 65536)\n"
"  --daemon-kernel-source-bytes BYTES  their source bytes (default: the host's\n"
"                         memory / 16, 256M to 4G)\n"
"  --uid-regions N        staging regions one user's sessions may hold (default 4096)\n"
"  --map-reserve N        mappings below vm.max_map_count that only root's and the\n"
"                         daemon user's regions may take (default 4096)\n"
"  --cache-max-bytes BYTES  the kernel cache's artifacts on disk; the least\n"
"                         recently used go past it (default 1G, 0: no limit)\n"
"Access:\n"
"  --socket-group GROUP   the socket's group, when cubed binds it itself\n"
"  --allow-uids LIST      uids that may connect (comma-separated; default: any)\n"
"  --allow-groups LIST    groups whose members may connect (names or gids)\n"
"Collectives:\n"
"  --transport none       answer every collective with NoDeviceTransport\n"
"  --comm-dir DIR         where same-host groups meet (default: the socket's directory)\n"
"  --comm-address IP      where this daemon's transport listens (default 127.0.0.1)\n"
"  --collective-timeout MS  a member silent this long is lost (default 30000)\n"
"  --max-groups N         groups of one session (default 64)\n"
"  --history N            ended sessions and failures kept for cubectl history\n"
"                         (default 64)\n"
"\n"
"  --check-config FILE    load FILE (with the other options given) and say whether\n"
"                         it is valid; exit 0 if so, 2 if not; serves nothing\n"
"  --enable-fault-injection\n"
"                         accept debug_inject requests (tests only; off by default)\n"
"  --help                 show this help\n"
"  --version              show the version\n"
"\n"
"Sizes take an optional K, M, G or T suffix (powers of 1024).\n");
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                { "config", required_argument, NULL, 'c' },
                { "config-if-exists", required_argument, NULL, 'C' },
                { "instance", required_argument, NULL, 'o' },
                { "socket", required_argument, NULL, 'o' },
                { "backend", required_argument, NULL, 'o' },
                { "device", required_argument, NULL, 'o' },
                { "cache-dir", required_argument, NULL, 'o' },
                { "memory-limit", required_argument, NULL, 'o' },
                { "max-message", required_argument, NULL, 'o' },
                { "max-depth", required_argument, NULL, 'o' },
                { "max-container", required_argument, NULL, 'o' },
                { "max-str", required_argument, NULL, 'o' },
                { "max-objects", required_argument, NULL, 'o' },
                { "log-level", required_argument, NULL, 'o' },
                { "poison-policy", required_argument, NULL, 'o' },
                { "drain-timeout", required_argument, NULL, 'o' },
                { "request-poll-us", required_argument, NULL, 'o' },
                { "poison-grace", required_argument, NULL, 'o' },
                { "kernel-timeout", required_argument, NULL, 'o' },
                { "compile-limit", required_argument, NULL, 'o' },
                { "check-mode", required_argument, NULL, 'o' },
                { "unchecked-uids", required_argument, NULL, 'o' },
                { "compile-memory", required_argument, NULL, 'o' },
                { "compile-output", required_argument, NULL, 'o' },
                { "build-slots", required_argument, NULL, 'o' },
                { "uid-build-slots", required_argument, NULL, 'o' },
                { "session-memory", required_argument, NULL, 'o' },
                { "uid-memory", required_argument, NULL, 'o' },
                { "max-sessions", required_argument, NULL, 'o' },
                { "max-sessions-per-uid", required_argument, NULL, 'o' },
                { "max-streams", required_argument, NULL, 'o' },
                { "max-requests", required_argument, NULL, 'o' },
                { "max-queued-bytes", required_argument, NULL, 'o' },
                { "region-memory", required_argument, NULL, 'o' },
                { "max-regions", required_argument, NULL, 'o' },
                { "uid-queued-bytes", required_argument, NULL, 'o' },
                { "max-receive-bytes", required_argument, NULL, 'o' },
                { "hello-timeout", required_argument, NULL, 'o' },
                { "frame-timeout", required_argument, NULL, 'o' },
                { "max-profile-windows", required_argument, NULL, 'o' },
                { "max-graphs", required_argument, NULL, 'o' },
                { "max-graph-launches", required_argument, NULL, 'o' },
                { "max-kernels", required_argument, NULL, 'o' },
                { "max-kernel-source-bytes", required_argument, NULL, 'o' },
                { "uid-kernels", required_argument, NULL, 'o' },
                { "uid-kernel-source-bytes", required_argument, NULL, 'o' },
                { "daemon-kernels", required_argument, NULL, 'o' },
                { "daemon-kernel-source-bytes", required_argument, NULL, 'o' },
                { "uid-regions", required_argument, NULL, 'o' },
                { "map-reserve", required_argument, NULL, 'o' },
                { "cache-max-bytes", required_argument, NULL, 'o' },
                { "socket-group", required_argument, NULL, 'o' },
                { "allow-uids", required_argument, NULL, 'o' },
                { "allow-groups", required_argument, NULL, 'o' },
                { "transport", required_argument, NULL, 'o' },
                { "comm-dir", required_argument, NULL, 'o' },
                { "comm-address", required_argument, NULL, 'o' },
                { "collective-timeout", required_argument, NULL, 'o' },
                { "max-groups", required_argument, NULL, 'o' },
                { "history", required_argument, NULL, 'o' },
                { "poison-ban-after", required_argument, NULL, 'o' },
                { "poison-ban-seconds", required_argument, NULL, 'o' },
                { "shares", required_argument, NULL, 'o' },
                { "share-min-percent", required_argument, NULL, 'o' },
                { "share-bound-us", required_argument, NULL, 'o' },
                { "share-window-ms", required_argument, NULL, 'o' },
                { "share-queue-us", required_argument, NULL, 'o' },
                { "enable-fault-injection", no_argument, NULL, 'f' },
                { "check-config", required_argument, NULL, 'k' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'v' },
                {}
        };
        char **overrides = calloc((size_t) argc * 2 + 2, sizeof(char *));
        size_t n = 0;
        const char *config = NULL;
        bool config_optional = false, check = false;
        char why[512];
        cube__options opts;
        cube__server srv;
        int c, index, r;

        if (!overrides)
                return 1;
        /* Bulk payloads are tens of MiB. Served from the heap and kept there
         * when freed, their pages are reused; from mmap, every message would
         * fault in fresh pages, which costs more than copying the bytes. */
        mallopt(M_MMAP_THRESHOLD, 256 << 20);
        mallopt(M_TRIM_THRESHOLD, 512 << 20);
        while ((c = getopt_long(argc, argv, "", options, &index)) != -1) {
                switch (c) {
                case 'c': config = optarg; break;
                case 'C': config = optarg; config_optional = true; break;
                case 'k': config = optarg; config_optional = false; check = true; break;
                case 'o':
                        overrides[n++] = (char *) options[index].name;
                        overrides[n++] = optarg;
                        break;
                case 'f':
                        overrides[n++] = (char *) "fault-injection";
                        overrides[n++] = (char *) "yes";
                        break;
                case 'h': usage(stdout); free(overrides); return 0;
                case 'v':
                        printf("cubed %s, protocol %d\n", CUBE_VERSION, CUBE_PROTOCOL_VERSION);
                        free(overrides);
                        return 0;
                default: usage(stderr); free(overrides); return 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "cubed: unexpected argument '%s'\n", argv[optind]);
                free(overrides);
                return 2;
        }
        if (cube__config_load(config, config_optional, overrides, n, &opts, why, sizeof(why)) < 0) {
                fprintf(stderr, "cubed: %s\n", why);
                free(overrides);
                return 2;
        }
        /* --check-config: what a reload would load, said and not served
         * (ExecReload runs it first, so `systemctl reload` fails on a file
         * the daemon would refuse). */
        if (check) {
                printf("%s: valid\n", config);
                cube__options_done(&opts);
                free(overrides);
                return 0;
        }

        cube__log_init(opts.log_level);
        signal(SIGPIPE, SIG_IGN);
        /* A daemon that cannot start has served nothing: it exits at once and
         * leaves the cleanup to the kernel (no exit handlers either: a leak
         * checker's report of what it never freed is not what a person who
         * started it needs to read). */
        if (cube__server_init(&srv, &opts, overrides, n) < 0) {
                fflush(stderr);
                _exit(srv.exit_code ? srv.exit_code : 1);
        }
        srv.argv = argv;
        r = cube__server_run(&srv);
        bool orphans = srv.orphan_threads > 0;
        cube__server_done(&srv);
        free(overrides);
        /* A group's thread still waiting out a join given up at the stop
         * holds the transport: the process ends under it, without running
         * the exit handlers it could still be inside. */
        if (orphans) {
                fflush(NULL);
                _exit(r);
        }
        return r;
}
