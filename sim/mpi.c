/* sim/mpi.c -- worker ranks and the coordinator's pool link over MPI (see mpi.h).
 *
 * Messages on MPI_COMM_WORLD, all MPI_BYTE:
 *   TAG_HELLO  worker -> 0: msgpack [rank, host, pid, text_digest, env_digest, error (str|nil),
 *              build (sim_checkpoint_build)]
 *   TAG_JOB    0 -> worker: a job frame body (sim/frame.h, without the length prefix: an MPI
 *              message carries its own length)
 *   TAG_RESULT worker -> 0: a result frame body
 *   TAG_STOP   0 -> worker: empty; the worker leaves its loop and finalizes
 * Only MPI-3 calls both Open MPI 4 and MPICH 4 have; nothing depends on either's extensions.
 */
#define _GNU_SOURCE /* gethostname's HOST_NAME_MAX */
#include "sim/mpi.h"
#include "nn/pack.h"
#include "sim/checkpoint.h"

#include <cblas.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { TAG_HELLO = 1, TAG_JOB = 2, TAG_RESULT = 3, TAG_STOP = 4, HOST_LEN = 64 };

typedef struct mpi_peer {
    char host[HOST_LEN];
    int pid;
    char build[256]; /* sim_checkpoint_build of its process */
} mpi_peer;

struct sim_mpi {
    int size;
    mpi_peer *peer; /* [size]: what each worker said in its hello (index 0 unused) */
};

/* "MPI_Xxx: the library's message" into err, for a call that returned rc. */
static int mpi_fail(sim_err *err, const char *call, int rank, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    return sim_fail(err, SIM_EIO, NULL, 0, 0, "%s with rank %d failed: %.*s", call, rank, len, msg);
}

/* Wait for a message from source with tag (MPI_ANY_TAG: any), without spinning: MPI_Iprobe, then
 * a sleep that doubles from 50 µs to 1 ms while nothing comes (see mpi.h). */
static int wait_message(int source, int tag, MPI_Status *st)
{
    long ns = 50000;
    for (;;) {
        int flag = 0, rc = MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, st);
        if (rc != MPI_SUCCESS || flag) return rc;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 1000000) ns *= 2;
    }
}

/* Receive the message st announced into a new buffer (*len bytes; caller frees). */
static int receive(const MPI_Status *st, void **buf, size_t *len)
{
    int n = 0, rc = MPI_Get_count(st, MPI_BYTE, &n);
    if (rc != MPI_SUCCESS) return rc;
    *buf = sim_xmalloc(n > 0 ? (size_t)n : 1);
    *len = (size_t)n;
    rc = MPI_Recv(*buf, n, MPI_BYTE, st->MPI_SOURCE, st->MPI_TAG, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        free(*buf);
        *buf = NULL;
    }
    return rc;
}

int sim_mpi_init(int *argc, char ***argv, int *rank, int *size)
{
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "fedsim: MPI_Init failed\n");
        return 2;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 0;
}

void sim_mpi_finalize(int abort_code)
{
    if (abort_code) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, abort_code);
    }
    MPI_Finalize();
}

/* ---------------------------------------------------------------------------------------- */
/* worker ranks */

static void pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static int send_hello(int rank, uint64_t text_digest, uint64_t env_digest, int load_rc,
                      const sim_err *load_err)
{
    char host[HOST_LEN] = "?";
    gethostname(host, sizeof host - 1);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 7);
    msgpack_pack_int(&pk, rank);
    pack_str(&pk, host);
    msgpack_pack_int(&pk, (int)getpid());
    msgpack_pack_uint64(&pk, text_digest);
    msgpack_pack_uint64(&pk, env_digest);
    if (load_rc) {
        char msg[1200];
        sim_err_format(load_err, msg, sizeof msg);
        pack_str(&pk, msg);
    } else {
        msgpack_pack_nil(&pk);
    }
    pack_str(&pk, sim_checkpoint_build());
    int rc = MPI_Send(sb.data, (int)sb.size, MPI_BYTE, 0, TAG_HELLO, MPI_COMM_WORLD);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

