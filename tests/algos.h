/* tests/algos.h -- the registered algorithms by symbol, for tests that drive one directly (the
 * engine and the scenario loader find them by name through the registry, algos/registry.c). */
#ifndef TESTS_ALGOS_H
#define TESTS_ALGOS_H

#include "algos/algo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const fl_algo fl_fedavg, fl_fedprox, fl_local, fl_spafl, fl_spafl_local, fl_heterofl,
        fl_fjord, fl_fedrolex, fl_fedpews, fl_pfedgate, fl_fedavg_ft, fl_dmpfl, fl_dmpfl_plus,
        fl_fedper, fl_lgfedavg, fl_fedrep, fl_ditto, fl_apfl, fl_pa3dfl, fl_pfedhn;

/* cfg's own settings (fl_config.own and the section blocks) as the text of an `algorithm:` map
 * gives them through the scenario's loader ("{name: ditto, ditto: {lambda: 0.1}}", rounds 100,
 * clients 10); cfg's shared keys stay as the test set them. The blocks cfg held are freed (a copy
 * of a config must take its own: clear its blocks first). */
static inline void test_own(fl_config *cfg, const char *text)
{
    sim_err err = {0};
    fl_config t;
    if (fl_config_load(&t, text, NULL, &err) != SIM_OK) {
        printf("FAIL test_own: %s: %s:%d:%d: %s\n", text, err.file, err.line, err.col, err.msg);
        abort();
    }
    fl_config_destroy(cfg);
    memcpy(cfg->blocks, t.blocks, sizeof t.blocks);
    cfg->own = t.own;
}

#endif /* TESTS_ALGOS_H */
