/* sim/pool.c -- forked training workers behind socketpairs, driven by a libev loop (see pool.h).
 *
 * Frames are a 4-byte big-endian length and one msgpack array:
 *   job:    [client, round, down (bin|nil), priv (bin|nil), stream (uint)]
 *   result: [0, client, round, up (bin), up_bytes, priv (bin), flops, flops_masked,
 *            flops_masked_nnz, samples, loss, steps]
 *        or [1, client, round, code, message]   (client_train failed)
 * The coordinator writes a job with blocking sends (the worker is idle, reading, so a send always
 * completes) and reads results without blocking from ev_io callbacks, reassembling frames. Worker
 * exits are seen as EOF on the socket and reaped with waitpid(pid): not with ev_child, because
 * libev reaps with waitpid(-1), which would also take the exit status of the gnuplot child that
 * plots/ waits for by pid. With a job timeout, each busy worker has a one-shot ev_timer armed when
 * its job is sent; if it fires first, the worker is killed and handled as one that died.
 */
#define _GNU_SOURCE /* close_range */
#include "sim/pool.h"

#include <cblas.h>
#include <errno.h>
#include <ev.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { RESULT_OK = 0, RESULT_ERR = 1, RESULT_OK_FIELDS = 12, RESULT_ERR_FIELDS = 5 };

typedef struct pool_worker {
    struct sim_pool *pool;
    int slot;  /* 0..n-1, as named in messages */
    int gen;   /* how many times this slot was replaced (test hooks act on generation 0) */
    pid_t pid; /* 0 when none */
    int fd;    /* coordinator's end of the socketpair, -1 when none */
    ev_io io;
    ev_timer timer;        /* the job timeout, active while a job is in flight (if any timeout) */
    int timed_out;         /* the current process was killed for holding its job too long */
    int job;               /* batch index of the in-flight job, -1 when idle */
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
    sim_job_out *outs; /* the current batch (borrowed) */
    int n_jobs, n_pending;
    double job_timeout_s; /* wall seconds a worker may hold a job, 0 = no limit */
    int replaced;         /* workers that died or timed out mid-run and were replaced */
    int timeouts;         /* of those, workers killed for exceeding job_timeout_s */
    int rc;               /* first error of the batch (then err), SIM_OK otherwise */
    sim_err err;
};

/* ---------------------------------------------------------------------------------------- */
/* frames, both sides */

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

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The length prefix is reserved first and filled in by frame_end, so a frame is one buffer. */
static void frame_begin(msgpack_sbuffer *sb)
{
    msgpack_sbuffer_clear(sb);
    msgpack_sbuffer_write(sb, "\0\0\0\0", 4);
}

static void frame_end(msgpack_sbuffer *sb)
{
    uint32_t n = (uint32_t)(sb->size - 4);
    unsigned char *p = (unsigned char *)sb->data;
    p[0] = (unsigned char)(n >> 24), p[1] = (unsigned char)(n >> 16);
    p[2] = (unsigned char)(n >> 8), p[3] = (unsigned char)n;
}

static void pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

static int get_int(const msgpack_object *o, int64_t lo, int64_t hi, int64_t *out)
{
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
        *out = (int64_t)o->via.u64;
    else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = o->via.i64;
    else
        return -1;
    return *out >= lo && *out <= hi ? 0 : -1;
}

static int get_cost(const msgpack_object *o, double *out)
{
    if (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32) return -1;
    *out = o->via.f64;
    return isfinite(*out) && *out >= 0 ? 0 : -1;
}

