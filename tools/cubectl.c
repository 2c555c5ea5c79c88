/*
 * cubectl - inspect a running cubed.
 *
 * This file holds the usage, main, and the commands that act (drain,
 * undrain, kill-session) or pass the daemon's text on (metrics); the views
 * are in cubectl-views.c, discovery and health in cubectl-health.c and
 * cubectl-top.c.
 *
 * Exit codes scripts can rely on: 0 success, 1 the daemon answered with an
 * error, 2 bad usage, 3 the daemon could not be reached.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cubectl.h"

static void usage(FILE *f)
{
        fprintf(f,
"Usage: cubectl [--socket PATH] [--json] COMMAND [ARG]\n"
"Inspect a running cubed.\n"
"\n"
"Commands:\n"
"  status    the service, backend, device, uptime, sessions and memory in use\n"
"  kernels   the kernel cache: hash, entry point, backend, state, compile time, hits;\n"
"            the disk cache's size, limit and evictions\n"
"  failures  each live failure: id, root error, buffers claimed, session, skip chain\n"
"  sessions  each session: id, pid, uid, name, streams, memory in use and peak,\n"
"            launches, bytes in and out, errors\n"
"  shares    each session and tenant: class, weight, cap, device time, and its\n"
"            share of the last window's device time beside the share it is owed\n"
"  memory    device memory in use, in pages and at peak, and each stream's pools\n"
"  streams   each stream of each session, with its queued work\n"
"  graphs    each session's open profiling windows, graphs (launches, pages kept,\n"
"            replays) and captures under way\n"
"  comms     each collective group: members, state and traffic\n"
"  metrics   the daemon's figures in the Prometheus text format\n"
"  history   the sessions that ended and the failures of late, kept after they\n"
"            are gone (the daemon keeps `history` of each)\n"
"  bans      the uids and session names refused for poisoning the device\n"
"            poison-ban-after times\n"
"  config    the running configuration: each option, its value, where it came\n"
"            from and whether a reload changes it\n"
"  drain [--timeout S]\n"
"            take no new work; the daemon stops once the last working session\n"
"            ends, or after S seconds closes those left; cubectl still answers\n"
"  undrain   end a drain: take new work again\n"
"  kill-session ID\n"
"            close session ID; everything it held is reclaimed\n"
"  list [--dir DIR]\n"
"            every instance whose socket is in DIR (default /run/cube): socket,\n"
"            instance, backend, device, version, state, sessions; one that\n"
"            does not answer is listed unreachable, with why\n"
"  selftest  a known kernel, a memory pattern and copies of a few sizes through\n"
"            the daemon, each step checked and timed; exit 1 when one fails\n"
"  top [--interval S] [--count N]\n"
"            every S seconds (default 1), each session's launches and bytes in\n"
"            and out per second, memory and queued work; N frames, else until\n"
"            interrupted\n"
"\n"
"Options:\n"
"  --socket PATH   the daemon's socket (default $CUBE_SOCKET, else " CUBE_DEFAULT_SOCKET ")\n"
"  --json          print JSON for scripts\n"
"  --timeout S     drain: close the sessions left after S seconds\n"
"  --dir DIR       list: where the sockets are (default /run/cube)\n"
"  --interval S    top: seconds between frames (0.1 to 3600, default 1)\n"
"  --count N       top: stop after N frames\n"
"  --version       show the version\n"
"  --help          show this help\n"
"\n"
"Exit status: 0 success, 1 the daemon answered with an error, 2 bad usage,\n"
"3 the daemon could not be reached.\n");
}

static int cmd_metrics(cube_client *c, bool json, const char *arg)
{
        char *text;
        cube_error *e = cube_daemon_metrics(c, &text);

        if (e)
                return report("metrics", e);
        if (!json) {
                fputs(text, stdout);
                free(text);
                return EXIT_OK;
        }
        /* The samples as one JSON object: series -> value. A series is its
         * name, and its labels other than instance, as the text has them
         * ("cube_compile_seconds_bucket{le=\"0.01\"}"). */
        bool first = true;
        putchar('{');
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
                char *brace = strchr(line, '{'), *close, *space = strrchr(line, ' ');
                char labels[256] = "";
                size_t nl = 0;
                if (line[0] == '#' || !brace || !space || !(close = strchr(brace, '}')))
                        continue;
                *close = '\0';
                for (char *save = NULL, *l = strtok_r(brace + 1, ",", &save); l;
                     l = strtok_r(NULL, ",", &save))
                        if (strncmp(l, "instance=", 9) != 0 && nl < sizeof(labels) - 1)
                                nl += (size_t) snprintf(labels + nl, sizeof(labels) - nl,
                                                        "%s%s", nl ? "," : "", l);
                printf("%s\"%.*s", first ? "" : ",", (int) (brace - line), line);
                if (nl) {
                        putchar('{');
                        for (const char *p = labels; *p; p++)
                                fputs(*p == '"' ? "\\\"" : (char[2]) { *p, 0 }, stdout);
                        putchar('}');
                }
                printf("\":%s", space + 1);
                first = false;
        }
        printf("}\n");
        free(text);
        return EXIT_OK;
}

