/* tests/bench/bench_engine.c -- `make bench`: the engine's own cost in cost-only mode, where jobs
 * skip the math and only the simulation runs: 1,000 clients per round (1,300 started, over-commit
 * 1.3), 1,000 rounds, for populations of 10k, 100k and 1M clients on a three-profile device mix.
 * Reports wall time, events per second and peak memory (VmHWM) of each run, each in its own
 * process so peaks do not mix. Outputs (events.msgpack included) are written as in a real run.
 * Target from issue 3: 1M clients in under 30 s and under 2 GB. Then the 1M run again with the
 * server's links shared (`network:`, 10 Gbps each way: 1,300 downloads at once get 7.7 Mbps each,
 * below every profile's own link, and uploads share the uplink as they overlap), every transfer a
 * flow (sim/net.h); issue 43's target: at most twice the wall time without, which the last line
 * prints as measured here, the two 1M runs' wall (and CPU) times side by side and their ratio.
 * Timings only.
 */
#include "sim/blas.h"
#include "sim/engine.h"
#include "sim/scenario.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long peak_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

/* The run's wall and CPU seconds, sent by the child to its parent. */
typedef struct run_time {
    double wall, cpu;
} run_time;

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static int run_one(int clients, int network, int fd)
{
    const char *path = "/tmp/fedsim-bench-engine.yaml";
    FILE *f = fopen(path, "w");
    fprintf(f,
            "name: bench-engine\nrounds: 1000\ncost_only: true\n"
            "dataset: {name: fashion-mnist}\n"
            "partition: {scheme: sizes, clients: %d, samples: 60, sigma: 0.5}\n"
            "model: cnn2\nalgorithm: {name: fedavg, local_epochs: 1, batch_size: 32}\n"
            "federation: {per_round: 1000, over_commit: 1.3}\n"
            "devices: {mix: [{profile: phone-low, share: 0.4}, {profile: phone-mid, share: "
            "0.4}, {profile: laptop, share: 0.2}]}\n"
            "eval: {every: 100}\n%s",
            clients, network ? "network: {server: {up: 10 Gbps, down: 10 Gbps}}\n" : "");
    fclose(f);
    sim_scenario sc;
    sim_err err = {0};
    double t0 = now_s();
    if (sim_scenario_load(&sc, path, NULL, 0, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    double t_load = now_s() - t0;
    sc.spec.out_dir = "/tmp";
    sc.spec.quiet = 1;
    sim_engine *e;
    if (sim_engine_new(&e, &sc.spec, &err) || sim_engine_run(e, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    double wall = now_s() - t0;
    run_time rt = {wall, cpu_s()};
    if (write(fd, &rt, sizeof rt) != (ssize_t)sizeof rt) {
        perror("bench: pipe");
        return 1;
    }
    sim_totals t;
    sim_engine_totals(e, &t);
    printf("%9d clients%s: %6.2f s wall (%.2f s loading), %ld jobs, %ld events, %.2f M events/s, "
           "peak %.0f MiB\n",
           clients, network ? " (network)" : "", wall, t_load, t.jobs, t.events,
           t.events / (wall - t_load) * 1e-6, peak_kb() / 1024.0);
    fflush(stdout); /* the child leaves with _exit, which flushes nothing */
    sim_engine_free(e);
    sim_scenario_destroy(&sc);
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    sim_blas_kernels(argv); /* the kernels fedsim runs on */
    openblas_set_num_threads(1);
    printf("engine, cost-only: 1,000 rounds of 1,000 clients (1,300 started)\n");
    fflush(stdout);
    static const int sizes[] = {10000, 100000, 1000000, 1000000};
    run_time rt[4];
    for (int i = 0; i < 4; i++) {
        int fd[2];
        if (pipe(fd)) {
            perror("bench: pipe");
            return 1;
        }
        pid_t pid = fork();
        if (pid == 0) _exit(run_one(sizes[i], i == 3, fd[1]));
        close(fd[1]);
        int st;
        ssize_t got = read(fd[0], &rt[i], sizeof rt[i]);
        close(fd[0]);
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) || got != (ssize_t)sizeof rt[i]) return 1;
    }
    printf("1M clients, shared server links against none: %.2f s against %.2f s wall, %.2fx "
           "(CPU %.2f s against %.2f s, %.2fx); issue 43's target: at most 2x\n",
           rt[3].wall, rt[2].wall, rt[3].wall / rt[2].wall, rt[3].cpu, rt[2].cpu,
           rt[3].cpu / rt[2].cpu);
    return 0;
}
