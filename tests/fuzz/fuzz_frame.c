/* tests/fuzz/fuzz_frame.c -- fuzzes the job and result frames (sim/frame.c) that carry client
 * jobs to training workers and back. The first byte picks the side, the rest is a frame's body:
 *   even: a job body served by a worker (sim_frame_serve) with FedAvg on tiny.yaml (fuzz_env.h);
 *   odd:  a result body taken by the coordinator (sim_frame_take_result) for the job of client
 *         FUZZ_FRAME_CLIENT, round FUZZ_FRAME_ROUND.
 * Besides not crashing: a job the worker accepts gets a reply the coordinator accepts for that
 * job (prefix and body), a refused result leaves the job's outcome untouched and says why, and an
 * accepted one holds what the frame said (up_bytes the length of its up message).
 */
#include "sim/frame.h"
#include "tests/fuzz/fuzz_env.h"

#include "nn/pack.h"

#define FUZZ_FRAME_CLIENT 1
#define FUZZ_FRAME_ROUND  2

static void serve(const uint8_t *data, size_t size)
{
    static fl_worker w;
    static int ready;
    sim_scenario *sc = fuzz_env(0);
    if (!ready) fl_worker_init(&w), ready = 1;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    int rc = sim_frame_serve(sc->spec.algo, &sc->spec.env, &w, 0, 0, 1, data, size, &out);
    fuzz_require(rc == SIM_OK || rc == SIM_EFORMAT);
    if (rc == SIM_OK) {
        /* the job was one array of 5 whose first fields are client and round */
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        fuzz_require(nn_msgpack_next(&u, data, size, &off, NULL, NULL) == SIM_OK);
        const msgpack_object *a = u.data.via.array.ptr;
        int32_t client = (int32_t)a[0].via.u64;
        int32_t round = a[1].type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (int32_t)a[1].via.i64
                                                                     : (int32_t)a[1].via.u64;
        msgpack_unpacked_destroy(&u);
        fuzz_require(out.size >= SIM_FRAME_PREFIX &&
                     sim_frame_len((const unsigned char *)out.data) == out.size - SIM_FRAME_PREFIX);
        sim_job_out o = {0};
        fl_result_init(&o.res);
        const char *why;
        rc = sim_frame_take_result(out.data + SIM_FRAME_PREFIX, out.size - SIM_FRAME_PREFIX, client,
                                   round, &o, &why);
        if (rc) fprintf(stderr, "the worker's reply was refused: %s\n", why);
        fuzz_require(rc == SIM_OK);
        fl_result_destroy(&o.res);
    }
    msgpack_sbuffer_destroy(&out);
}

static void take(const uint8_t *data, size_t size)
{
    sim_job_out o = {0};
    fl_result_init(&o.res);
    const char *why = NULL;
    int rc = sim_frame_take_result(data, size, FUZZ_FRAME_CLIENT, FUZZ_FRAME_ROUND, &o, &why);
    if (rc) {
        fuzz_require(rc == SIM_EFORMAT && why && *why);
        fuzz_require(o.rc == 0 && !o.err.msg[0] && o.res.up.size == 0 && o.res.priv.size == 0);
    } else {
        fuzz_require(!why);
        if (o.rc)
            fuzz_require(o.rc < 0 && o.res.up.size == 0);
        else
            fuzz_require(o.res.up_bytes == o.res.up.size && o.res.steps >= 0);
    }
    fl_result_destroy(&o.res);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] & 1)
        take(data + 1, size - 1);
    else
        serve(data + 1, size - 1);
    return 0;
}