static unsigned drain_timeout;         /* --timeout S */

static int cmd_drain(cube_client *c, bool json, const char *arg)
{
        cube_error *e = cube_daemon_drain_timeout(c, drain_timeout);

        if (e)
                return report("drain", e);
        if (json)
                printf("{\"draining\":true,\"timeout\":%u}\n", drain_timeout);
        else if (drain_timeout)
                printf("draining: no new work; the daemon stops once the last working session "
                       "ends, or closes those left in %u s\n", drain_timeout);
        else
                printf("draining: no new work; the daemon stops once the last working session "
                       "ends\n");
        return EXIT_OK;
}

static int cmd_undrain(cube_client *c, bool json, const char *arg)
{
        cube_error *e = cube_daemon_undrain(c);

        if (e)
                return report("undrain", e);
        printf(json ? "{\"draining\":false}\n" : "serving: new work is taken again\n");
        return EXIT_OK;
}

static int cmd_kill_session(cube_client *c, bool json, const char *arg)
{
        char *end;
        unsigned long long id = strtoull(arg, &end, 10);
        cube_error *e;

        if (!*arg || *end) {
                fprintf(stderr, "cubectl: kill-session takes a session id, not '%s'\n", arg);
                return EXIT_USAGE;
        }
        if ((e = cube_daemon_kill_session(c, id)))
                return report("kill-session", e);
        if (json)
                printf("{\"killed\":%llu}\n", id);
        else
                printf("session %llu closed\n", id);
        return EXIT_OK;
}