int sim_mpi_serve(const fl_algo *algo, const fl_env *env, uint64_t text_digest, uint64_t env_digest,
                  int load_rc, const sim_err *load_err)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sim_err err = {0};
    int rc = send_hello(rank, text_digest, env_digest, load_rc, load_err);
    if (rc != MPI_SUCCESS) {
        mpi_fail(&err, "MPI_Send (hello)", 0, rc);
        fprintf(stderr, "fedsim: worker rank %d: %s\n", rank, err.msg);
        return 2;
    }
    openblas_set_num_threads(1); /* one rank per core: BLAS threads would only compete */
    fl_worker w;
    fl_worker_init(&w);
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    int status = 0;
    for (int job_no = 1;; job_no++) {
        MPI_Status st;
        void *buf = NULL;
        size_t len = 0;
        if ((rc = wait_message(0, MPI_ANY_TAG, &st)) != MPI_SUCCESS ||
            (rc = receive(&st, &buf, &len)) != MPI_SUCCESS) {
            mpi_fail(&err, "receiving from the coordinator", 0, rc);
            status = 2;
            break;
        }
        if (st.MPI_TAG == TAG_STOP) {
            free(buf);
            break;
        }
        /* a job from a worker that could not load its scenario is a coordinator bug */
        if (st.MPI_TAG != TAG_JOB || load_rc ||
            sim_frame_serve(algo, env, &w, rank - 1, 0, job_no, buf, len, &out)) {
            sim_fail(&err, SIM_EFORMAT, NULL, 0, 0, "malformed job message (tag %d, %zu bytes)",
                     st.MPI_TAG, len);
            free(buf);
            status = 2;
            break;
        }
        free(buf);
        rc = MPI_Send(out.data + SIM_FRAME_PREFIX, (int)(out.size - SIM_FRAME_PREFIX), MPI_BYTE, 0,
                      TAG_RESULT, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            mpi_fail(&err, "MPI_Send (result)", 0, rc);
            status = 2;
            break;
        }
    }
    if (status) fprintf(stderr, "fedsim: worker rank %d: %s\n", rank, err.msg);
    msgpack_sbuffer_destroy(&out);
    fl_worker_destroy(&w);
    return status;
}

/* ---------------------------------------------------------------------------------------- */
/* the coordinator's link */

