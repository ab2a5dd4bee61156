/* sim/pool.c -- forked training workers behind socketpairs, or MPI ranks behind a link, driven by
 * a libev loop (see pool.h).
 *
 * Frames (sim/frame.h) go out with blocking sends (the worker is idle, reading, so a send always
 * completes). Forked workers' results are read without blocking from ev_io callbacks, reassembling
 * frames. Worker exits are seen as EOF on the socket and reaped with waitpid(pid): not with
 * ev_child, because libev reaps with waitpid(-1), which would also take the exit status of the
 * gnuplot child that plots/ waits for by pid. With a job timeout, each busy worker has a one-shot
 * ev_timer armed when its job is sent; if it fires first, the worker is killed and handled as one
 * that died.
 *
 * A linked pool's results come from a repeating ev_timer that calls link.recv (MPI_Iprobe and
 * MPI_Recv in sim/mpi.c) every link.poll_s. Why polling from the loop rather than a communication
 * thread that wakes it with ev_async: a thread blocked in MPI_Recv or MPI_Waitany busy-polls inside
 * Open MPI and MPICH, so it would hold a core the co-located worker ranks need, and it would need
 * MPI_THREAD_MULTIPLE (or careful serialization) from the MPI library. A timer of a millisecond
 * adds at most that to a job that trains for tens of milliseconds or more, lets the coordinator
 * sleep in the loop between polls, and keeps every MPI call on the one thread.
 */
#define _GNU_SOURCE /* close_range */
#include "sim/pool.h"

#include <assert.h>
#include <cblas.h>
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct pool_worker {
    struct sim_pool *pool;
    int slot;  /* 0..n-1, as named in messages */
    int gen;   /* how many times this slot was replaced (test hooks act on generation 0) */
    pid_t pid; /* 0 when none */
    int fd;    /* coordinator's end of the socketpair, -1 when none (always, when linked) */
    ev_io io;
    ev_timer timer;        /* the job timeout, active while a job is in flight (if any timeout) */
    int timed_out;         /* the current process was killed for holding its job too long */
    sim_job_out *job;      /* where the in-flight job's outcome goes, NULL when idle */
    double sent_at;        /* wall time the in-flight job was first sent (ev_time) */
    int tries;             /* times the in-flight job was sent */
    int32_t client, round; /* the in-flight job, to check the result against */
    msgpack_sbuffer frame; /* the in-flight job's frame, kept to re-send if the worker dies */
    unsigned char *in;     /* result bytes received so far */
    size_t in_len, in_cap;
} pool_worker;

struct sim_pool {
    struct ev_loop *loop;
    const fl_algo *algo; /* borrowed */
    const fl_env *env;   /* borrowed */
    int n;
    pool_worker *w;
    sim_pool_link link;   /* linked pool: how frames reach the workers (link.n > 0) */
    ev_timer poll;        /* linked pool: polls link.recv */
    int n_pending;        /* jobs sent and not answered */
    double busy_s;        /* wall seconds workers held jobs, summed over the answered ones */
    double job_timeout_s; /* wall seconds a worker may hold a job, 0 = no limit */
    int replaced;         /* workers that died or timed out mid-run and were replaced */
    int timeouts;         /* of those, workers killed for exceeding job_timeout_s */
    int rc;               /* the first error (then err), SIM_OK otherwise: it sticks */
    sim_err err;
};

/* ---------------------------------------------------------------------------------------- */
/* the worker process */

static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* MSG_NOSIGNAL: a peer that died gives EPIPE here, not a SIGPIPE that kills this process. */
static int write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Serve jobs on fd until the coordinator closes it. Never returns: _exit skips atexit handlers,
 * so the coordinator's stdio buffers inherited by fork are not flushed twice and LeakSanitizer
 * (an atexit handler) does not report the whole inherited heap as leaked. */
static void worker_main(int fd, int slot, int gen, const fl_algo *algo, const fl_env *env)
{
    openblas_set_num_threads(1); /* one worker per core: BLAS threads would only compete */
    fl_worker w;
    fl_worker_init(&w);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    unsigned char *buf = NULL;
    size_t cap = 0;
    int status = 0;
    for (int job_no = 1;; job_no++) {
        unsigned char hdr[SIM_FRAME_PREFIX];
        if (read_full(fd, hdr, sizeof hdr)) break; /* the coordinator is done with us */
        uint32_t len = sim_frame_len(hdr);
        if (len == 0 || len > SIM_FRAME_MAX) {
            status = 3;
            break;
        }
        if (len > cap) buf = sim_xrealloc(buf, cap = len);
        if (read_full(fd, buf, len)) break;
        if (sim_frame_serve(algo, env, &w, slot, gen, job_no, buf, len, &out)) {
            fprintf(stderr, "fedsim: worker %d: malformed job frame\n", slot);
            status = 3;
            break;
        }
        if (write_full(fd, out.data, out.size)) break;
    }
    msgpack_sbuffer_destroy(&out);
    free(buf);
    fl_worker_destroy(&w);
    close(fd);
    _exit(status);
}