/* Says whether the unit for a socket's instance is installed. */
static void hint_unit(const char *socket)
{
        static const char *const dirs[] = { "/etc/systemd/system", "/usr/lib/systemd/system",
                                             "/lib/systemd/system" };
        const char *base = strrchr(socket, '/');
        char instance[64], path[256];
        bool installed = false;
        struct stat st;

        base = base ? base + 1 : socket;
        snprintf(instance, sizeof(instance), "%s", base);
        instance[strcspn(instance, ".")] = '\0';
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                snprintf(path, sizeof(path), "%s/cubed@.service", dirs[i]);
                installed |= stat(path, &st) == 0;
        }
        if (installed)
                fprintf(stderr, "cubectl: the unit cubed@.service is installed: start it with "
                        "`systemctl start cubed@%s.socket`, or see `systemctl status cubed@%s`\n",
                        instance, instance);
        else
                fprintf(stderr, "cubectl: no cubed@.service unit is installed here: start the "
                        "daemon by hand (`cubed --socket %s`) or install cube\n", socket);
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'j' },
                { "timeout", required_argument, NULL, 't' },
                { "dir", required_argument, NULL, 'D' },
                { "interval", required_argument, NULL, 'I' },
                { "count", required_argument, NULL, 'C' },
                { "version", no_argument, NULL, 'V' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *path = NULL;
        bool json = false;
        cube_client *c;
        cube_error *e;
        int opt, r;

        while ((opt = getopt_long(argc, argv, "s:jh", options, NULL)) != -1) {
                switch (opt) {
                case 's': path = optarg; break;
                case 'j': json = json_output = true; break;
                case 't': {
                        char *end;
                        unsigned long v = strtoul(optarg, &end, 10);
                        if (!*optarg || *end || v == 0 || v > 86400) {
                                fprintf(stderr, "cubectl: --timeout takes seconds, 1 to 86400\n");
                                return EXIT_USAGE;
                        }
                        drain_timeout = (unsigned) v;
                        break;
                }
                case 'D':
                        if (health_option(opt, optarg) != EXIT_OK)
                                return EXIT_USAGE;
                        break;
                case 'I': case 'C':
                        if (top_option(opt, optarg) != EXIT_OK)
                                return EXIT_USAGE;
                        break;
                case 'V': printf("cubectl %s\n", CUBE_VERSION); return EXIT_OK;
                case 'h': usage(stdout); return EXIT_OK;
                default: usage(stderr); return EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return EXIT_USAGE;
        }
        static const struct command {
                const char *name;
                int (*run)(cube_client *c, bool json, const char *arg);
                bool takes_arg;
        } commands[] = {
                { "status", cmd_status, false },
                { "kernels", cmd_kernels, false },
                { "failures", cmd_failures, false },
                { "sessions", cmd_sessions, false },
                { "shares", cmd_shares, false },
                { "memory", cmd_memory, false },
                { "streams", cmd_streams, false },
                { "graphs", cmd_graphs, false },
                { "comms", cmd_comms, false },
                { "metrics", cmd_metrics, false },
                { "config", cmd_config, false },
                { "history", cmd_history, false },
                { "bans", cmd_bans, false },
                { "drain", cmd_drain, false },
                { "undrain", cmd_undrain, false },
                { "kill-session", cmd_kill_session, true },
                { "list", cmd_list, false },
                { "selftest", cmd_selftest, false },
                { "top", cmd_top, false },
        };
        const struct command *cmd = NULL;
        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                if (strcmp(argv[optind], commands[i].name) == 0)
                        cmd = &commands[i];
        if (cmd && (argc - optind - 1 != (cmd->takes_arg ? 1 : 0))) {
                fprintf(stderr, "cubectl: %s takes %s\n", cmd->name,
                        cmd->takes_arg ? "one argument" : "no argument");
                return EXIT_USAGE;
        }
        if (!cmd) {
                fprintf(stderr, "cubectl: unknown command '%s'\n", argv[optind]);
                usage(stderr);
                return EXIT_USAGE;
        }

        if (cmd->run == cmd_list)       /* the one that connects to each instance itself */
                return cmd_list(NULL, json, NULL);
        e = cube_connect(path, "cubectl", &c);
        if (e) {
                const char *tried = path ? path : getenv("CUBE_SOCKET");
                struct stat st;
                if (!tried || !*tried)
                        tried = CUBE_DEFAULT_SOCKET;
                if (json_output)
                        print_error("connect", e, cube_error_message(e));
                fprintf(stderr, "cubectl: %s\n", cube_error_message(e));
                if (stat(tried, &st) < 0)
                        fprintf(stderr, "cubectl: no socket exists at %s (pass another with "
                                "--socket or $CUBE_SOCKET)\n", tried);
                hint_unit(tried);
                cube_error_free(e);
                return EXIT_UNREACHABLE;
        }
        r = cmd->run(c, json, cmd->takes_arg ? argv[optind + 1] : NULL);
        cube_disconnect(c);
        return r;
}
