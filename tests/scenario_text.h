/* tests/scenario_text.h -- load a scenario given as text, for tests of scenario keys: the text is
 * written as s.yaml in a fresh temporary folder (so errors name "s.yaml:LINE"), loaded, and the
 * file and folder removed. */
#ifndef TESTS_SCENARIO_TEXT_H
#define TESTS_SCENARIO_TEXT_H

#include "sim/scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* sim_scenario_load's return code; msg gets its formatted error (empty on success). */
static inline int test_load_scenario(sim_scenario *sc, const char *text, char *msg, size_t n)
{
    char dir[] = "/tmp/fedsim-scenario-XXXXXX", path[64];
    if (!mkdtemp(dir)) return snprintf(msg, n, "mkdtemp failed"), SIM_EIO;
    snprintf(path, sizeof path, "%s/s.yaml", dir);
    FILE *f = fopen(path, "w");
    if (!f) return rmdir(dir), snprintf(msg, n, "cannot write %s", path), SIM_EIO;
    fputs(text, f);
    fclose(f);
    sim_err err = {0};
    int rc = sim_scenario_load(sc, path, NULL, 0, &err);
    msg[0] = 0;
    if (rc) sim_err_format(&err, msg, n);
    unlink(path);
    rmdir(dir);
    return rc;
}

#endif /* TESTS_SCENARIO_TEXT_H */