/* ---------------------------------------------------------------------------------------- */
/* the coordinator */

static void on_readable(struct ev_loop *loop, ev_io *io, int revents);

/* The worker of slot w as messages name it. */
static void who(const sim_pool *p, const pool_worker *w, char *buf, size_t size)
{
    if (p->link.n)
        p->link.name(p->link.arg, w->slot, buf, size);
    else
        snprintf(buf, size, "worker %d (pid %d)", w->slot, (int)w->pid);
}

/* Fork the worker of slot w (a new process for a new or replaced worker). */
static int spawn(sim_pool *p, pool_worker *w, sim_err *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return sim_fail(err, SIM_EIO, NULL, 0, 0, "worker %d: socketpair: %s", w->slot,
                        strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return sim_fail(err, SIM_EIO, NULL, 0, 0, "worker %d: fork: %s", w->slot, strerror(errno));
    }
    if (pid == 0) {
        /* The child keeps stdin/out/err and its socket (as fd 3) only: other workers' sockets,
         * output files and the gnuplot pipe must not be held open by it. */
        if (sv[1] != 3 && dup2(sv[1], 3) < 0) _exit(3);
        if (close_range(4, ~0U, 0))
            for (int fd = 4; fd < 1024; fd++)
                close(fd);
        worker_main(3, w->slot, w->gen, p->algo, p->env);
    }
    close(sv[1]);
    w->pid = pid;
    w->fd = sv[0];
    w->in_len = 0;
    w->timed_out = 0;
    ev_io_init(&w->io, on_readable, w->fd, EV_READ);
    w->io.data = w;
    ev_io_start(p->loop, &w->io);
    return SIM_OK;
}

/* Stop, kill (harmless if it already exited) and reap the process of slot w. */
static int reap(sim_pool *p, pool_worker *w)
{
    int st = 0;
    ev_timer_stop(p->loop, &w->timer);
    if (w->fd >= 0) {
        ev_io_stop(p->loop, &w->io);
        close(w->fd);
        w->fd = -1;
    }
    if (w->pid > 0) {
        kill(w->pid, SIGKILL);
        while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {
        }
        w->pid = 0;
    }
    return st;
}

/* The process of slot w is gone (EOF, or a send failed): reap it and start a new one. The caller
 * re-sends the in-flight job. A linked worker (an MPI rank) cannot be replaced: that is an error
 * naming it and its job. */
static int replace(sim_pool *p, pool_worker *w, sim_err *err)
{
    if (p->link.n) {
        char name[160];
        who(p, w, name, sizeof name);
        ev_timer_stop(p->loop, &w->timer);
        return sim_fail(err, SIM_EIO, NULL, 0, 0,
                        "%s %s running client %d round %d; MPI cannot replace a lost rank, so "
                        "the run ends here",
                        name,
                        w->timed_out ? "timed out (no result within --job-timeout)"
                                     : "is unreachable",
                        w->client, w->round);
    }
    pid_t old = w->pid;
    int st = reap(p, w);
    if (w->job && w->tries >= SIM_POOL_MAX_TRIES) {
        char how[96];
        if (w->timed_out)
            snprintf(how, sizeof how, "timed out (no result within --job-timeout %g s)",
                     p->job_timeout_s);
        else if (WIFSIGNALED(st))
            snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(st));
        else
            snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "worker %d (pid %d) %s running client %d round %d; the job was tried %d "
                        "times",
                        w->slot, (int)old, how, w->client, w->round, w->tries);
    }
    w->gen++;
    p->replaced++;
    p->timeouts += w->timed_out;
    return spawn(p, w, err);
}

/* Send (or re-send) slot w's in-flight frame, replacing the worker while sends fail, then arm
 * the job timeout. The loop's clock is refreshed first: between batches the coordinator computes
 * outside the loop, and a timer started from a stale ev_now would fire early. */
static int deliver(sim_pool *p, pool_worker *w, sim_err *err)
{
    for (;;) {
        w->tries++;
        if (p->link.n) {
            int rc = p->link.send(p->link.arg, w->slot, w->frame.data + SIM_FRAME_PREFIX,
                                  w->frame.size - SIM_FRAME_PREFIX, err);
            if (rc) return rc;
            break;
        }
        if (!write_full(w->fd, w->frame.data, w->frame.size)) break;
        int rc = replace(p, w, err);
        if (rc) return rc;
    }
    if (p->job_timeout_s > 0) {
        ev_now_update(p->loop);
        ev_timer_stop(p->loop, &w->timer);
        ev_timer_set(&w->timer, p->job_timeout_s, 0.);
        ev_timer_start(p->loop, &w->timer);
    }
    return SIM_OK;
}