static int link_send(void *arg, int slot, const void *body, size_t len, sim_err *err)
{
    (void)arg;
    int rc = MPI_Send(body, (int)len, MPI_BYTE, slot + 1, TAG_JOB, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? SIM_OK : mpi_fail(err, "MPI_Send (job)", slot + 1, rc);
}

static int link_recv(void *arg, int *slot, void **body, size_t *len, sim_err *err)
{
    (void)arg;
    MPI_Status st;
    int flag = 0, rc = MPI_Iprobe(MPI_ANY_SOURCE, TAG_RESULT, MPI_COMM_WORLD, &flag, &st);
    if (rc != MPI_SUCCESS) return mpi_fail(err, "MPI_Iprobe (results)", -1, rc);
    if (!flag) return 0;
    if ((rc = receive(&st, body, len)) != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Recv (result)", st.MPI_SOURCE, rc);
    *slot = st.MPI_SOURCE - 1;
    return 1;
}

static void link_name(void *arg, int slot, char *buf, size_t size)
{
    const sim_mpi *m = arg;
    const mpi_peer *p = &m->peer[slot + 1];
    snprintf(buf, size, "worker rank %d (host %s, pid %d)", slot + 1, p->host, p->pid);
}

/* Check rank r's hello (body of len bytes) against our digests. */
static int take_hello(sim_mpi *m, int r, const void *body, size_t len, uint64_t text_digest,
                      uint64_t env_digest, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    const msgpack_object *a = NULL;
    int rc = SIM_OK;
    if (nn_msgpack_next(&u, body, len, &off, NULL, NULL) || off != len ||
        u.data.type != MSGPACK_OBJECT_ARRAY || u.data.via.array.size != 7 ||
        (a = u.data.via.array.ptr)[1].type != MSGPACK_OBJECT_STR ||
        a[2].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        a[3].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        a[4].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        (a[5].type != MSGPACK_OBJECT_NIL && a[5].type != MSGPACK_OBJECT_STR) ||
        a[6].type != MSGPACK_OBJECT_STR) {
        msgpack_unpacked_destroy(&u);
        return sim_fail(err, SIM_EFORMAT, NULL, 0, 0,
                        "worker rank %d sent a malformed hello (%zu bytes): is it the same "
                        "fedsim-mpi build?",
                        r, len);
    }
    mpi_peer *p = &m->peer[r];
    snprintf(p->host, sizeof p->host, "%.*s", (int)a[1].via.str.size, a[1].via.str.ptr);
    p->pid = (int)a[2].via.u64;
    snprintf(p->build, sizeof p->build, "%.*s", (int)a[6].via.str.size, a[6].via.str.ptr);
    char name[160];
    link_name(m, r - 1, name, sizeof name);
    if (a[5].type == MSGPACK_OBJECT_STR)
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0, "%s could not load the scenario: %.*s", name,
                      (int)a[5].via.str.size, a[5].via.str.ptr);
    else if (a[3].via.u64 != text_digest)
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "%s resolved another scenario (digest %016llx, ours %016llx): every rank "
                      "must get the same scenario file, --set options and --seed",
                      name, (unsigned long long)a[3].via.u64, (unsigned long long)text_digest);
    else if (a[4].via.u64 != env_digest)
        rc = sim_fail(err, SIM_EINVAL, NULL, 0, 0,
                      "%s built another environment from the same scenario (digest %016llx, ours "
                      "%016llx): its dataset files differ from the coordinator's",
                      name, (unsigned long long)a[4].via.u64, (unsigned long long)env_digest);
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* One warning per build other than ours among the workers. Not an error: a cluster's nodes can
 * differ in CPU (so in OpenBLAS kernels) and still train correctly, but a job's float rounding
 * then depends on the rank that trains it, and the outputs on which rank got which job. */
static void warn_builds(const sim_mpi *m)
{
    const char *ours = sim_checkpoint_build();
    for (int r = 1; r < m->size; r++) {
        const mpi_peer *p = &m->peer[r];
        int first = strcmp(p->build, ours) != 0, n = 0;
        for (int q = 1; q < r && first; q++)
            first = strcmp(m->peer[q].build, p->build) != 0;
        if (!first) continue;
        for (int q = r; q < m->size; q++)
            n += !strcmp(m->peer[q].build, p->build);
        fprintf(stderr,
                "fedsim: warning: %d worker rank%s (the first: rank %d, host %s) run%s another "
                "build (%s; rank 0: %s): the run goes on, but a job can round differently on "
                "them, so the outputs can differ from a run on one build\n",
                n, n > 1 ? "s" : "", r, p->host, n > 1 ? "" : "s", p->build, ours);
    }
}

int sim_mpi_open(sim_mpi **out, sim_pool_link *link, uint64_t text_digest, uint64_t env_digest,
                 const volatile sig_atomic_t *stop, sim_err *err)
{
    *out = NULL;
    sim_mpi *m = sim_xcalloc(1, sizeof *m);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    m->peer = sim_xcalloc((size_t)m->size, sizeof *m->peer);
    int rc = SIM_OK;
    for (int r = 1; r < m->size && !rc; r++) {
        MPI_Status st;
        void *body = NULL;
        size_t len = 0;
        int mrc = wait_message(r, TAG_HELLO, &st);
        if (mrc == MPI_SUCCESS) mrc = receive(&st, &body, &len);
        if (mrc != MPI_SUCCESS)
            rc = mpi_fail(err, "waiting for the hello", r, mrc);
        else
            rc = take_hello(m, r, body, len, text_digest, env_digest, err);
        free(body);
    }
    if (rc) {
        sim_mpi_close(m);
        return rc;
    }
    warn_builds(m);
    *link = (sim_pool_link){m->size - 1, m, link_send, link_recv, link_name, 1e-3, stop};
    *out = m;
    return SIM_OK;
}

void sim_mpi_stop_workers(void)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int r = 1; r < size; r++)
        MPI_Send(NULL, 0, MPI_BYTE, r, TAG_STOP, MPI_COMM_WORLD);
}

void sim_mpi_close(sim_mpi *m)
{
    if (!m) return;
    sim_mpi_stop_workers();
    free(m->peer);
    free(m);
}
