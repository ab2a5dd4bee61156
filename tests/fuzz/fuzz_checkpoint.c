/* tests/fuzz/fuzz_checkpoint.c -- fuzzes checkpoints: the file's trailer and checksum
 * (sim_checkpoint_read in sim/checkpoint.c) and the engine's decoder of the payload behind it,
 * with each algorithm's server_load (sim_engine_new resuming, sim/engine_ckpt.c).
 *
 * The first byte s picks the algorithm, fl_algos[s % N], whose tiny.yaml run (fuzz_env.h) resumes,
 * and the form of the rest by (s / N) % 2: 0 the payload itself, given to the engine in memory;
 * 1 a checkpoint file (payload and trailer), written to the scratch folder and read with
 * sim_checkpoint_read, whose payload then goes to the engine. A checkpoint that loads is run to
 * the end (the scenario's last round, without outputs), so that what the loader let through is
 * used. Besides not crashing: a refusal names the input and leaves nothing allocated (the leak
 * checker sees it), and a file that reads is one whose trailer holds the payload's length.
 */
#include "sim/checkpoint.h"
#include "tests/fuzz/fuzz_env.h"

static void resume(sim_scenario *sc, const void *payload, size_t len)
{
    sim_run_spec spec = sc->spec;
    spec.out_dir = NULL;
    spec.workers = 0;
    spec.resume = 1;
    spec.resume_payload = payload ? payload : "";
    spec.resume_len = len;
    sim_engine *e = NULL;
    sim_err err = {0};
    int rc = sim_engine_new(&e, &spec, &err);
    if (rc) {
        fuzz_require(rc < 0 && err.msg[0] && !strcmp(err.file, "checkpoint payload"));
        return;
    }
    /* what was restored is used: the run's last round, with its evaluation */
    rc = sim_engine_run(e, &err);
    fuzz_require(rc == SIM_OK || (rc < 0 && err.msg[0]));
    sim_engine_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int n = fuzz_n_algos();
    sim_scenario *sc = fuzz_env(data[0] % n);
    if (data[0] / n % 2 == 0) {
        resume(sc, data + 1, size - 1);
        return 0;
    }
    char path[1024];
    fuzz_write(path, "checkpoint.msgpack", data + 1, size - 1);
    void *payload = NULL;
    size_t len = 0;
    sim_err err = {0};
    int rc = sim_checkpoint_read(path, &payload, &len, &err);
    if (rc) {
        fuzz_require(rc < 0 && !payload && err.msg[0] && !strcmp(err.file, path));
        return 0;
    }
    fuzz_require(len + SIM_CHECKPOINT_TRAILER == size - 1);
    resume(sc, payload, len);
    free(payload);
    return 0;
}