static void pool_fail(sim_pool *p, const sim_err *err, int rc)
{
    if (!p->rc) {
        p->rc = rc;
        p->err = *err;
    }
    ev_break(p->loop, EVBREAK_ALL);
}

/* Check and absorb one result frame of slot w (body of len bytes). */
static int take_result(sim_pool *p, pool_worker *w, const unsigned char *body, size_t len,
                       sim_err *err)
{
    const char *why;
    char name[160];
    if (!w->job || sim_frame_take_result(body, len, w->client, w->round, w->job, &why)) {
        who(p, w, name, sizeof name);
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "%s sent a bad result frame (%zu bytes) for client %d round %d: %s", name,
                        len, w->client, w->round, !w->job ? "no job was in flight" : why);
    }
    ev_timer_stop(p->loop, &w->timer);
    w->job->done = 1;
    w->job = NULL;
    p->n_pending--;
    p->busy_s += ev_time() - w->sent_at;
    return SIM_OK;
}

/* Parse every complete frame in slot w's input. */
static int take_frames(sim_pool *p, pool_worker *w, sim_err *err)
{
    size_t used = 0;
    int rc = SIM_OK;
    while (!rc && w->in_len - used >= SIM_FRAME_PREFIX) {
        uint32_t len = sim_frame_len(w->in + used);
        size_t whole = SIM_FRAME_PREFIX + (size_t)len;
        if (len == 0 || len > SIM_FRAME_MAX || !w->job)
            return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                            "worker %d (pid %d) sent a bad frame (length %u%s) for client %d "
                            "round %d",
                            w->slot, (int)w->pid, len, !w->job ? ", while idle" : "", w->client,
                            w->round);
        if (w->in_len - used < whole) {
            if (w->in_cap < whole) /* grow once to the whole frame */
                w->in = sim_xrealloc(w->in, w->in_cap = whole);
            break;
        }
        rc = take_result(p, w, w->in + used + SIM_FRAME_PREFIX, len, err);
        used += whole;
    }
    memmove(w->in, w->in + used, w->in_len - used);
    w->in_len -= used;
    return rc;
}

static void on_readable(struct ev_loop *loop, ev_io *io, int revents)
{
    (void)loop, (void)revents;
    pool_worker *w = io->data;
    sim_pool *p = w->pool;
    sim_err err = {0};
    for (;;) {
        if (w->in_cap - w->in_len < 65536)
            w->in = sim_xrealloc(w->in, w->in_cap = w->in_cap * 2 + 65536);
        ssize_t r = recv(w->fd, w->in + w->in_len, w->in_cap - w->in_len, MSG_DONTWAIT);
        if (r > 0) {
            w->in_len += (size_t)r;
            int rc = take_frames(p, w, &err);
            if (rc) {
                ev_io_stop(p->loop, &w->io);
                pool_fail(p, &err, rc);
                return;
            }
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        /* EOF or a reset: the worker died. Replace it and re-send its job. */
        int rc = replace(p, w, &err);
        if (!rc && w->job) rc = deliver(p, w, &err);
        if (rc) pool_fail(p, &err, rc);
        return;
    }
}

/* Linked pool: take every result that has arrived, then give up waiting if a signal asks to. */
static void on_poll(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    sim_pool *p = t->data;
    sim_err err = {0};
    int rc = 0, slot;
    void *body;
    size_t len;
    while (!p->rc && (rc = p->link.recv(p->link.arg, &slot, &body, &len, &err)) > 0) {
        assert(slot >= 0 && slot < p->n);
        rc = take_result(p, &p->w[slot], body, len, &err);
        free(body);
        if (rc) break;
    }
    if (rc < 0) pool_fail(p, &err, rc);
    if (!p->rc && p->n_pending > 0 && p->link.stop && *p->link.stop) {
        int busy = 0;
        const pool_worker *first = NULL;
        for (int i = 0; i < p->n; i++)
            if (p->w[i].job && !busy++) first = &p->w[i];
        char name[160];
        who(p, first, name, sizeof name);
        sim_fail(&err, SIM_EIO, NULL, 0, 0,
                 "stopped by signal %d while %d worker rank(s) held jobs (%s: client %d round "
                 "%d); under mpirun this usually means a rank died (the launcher names it) and "
                 "the MPI job is being torn down",
                 (int)*p->link.stop, busy, name, first->client, first->round);
        pool_fail(p, &err, SIM_EIO);
    }
}

/* Slot w held its job past the timeout: kill it and re-run the job on a new process, as if it had
 * died (the try counts). A result already waiting unread in the socket is discarded with the
 * process; the re-run computes the same bytes. */
static void on_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    pool_worker *w = t->data;
    sim_pool *p = w->pool;
    if (!w->job) return;
    sim_err err = {0};
    w->timed_out = 1;
    int rc = replace(p, w, &err);
    if (!rc) rc = deliver(p, w, &err);
    if (rc) pool_fail(p, &err, rc);
}

