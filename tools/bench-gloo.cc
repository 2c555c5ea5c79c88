/*
 * bench-gloo - Gloo's own allreduce between two processes, the baseline of
 * cube-bench's collective figures.
 *
 *   bench-gloo --bytes N [--iters K] [--runs R] [--cpus LIST]
 *
 * Forks rank 0 and rank 1, each pinned to LIST (comma-separated CPUs; the
 * placement cube-bench gives its daemons), meeting through a file store in a
 * temporary directory. They run gloo::allreduce with the options cube's
 * engine (transports/gloo) uses, on the same transport (the tcp device on
 * 127.0.0.1) and the same sum of f32 elements: a few warm-up operations,
 * then R runs of K operations, each timed on its own. Prints one line:
 *
 *   <median over runs of the run's seconds per operation> <median seconds of one operation>
 *   <fastest operation's seconds>
 *
 * and exits 0, or exits 1 with the reason on stderr.
 */
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

double now()
{
        return std::chrono::duration<double>(
                std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v)
{
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
}

void sum_f32(void *c, const void *a, const void *b, size_t n)
{
        float *o = static_cast<float *>(c);
        const float *x = static_cast<const float *>(a), *y = static_cast<const float *>(b);
        for (size_t i = 0; i < n; i++)
                o[i] = x[i] + y[i];
}

bool pin(const char *list)
{
        cpu_set_t set;
        CPU_ZERO(&set);
        for (const char *p = list; *p;) {
                char *end;
                long cpu = strtol(p, &end, 10);
                if (end == p || cpu < 0 || cpu >= CPU_SETSIZE)
                        return false;
                CPU_SET((int) cpu, &set);
                p = *end == ',' ? end + 1 : end;
        }
        return sched_setaffinity(0, sizeof(set), &set) == 0;
}

/* One rank: joins, warms up, times the runs; rank 0 writes the two
 * figures to out. */
int rank_main(int rank, const std::string &dir, size_t bytes, int iters, int runs, int out)
{
        size_t n = bytes / sizeof(float);
        std::vector<float> in(n), res(n);
        std::vector<double> per_run, single;

        for (size_t i = 0; i < n; i++)
                in[i] = (float) (i % 1000) + (float) rank;
        try {
                gloo::rendezvous::FileStore store(dir);
                gloo::transport::tcp::attr attr;
                attr.hostname = "127.0.0.1";
                auto dev = gloo::transport::tcp::CreateDevice(attr);
                auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, 2);
                ctx->setTimeout(std::chrono::seconds(60));
                ctx->connectFullMesh(store, dev);
                uint32_t tag = 0;
                auto once = [&] {
                        gloo::AllreduceOptions o(ctx);
                        o.setTag(tag++);
                        o.setTimeout(std::chrono::seconds(60));
                        o.setInput(reinterpret_cast<uint32_t *>(in.data()), n);
                        o.setOutput(reinterpret_cast<uint32_t *>(res.data()), n);
                        o.setReduceFunction(sum_f32);
                        gloo::allreduce(o);
                };
                for (int i = 0; i < 3; i++)
                        once();
                for (int r = 0; r < runs; r++) {
                        gloo::BarrierOptions b(ctx);
                        b.setTag(tag++);
                        gloo::barrier(b);
                        double t0 = now();
                        for (int i = 0; i < iters; i++) {
                                double s = now();
                                once();
                                single.push_back(now() - s);
                        }
                        per_run.push_back((now() - t0) / iters);
                }
                if (n > 1 && res[1] != 3.0f) {      /* (1 + 0) + (1 + 1) */
                        fprintf(stderr, "bench-gloo: rank %d: wrong sum %g\n", rank, res[1]);
                        return 1;
                }
        } catch (const std::exception &e) {
                fprintf(stderr, "bench-gloo: rank %d: %s\n", rank, e.what());
                return 1;
        }
        if (rank == 0) {
                char line[96];
                int len = snprintf(line, sizeof(line), "%.9f %.9f %.9f\n", median(per_run),
                                   median(single), *std::min_element(single.begin(), single.end()));
                if (write(out, line, (size_t) len) != len)
                        return 1;
        }
        return 0;
}

} // namespace

int main(int argc, char **argv)
{
        size_t bytes = 0;
        int iters = 10, runs = 5;
        const char *cpus = nullptr;

        for (int i = 1; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--bytes") == 0)
                        bytes = strtoull(argv[i + 1], nullptr, 0);
                else if (strcmp(argv[i], "--iters") == 0)
                        iters = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--runs") == 0)
                        runs = atoi(argv[i + 1]);
                else if (strcmp(argv[i], "--cpus") == 0)
                        cpus = argv[i + 1];
        }
        if (bytes < sizeof(float) || iters < 1 || runs < 1 || (argc - 1) % 2) {
                fprintf(stderr, "usage: bench-gloo --bytes N [--iters K] [--runs R] [--cpus LIST]\n");
                return 2;
        }
        if (cpus && !pin(cpus)) {
                fprintf(stderr, "bench-gloo: cannot run on CPUs %s\n", cpus);
                return 1;
        }
        char tmpl[] = "/tmp/bench-gloo-XXXXXX";
        if (!mkdtemp(tmpl)) {
                perror("bench-gloo: mkdtemp");
                return 1;
        }
        std::string dir(tmpl);
        pid_t pids[2];
        for (int r = 0; r < 2; r++)
                if ((pids[r] = fork()) == 0)
                        _exit(rank_main(r, dir, bytes, iters, runs, 1));
        int failed = 0;
        for (int r = 0; r < 2; r++) {
                int st;
                if (pids[r] < 0 || waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) ||
                    WEXITSTATUS(st) != 0)
                        failed = 1;
        }
        if (DIR *d = opendir(tmpl)) {
                while (struct dirent *e = readdir(d))
                        if (e->d_name[0] != '.')
                                unlink((dir + "/" + e->d_name).c_str());
                closedir(d);
        }
        rmdir(tmpl);
        return failed;
}
