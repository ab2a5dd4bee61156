/* sim/fanout.c -- independent tasks over forked copies of this process (see fanout.h).
 *
 * The shared region (anonymous MAP_SHARED, created before the fork) holds the task counter, a
 * done byte per task and the output slots. C11 atomics on it work across processes because they
 * are lock-free on this platform (checked). A child closes every inherited descriptor (worker
 * sockets, output files, the gnuplot pipe: it must hold none of them open and write to none),
 * dies with its parent, takes the default action on SIGINT/SIGTERM (the parent handles those and
 * finishes a killed child's tasks), and leaves by _exit, so it flushes nothing it inherited.
 */
#define _GNU_SOURCE /* close_range */
#include "sim/fanout.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS 256

/* Take tasks from the counter until none is left. */
static void drain(atomic_int *next, unsigned char *done, int n, size_t out_size, sim_fanout_fn fn,
                  void *ctx, unsigned char *slots)
{
    for (int i; (i = atomic_fetch_add(next, 1)) < n;) {
        fn(ctx, i, slots + (size_t)i * out_size);
        atomic_thread_fence(memory_order_release);
        done[i] = 1;
    }
}

int sim_fanout(int procs, int n, size_t out_size, sim_fanout_fn fn, void *ctx, void *outs)
{
    unsigned char *o = outs;
    if (procs > n) procs = n;
    if (procs > MAX_PROCS) procs = MAX_PROCS;
    size_t head = 64, flags = ((size_t)n + 63) / 64 * 64, len = head + flags + (size_t)n * out_size;
    void *shm = procs > 1 && ATOMIC_INT_LOCK_FREE == 2
                        ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                        : MAP_FAILED;
    if (shm == MAP_FAILED) { /* one process: in order, in place */
        for (int i = 0; i < n; i++)
            fn(ctx, i, o + (size_t)i * out_size);
        return 0;
    }
    atomic_int *next = shm;
    unsigned char *done = (unsigned char *)shm + head, *slots = done + flags; /* aligned */
    atomic_init(next, 0);
    memset(done, 0, (size_t)n);
    pid_t pid[MAX_PROCS];
    pid_t parent = getpid();
    int kids = 0;
    for (int k = 1; k < procs; k++) {
        pid_t p = fork();
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(0); /* the parent died before the line above */
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            close_range(3, ~0U, 0);
            drain(next, done, n, out_size, fn, ctx, slots);
            _exit(0);
        }
        if (p > 0) pid[kids++] = p; /* a failed fork: fewer hands, same results */
    }
    drain(next, done, n, out_size, fn, ctx, slots);
    for (int k = 0; k < kids; k++)
        while (waitpid(pid[k], NULL, 0) < 0 && errno == EINTR)
            ;
    atomic_thread_fence(memory_order_acquire);
    int redone = 0;
    for (int i = 0; i < n; i++) {
        if (done[i]) {
            memcpy(o + (size_t)i * out_size, slots + (size_t)i * out_size, out_size);
        } else { /* its child died: run it here */
            fn(ctx, i, o + (size_t)i * out_size);
            redone++;
        }
    }
    munmap(shm, len);
    return redone;
}