/* The pool's state and n idle slots, with no worker started yet. */
static sim_pool *pool_alloc(int n, double job_timeout_s, sim_err *err)
{
    sim_pool *p = sim_xcalloc(1, sizeof *p);
    p->loop = ev_loop_new(EVFLAG_AUTO);
    if (!p->loop) {
        free(p);
        sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot create the event loop");
        return NULL;
    }
    p->job_timeout_s = job_timeout_s;
    p->n = n;
    p->w = sim_xcalloc((size_t)n, sizeof *p->w);
    for (int i = 0; i < n; i++) {
        pool_worker *w = &p->w[i];
        w->pool = p;
        w->slot = i;
        w->fd = -1;
        w->job = NULL;
        ev_timer_init(&w->timer, on_timeout, 0., 0.);
        w->timer.data = w;
        msgpack_sbuffer_init(&w->frame);
    }
    return p;
}

int sim_pool_new(sim_pool **out, int n_workers, const fl_algo *algo, const fl_env *env,
                 double job_timeout_s, sim_err *err)
{
    *out = NULL;
    sim_pool *p = pool_alloc(n_workers, job_timeout_s, err);
    if (!p) return SIM_EIO;
    p->algo = algo;
    p->env = env;
    for (int i = 0; i < n_workers; i++) {
        int rc = spawn(p, &p->w[i], err);
        if (rc) {
            sim_pool_free(p);
            return rc;
        }
    }
    *out = p;
    return SIM_OK;
}

int sim_pool_new_linked(sim_pool **out, const sim_pool_link *link, double job_timeout_s,
                        sim_err *err)
{
    assert(link->n > 0 && link->poll_s > 0);
    *out = NULL;
    sim_pool *p = pool_alloc(link->n, job_timeout_s, err);
    if (!p) return SIM_EIO;
    p->link = *link;
    ev_timer_init(&p->poll, on_poll, link->poll_s, link->poll_s);
    p->poll.data = p;
    ev_timer_start(p->loop, &p->poll);
    *out = p;
    return SIM_OK;
}

void sim_pool_free(sim_pool *p)
{
    if (!p) return;
    /* Closing an idle worker's socket ends its loop (EOF); reap() kills the busy ones. */
    for (int i = 0; i < p->n; i++)
        if (p->w[i].fd >= 0 && !p->w[i].job) {
            ev_io_stop(p->loop, &p->w[i].io);
            close(p->w[i].fd);
            p->w[i].fd = -1;
        }
    for (int i = 0; i < p->n; i++) {
        pool_worker *w = &p->w[i];
        if (w->pid > 0 && !w->job) { /* let it exit on its own: no signal needed */
            while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR) {
            }
            w->pid = 0;
        }
        reap(p, w);
        msgpack_sbuffer_destroy(&w->frame);
        free(w->in);
    }
    ev_timer_stop(p->loop, &p->poll);
    free(p->w);
    ev_loop_destroy(p->loop);
    free(p);
}

int sim_pool_replaced(const sim_pool *p)
{
    return p ? p->replaced : 0;
}

int sim_pool_timeouts(const sim_pool *p)
{
    return p ? p->timeouts : 0;
}

static int report(const sim_pool *p, sim_err *err)
{
    if (err) *err = p->err;
    return p->rc;
}

double sim_pool_busy_s(const sim_pool *p)
{
    return p ? p->busy_s : 0;
}

int sim_pool_submit(sim_pool *p, sim_job_out *out, const fl_job *job, sim_err *err)
{
    pool_worker *w = NULL;
    while (!p->rc) {
        for (int k = 0; k < p->n && !w; k++)
            if (!p->w[k].job && (p->w[k].fd >= 0 || p->link.n)) w = &p->w[k];
        if (w) break;
        ev_run(p->loop, EVRUN_ONCE);
    }
    if (p->rc) return report(p, err);
    int rc = sim_frame_job(&w->frame, job, err);
    if (rc) return rc;
    out->done = 0;
    w->job = out;
    w->tries = 0;
    w->client = job->client;
    w->round = job->round;
    p->n_pending++;
    sim_err e2 = {0};
    rc = deliver(p, w, &e2);
    w->sent_at = ev_time();
    if (rc) pool_fail(p, &e2, rc);
    return p->rc ? report(p, err) : SIM_OK;
}

int sim_pool_wait(sim_pool *p, const sim_job_out *out, sim_err *err)
{
    while (!p->rc && (out ? !out->done : p->n_pending > 0))
        ev_run(p->loop, EVRUN_ONCE);
    return p->rc ? report(p, err) : SIM_OK;
}
