/* sim/scenario_comp.c -- a scenario's `compression:` section (its keys are in scenario_keys.c):
 * how updates (`up`) and models (`down`) travel, into sc->comp_up and sc->comp_down, which
 * fl_env hands the algorithms (algos/compress.c).
 */
#include "sim/scenario.h"
#include "sim/scenario_keys.h"

#include <string.h>

/* Key `name` of table keys into block (the block being filled is the default's context). */
static int read_key(const sim_key *keys, const char *name, void *block, sim_keys_map *s,
                    sim_err *err)
{
    sim_key_ctx c = {.config = block};
    return sim_keys_read(sim_keys_find(keys, name), block, s, &c, err);
}

/* Note in sc->note that key of compression.DIR is left unread: the scheme chosen has no use for
 * it (a sweep over the scheme keeps one scenario). */
static void note_unused(sim_scenario *sc, const sim_keys_map *t, const char *dir, const char *key)
{
    const sim_yaml *v = sim_yaml_get(t->map, key);
    if (!v) return;
    sim_yaml_mark_used(v);
    size_t len = strlen(sc->note);
    snprintf(sc->note + len, sizeof sc->note - len, "%scompression.%s.%s unused by %s",
             len ? "; " : "", dir, key,
             nn_comp_names[(dir[0] == 'u' ? &sc->comp_up : &sc->comp_down)->scheme]);
}

/* compression: {up: {scheme, ratio, levels, error_feedback}, down: {...}}. A scheme is refused
 * at its key for an algorithm whose messages are not the model's parameters (its flags), with
 * its reason (fl_algo.no_compress), and topk,
 * randk and sign for downloads. Absent, it is none both ways and no default is written: the
 * resolved scenario (and `fedsim check`'s copy of it) of a run without it is what it was. */
int sim_scenario_load_compression(sim_scenario *sc, sim_keys_map *root, sim_err *err)
{
    const sim_key *keys = sim_keys_compression;
    if (!sim_yaml_get(sc->doc, "compression")) return SIM_OK;
    char pre[64], pre2[96];
    sim_keys_map s = sim_keys_sub(root, "compression", pre, sizeof pre);
    int rc = sim_keys_need_map(&s, "compression", err);
    for (int d = 0; d < 2 && !rc; d++) {
        const char *dir = d ? "down" : "up";
        nn_comp *c = d ? &sc->comp_down : &sc->comp_up;
        sim_keys_map t = sim_keys_sub(&s, dir, pre2, sizeof pre2);
        if ((rc = sim_keys_need_map(&t, dir, err)) || (rc = read_key(keys, "scheme", c, &t, err)))
            break;
        int sch = c->scheme, sparse = sch == NN_COMP_TOPK || sch == NN_COMP_RANDK;
        sim_yaml *at = sim_yaml_get(t.map, "scheme");
        unsigned need = d ? FL_COMPRESS_DOWN : FL_COMPRESS_UP;
        if (sch != NN_COMP_NONE && !(sc->spec.algo->flags & need)) {
            char can[256] = "";
            for (int i = 0; fl_algos[i]; i++)
                if (fl_algos[i]->flags & need) {
                    size_t len = strlen(can);
                    snprintf(can + len, sizeof can - len, "%s%s", len ? ", " : "",
                             fl_algos[i]->name);
                }
            const char *why = sc->spec.algo->no_compress;
            return sim_yaml_fail(at, err,
                                 "compression.%s.scheme: %s: %s: %s; compression applies to the "
                                 "messages of %s",
                                 dir, nn_comp_names[sch], sc->cfg.name,
                                 why ? why : "its messages are not the model's parameters", can);
        }
        if (d && (sparse || sch == NN_COMP_SIGN))
            return sim_yaml_fail(at, err,
                                 "compression.down.scheme: %s of a whole model is no model: it "
                                 "needs a reference each client holds, which the server does not "
                                 "keep; down takes none, qsgd, fp16 or bf16",
                                 nn_comp_names[sch]);
        if (sparse)
            rc = read_key(keys, "ratio", c, &t, err);
        else
            note_unused(sc, &t, dir, "ratio");
        if (!rc && sch == NN_COMP_QSGD)
            rc = read_key(keys, "levels", c, &t, err);
        else if (!rc)
            note_unused(sc, &t, dir, "levels");
        sim_yaml *ef = sim_yaml_get(t.map, "error_feedback");
        if (rc || sch == NN_COMP_NONE) {
            if (!rc) note_unused(sc, &t, dir, "error_feedback");
            continue;
        }
        if (d) {
            if (ef)
                return sim_yaml_fail(ef, err,
                                     "compression.down.error_feedback: the server keeps no "
                                     "residual per client; error feedback is for uploads");
            continue;
        }
        if ((rc = read_key(keys, "error_feedback", c, &t, err))) break;
        if (sch == NN_COMP_RANDK && c->error_feedback)
            return sim_yaml_fail(ef, err,
                                 "compression.up.error_feedback: randk's values are scaled by n/k "
                                 "to be unbiased, so what it leaves out is no residual to send "
                                 "later; use topk for error feedback");
    }
    return rc;
}