/* bin, or nil (allow_nil) for none */
static int get_bin(const msgpack_object *o, int allow_nil, const void **p, size_t *n)
{
    if (allow_nil && o->type == MSGPACK_OBJECT_NIL) {
        *p = NULL, *n = 0;
        return 0;
    }
    if (o->type != MSGPACK_OBJECT_BIN) return -1;
    *p = o->via.bin.ptr, *n = o->via.bin.size;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* the worker process */

/* "K:J" from the environment: 1 when this is worker K's first process and its J-th job. */
static int test_hook(const char *name, int slot, int gen, int job_no)
{
    const char *v = getenv(name);
    int k, j;
    return v && gen == 0 && sscanf(v, "%d:%d", &k, &j) == 2 && k == slot && j == job_no;
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
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    unsigned char *buf = NULL;
    size_t cap = 0;
    int status = 0;
    for (int job_no = 1;; job_no++) {
        unsigned char hdr[4];
        if (read_full(fd, hdr, 4)) break; /* the coordinator is done with us */
        uint32_t len = be32(hdr);
        if (len == 0 || len > SIM_POOL_MAX_FRAME) {
            status = 3;
            break;
        }
        if (len > cap) buf = sim_xrealloc(buf, cap = len);
        if (read_full(fd, buf, len)) break;
        size_t off = 0;
        const msgpack_object *a = u.data.via.array.ptr;
        int64_t client, round;
        fl_job job;
        if (msgpack_unpack_next(&u, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
            off != len || u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size != 5 ||
            !(a = u.data.via.array.ptr) || get_int(&a[0], 0, INT32_MAX, &client) ||
            get_int(&a[1], INT32_MIN, INT32_MAX, &round) ||
            get_bin(&a[2], 1, &job.down, &job.down_len) ||
            get_bin(&a[3], 1, &job.priv, &job.priv_len) ||
            a[4].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
            fprintf(stderr, "fedsim: worker %d: malformed job frame\n", slot);
            status = 3;
            break;
        }
        job.client = (int32_t)client;
        job.round = (int32_t)round;
        job.stream = a[4].via.u64;
        if (test_hook("FEDSIM_TEST_WORKER_KILL", slot, gen, job_no)) raise(SIGKILL);
        if (test_hook("FEDSIM_TEST_WORKER_HANG", slot, gen, job_no))
            for (;;) /* a stuck job: only the coordinator's SIGKILL ends it */
                pause();
        fl_result res;
        fl_result_init(&res);
        sim_err err = {0};
        int rc = algo->client_train(env, &job, &w, &res, &err);
        frame_begin(&out);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
        if (test_hook("FEDSIM_TEST_WORKER_GARBAGE", slot, gen, job_no)) {
            msgpack_sbuffer_write(&out, "\xc1 not msgpack", 13); /* 0xc1 is never valid */
        } else if (rc) {
            msgpack_pack_array(&pk, RESULT_ERR_FIELDS);
            msgpack_pack_int(&pk, RESULT_ERR);
            msgpack_pack_int32(&pk, job.client);
            msgpack_pack_int32(&pk, job.round);
            msgpack_pack_int(&pk, rc);
            size_t n = strnlen(err.msg, sizeof err.msg - 1);
            msgpack_pack_str(&pk, n);
            msgpack_pack_str_body(&pk, err.msg, n);
        } else {
            msgpack_pack_array(&pk, RESULT_OK_FIELDS);
            msgpack_pack_int(&pk, RESULT_OK);
            msgpack_pack_int32(&pk, job.client);
            msgpack_pack_int32(&pk, job.round);
            pack_bin(&pk, res.up.data, res.up.size);
            msgpack_pack_uint64(&pk, res.up_bytes);
            pack_bin(&pk, res.priv.data, res.priv.size);
            msgpack_pack_double(&pk, res.cost.flops);
            msgpack_pack_double(&pk, res.cost.flops_masked);
            msgpack_pack_double(&pk, res.cost.flops_masked_nnz);
            msgpack_pack_double(&pk, res.cost.samples);
            msgpack_pack_double(&pk, res.loss);
            msgpack_pack_int(&pk, res.steps);
        }
        frame_end(&out);
        fl_result_destroy(&res);
        if (write_full(fd, out.data, out.size)) break;
    }
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&out);
    free(buf);
    fl_worker_destroy(&w);
    close(fd);
    _exit(status);
}

/* ---------------------------------------------------------------------------------------- */
/* the coordinator */

static void on_readable(struct ev_loop *loop, ev_io *io, int revents);

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
 * re-sends the in-flight job. */
static int replace(sim_pool *p, pool_worker *w, sim_err *err)
{
    pid_t old = w->pid;
    int st = reap(p, w);
    if (w->job >= 0 && w->tries >= SIM_POOL_MAX_TRIES) {
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
    const char *why = NULL;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    const msgpack_object *a = NULL;
    int64_t kind = -1, client, round, up_bytes = 0, steps = 0, code = 0;
    const void *up = NULL, *priv = NULL;
    size_t up_len = 0, priv_len = 0;
    nn_cost cost = {0};
    double loss = 0;
    if (msgpack_unpack_next(&u, (const char *)body, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != len)
        why = "not one msgpack object";
    else if (u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size < 3)
        why = "not an array of at least 3 fields";
    else if (a = u.data.via.array.ptr, get_int(&a[0], RESULT_OK, RESULT_ERR, &kind))
        why = "bad status field";
    else if (get_int(&a[1], INT32_MIN, INT32_MAX, &client) || client != w->client ||
             get_int(&a[2], INT32_MIN, INT32_MAX, &round) || round != w->round)
        why = "client or round does not match the job";
    else if (kind == RESULT_ERR &&
             (u.data.via.array.size != RESULT_ERR_FIELDS || get_int(&a[3], -1000, -1, &code) ||
              a[4].type != MSGPACK_OBJECT_STR || a[4].via.str.size >= sizeof err->msg))
        why = "malformed error result";
    else if (kind == RESULT_OK &&
             (u.data.via.array.size != RESULT_OK_FIELDS || get_bin(&a[3], 0, &up, &up_len) ||
              get_int(&a[4], 0, SIM_POOL_MAX_FRAME, &up_bytes) ||
              get_bin(&a[5], 0, &priv, &priv_len) || get_cost(&a[6], &cost.flops) ||
              get_cost(&a[7], &cost.flops_masked) || get_cost(&a[8], &cost.flops_masked_nnz) ||
              get_cost(&a[9], &cost.samples) ||
              (a[10].type != MSGPACK_OBJECT_FLOAT64 && a[10].type != MSGPACK_OBJECT_FLOAT32) ||
              get_int(&a[11], 0, INT32_MAX, &steps)))
        why = "missing field, wrong type or value out of range";
    else if (kind == RESULT_OK && (size_t)up_bytes != up_len)
        why = "up_bytes does not match the up message's length";
    if (why) {
        msgpack_unpacked_destroy(&u);
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "worker %d (pid %d) sent a bad result frame (%zu bytes) for client %d "
                        "round %d: %s",
                        w->slot, (int)w->pid, len, w->client, w->round, why);
    }
    sim_job_out *o = &p->outs[w->job];
    if (kind == RESULT_ERR) {
        o->rc = (int)code;
        snprintf(o->err.msg, sizeof o->err.msg, "%.*s", (int)a[4].via.str.size, a[4].via.str.ptr);
    } else {
        loss = a[10].via.f64;
        if (up_len) msgpack_sbuffer_write(&o->res.up, up, up_len);
        if (priv_len) msgpack_sbuffer_write(&o->res.priv, priv, priv_len);
        o->res.up_bytes = (size_t)up_bytes;
        o->res.cost = cost;
        o->res.loss = loss;
        o->res.steps = (int)steps;
    }
    msgpack_unpacked_destroy(&u);
    ev_timer_stop(p->loop, &w->timer);
    w->job = -1;
    p->n_pending--;
    return SIM_OK;
}

/* Parse every complete frame in slot w's input. */
static int take_frames(sim_pool *p, pool_worker *w, sim_err *err)
{
    size_t used = 0;
    int rc = SIM_OK;
    while (!rc && w->in_len - used >= 4) {
        uint32_t len = be32(w->in + used);
        if (len == 0 || len > SIM_POOL_MAX_FRAME || w->job < 0)
            return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                            "worker %d (pid %d) sent a bad frame (length %u%s) for client %d "
                            "round %d",
                            w->slot, (int)w->pid, len, w->job < 0 ? ", while idle" : "", w->client,
                            w->round);
        if (w->in_len - used < 4 + (size_t)len) {
            if (w->in_cap < 4 + (size_t)len) /* grow once to the whole frame */
                w->in = sim_xrealloc(w->in, w->in_cap = 4 + (size_t)len);
            break;
        }
        rc = take_result(p, w, w->in + used + 4, len, err);
        used += 4 + (size_t)len;
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
        if (!rc && w->job >= 0) rc = deliver(p, w, &err);
        if (rc) pool_fail(p, &err, rc);
        return;
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
    if (w->job < 0) return;
    sim_err err = {0};
    w->timed_out = 1;
    int rc = replace(p, w, &err);
    if (!rc) rc = deliver(p, w, &err);
    if (rc) pool_fail(p, &err, rc);
}

int sim_pool_new(sim_pool **out, int n_workers, const fl_algo *algo, const fl_env *env,
                 double job_timeout_s, sim_err *err)
{
    *out = NULL;
    sim_pool *p = sim_xcalloc(1, sizeof *p);
    p->loop = ev_loop_new(EVFLAG_AUTO);
    if (!p->loop) {
        free(p);
        return sim_fail(err, SIM_EIO, NULL, 0, 0, "cannot create the event loop");
    }
    p->algo = algo;
    p->env = env;
    p->job_timeout_s = job_timeout_s;
    p->n = n_workers;
    p->w = sim_xcalloc((size_t)n_workers, sizeof *p->w);
    for (int i = 0; i < n_workers; i++) {
        pool_worker *w = &p->w[i];
        w->pool = p;
        w->slot = i;
        w->fd = -1;
        w->job = -1;
        ev_timer_init(&w->timer, on_timeout, 0., 0.);
        w->timer.data = w;
        msgpack_sbuffer_init(&w->frame);
    }
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

void sim_pool_free(sim_pool *p)
{
    if (!p) return;
    /* Closing an idle worker's socket ends its loop (EOF); reap() kills the busy ones. */
    for (int i = 0; i < p->n; i++)
        if (p->w[i].fd >= 0 && p->w[i].job < 0) {
            ev_io_stop(p->loop, &p->w[i].io);
            close(p->w[i].fd);
            p->w[i].fd = -1;
        }
    for (int i = 0; i < p->n; i++) {
        pool_worker *w = &p->w[i];
        if (w->pid > 0 && w->job < 0) { /* let it exit on its own: no signal needed */
            while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR) {
            }
            w->pid = 0;
        }
        reap(p, w);
        msgpack_sbuffer_destroy(&w->frame);
        free(w->in);
    }
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

void sim_pool_begin(sim_pool *p, int n, sim_job_out *outs)
{
    p->outs = outs;
    p->n_jobs = n;
    p->n_pending = 0;
    p->rc = SIM_OK;
    for (int i = 0; i < p->n; i++) /* a failed batch may have left jobs behind: abandon them */
        if (p->w[i].job >= 0 || p->w[i].fd < 0) {
            sim_err err = {0};
            reap(p, &p->w[i]);
            p->w[i].job = -1;
            p->w[i].gen++;
            if (spawn(p, &p->w[i], &err)) pool_fail(p, &err, SIM_EIO);
        }
}

static int report(const sim_pool *p, sim_err *err)
{
    if (err) *err = p->err;
    return p->rc;
}

int sim_pool_submit(sim_pool *p, int i, const fl_job *job, sim_err *err)
{
    pool_worker *w = NULL;
    while (!p->rc) {
        for (int k = 0; k < p->n && !w; k++)
            if (p->w[k].job < 0 && p->w[k].fd >= 0) w = &p->w[k];
        if (w) break;
        ev_run(p->loop, EVRUN_ONCE);
    }
    if (p->rc) return report(p, err);
    frame_begin(&w->frame);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &w->frame, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_int32(&pk, job->client);
    msgpack_pack_int32(&pk, job->round);
    if (job->down)
        pack_bin(&pk, job->down, job->down_len);
    else
        msgpack_pack_nil(&pk);
    if (job->priv)
        pack_bin(&pk, job->priv, job->priv_len);
    else
        msgpack_pack_nil(&pk);
    msgpack_pack_uint64(&pk, job->stream);
    frame_end(&w->frame);
    if (w->frame.size - 4 > SIM_POOL_MAX_FRAME)
        return sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                        "client %d round %d: the job frame (%zu bytes) exceeds the limit",
                        job->client, job->round, w->frame.size);
    w->job = i;
    w->tries = 0;
    w->client = job->client;
    w->round = job->round;
    p->n_pending++;
    sim_err e2 = {0};
    int rc = deliver(p, w, &e2);
    if (rc) pool_fail(p, &e2, rc);
    return p->rc ? report(p, err) : SIM_OK;
}

int sim_pool_wait(sim_pool *p, sim_err *err)
{
    while (!p->rc && p->n_pending > 0)
        ev_run(p->loop, EVRUN_ONCE);
    return p->rc ? report(p, err) : SIM_OK;
}
