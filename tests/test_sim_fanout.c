/* tests/test_sim_fanout.c -- sim_fanout: every task's output lands in its slot whatever the process
 * count (1, 2, 3, more processes than tasks, none), tasks write what the parent reads even when
 * they change their own process's memory (copy-on-write), and a child that dies mid-task (or
 * before it starts one) leaves its tasks to the parent, which says how many it redid. */
#include "sim/fanout.h"
#include "tests/check.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct ctx {
    pid_t parent;
    int kill_at; /* a child running this task dies (-1: none) */
    int scratch; /* changed by every task in its own process */
} ctx;

static uint64_t value(int i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + 12345;
    x ^= x >> 31;
    return x * 0xbf58476d1ce4e5b9ull;
}

static void task(void *p, int i, void *out)
{
    ctx *c = p;
    c->scratch += i;       /* a cache in a child never reaches the parent */
    if (c->kill_at >= 0) { /* slow enough that children take tasks early on */
        struct timespec ms2 = {0, 2000000};
        nanosleep(&ms2, NULL);
    }
    if (i == c->kill_at && getpid() != c->parent) raise(SIGKILL);
    uint64_t v[2] = {value(i), (uint64_t)i};
    memcpy(out, v, sizeof v);
}

/* 1 when slot i holds task i's output for every i */
static int all_right(const uint64_t *o, int n)
{
    for (int i = 0; i < n; i++)
        if (o[2 * i] != value(i) || o[2 * i + 1] != (uint64_t)i) return 0;
    return 1;
}

int main(void)
{
    enum { N = 300 };
    static uint64_t out[2 * N];
    int procs[] = {1, 2, 3, 8};
    for (int k = 0; k < 4; k++)
        for (int n = 0; n <= N; n += n < 3 ? 1 : 97) {
            memset(out, 0xff, sizeof out);
            ctx c = {getpid(), -1, 0};
            int redone = sim_fanout(procs[k], n, 2 * sizeof(uint64_t), task, &c, out);
            CHECK_MSG(all_right(out, n) && redone == 0, "%d tasks over %d processes", n, procs[k]);
            CHECK_MSG(out[2 * n] == UINT64_MAX || n == N, "nothing written past %d tasks", n);
            if (procs[k] == 1) CHECK_EQ_I64(c.scratch, (long long)n * (n - 1) / 2);
        }
    /* the child that takes task 5 dies there; the parent runs it (and anything it left) */
    int died = 0, right = 1;
    for (int rep = 0; rep < 20 && !died; rep++) { /* the parent may take task 5 itself */
        memset(out, 0xff, sizeof out);
        ctx c = {getpid(), 5, 0};
        int redone = sim_fanout(2, 40, 2 * sizeof(uint64_t), task, &c, out);
        right &= all_right(out, 40);
        died = redone > 0;
    }
    CHECK_MSG(right, "every output right in every pass with a child killed");
    CHECK_MSG(died, "a child died on task 5 in one of 20 passes and the parent redid its work");
    return CHECK_DONE();
}
