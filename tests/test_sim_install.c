/* tests/test_sim_install.c -- `make install` and `make uninstall`: the binary and what it reads
 * at run time land under DESTDIR/PREFIX, and the installed fedsim, moved elsewhere and run from
 * yet another folder, reads the catalog installed beside it (not the source tree's): a profile
 * only that copy has is found, and `check` names that file; so is the phone data that
 * devices.population reads. The binary installed is $FEDSIM_BIN (make test sets it; INSTALL_BIN
 * spares a release build). */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath */
#include "tests/check.h"
#include "tests/files.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef FEDSIM_ROOT
#define FEDSIM_ROOT "."
#endif

static char tmp[] = "/tmp/fedsim-install-XXXXXX";

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* make TARGET in the source tree, installing into tmp/stage/opt/fs; make's own variables from a
 * calling make (make test) are dropped, so this make is a fresh one. */
static int make(const char *target, const char *bin)
{
    char cmd[3000];
    snprintf(cmd, sizeof cmd,
             "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -C %s %s "
             "DESTDIR=%s/stage PREFIX=/opt/fs INSTALL_BIN=%s >>%s/make.log 2>&1",
             FEDSIM_ROOT, target, tmp, bin, tmp);
    return sh(cmd);
}

static int exists(const char *rel)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", tmp, rel);
    return access(p, F_OK) == 0;
}

/* Whether file rel under tmp holds want. */
static int holds(const char *rel, const char *want)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", tmp, rel);
    return test_file_has(p, want);
}

int main(void)
{
    const char *env = getenv("FEDSIM_BIN");
    char bin[PATH_MAX];
    if (!env || !realpath(env, bin)) {
        printf("FEDSIM_BIN is not set to the fedsim binary\n");
        return 1;
    }
    if (!mkdtemp(tmp)) return 1;

    static const char *const files[] = {
            "stage/opt/fs/bin/fedsim",
            "stage/opt/fs/share/fedsim/devices/catalog.yaml",
            "stage/opt/fs/share/fedsim/devices/traces/example-day.trace",
            "stage/opt/fs/share/fedsim/devices/phones/ai_benchmark.tsv",
            "stage/opt/fs/share/fedsim/devices/phones/bandwidth.tsv",
            "stage/opt/fs/share/fedsim/scenarios/tiny.yaml"};
    CHECK_MSG(make("install", bin) == 0, "make install failed (see %s/make.log)", tmp);
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        CHECK_MSG(exists(files[i]), "make install left out %s", files[i]);
    CHECK_MSG(make("uninstall", bin) == 0, "make uninstall failed (see %s/make.log)", tmp);
    CHECK(!exists("stage/opt/fs/bin/fedsim") && !exists("stage/opt/fs/share/fedsim"));

    /* installed again, moved away from where it was installed to, and changed: its catalog gets
     * a profile the source tree's lacks */
    char cmd[3000];
    CHECK(make("install", bin) == 0);
    snprintf(cmd, sizeof cmd,
             "cd %s && mv stage/opt/fs moved && mkdir work && "
             "cp moved/share/fedsim/scenarios/tiny.yaml work/ && "
             "printf '  installed-only: {compute: 1 GFLOPS, memory: 1 GiB, up: 1 Mbps, "
             "down: 1 Mbps, latency: 1 ms}\\n' >>moved/share/fedsim/devices/catalog.yaml",
             tmp);
    CHECK(sh(cmd) == 0);

    /* from work/: the installed fedsim checks and runs a scenario on that profile */
    const char *mix = "--set 'devices.mix=[{profile: installed-only, share: 1}]'";
    snprintf(cmd, sizeof cmd,
             "cd %s/work && ../moved/bin/fedsim check tiny.yaml %s >check.out 2>&1", tmp, mix);
    CHECK_MSG(sh(cmd) == 0, "the installed fedsim's check failed (%s/work/check.out)", tmp);
    char want[PATH_MAX + 64], real[PATH_MAX];
    snprintf(want, sizeof want, "catalog: %s/moved/share/fedsim/devices/catalog.yaml",
             realpath(tmp, real) ? real : tmp);
    CHECK_MSG(holds("work/check.out", want), "check does not name %s (%s/work/check.out)", want,
              tmp);
    CHECK_MSG(!holds("work/check.out", FEDSIM_ROOT "/devices"),
              "it read the source tree's catalog");
    snprintf(cmd, sizeof cmd,
             "cd %s/work && ../moved/bin/fedsim run tiny.yaml --set rounds=1 %s >run.out 2>&1 && "
             "../moved/bin/fedsim devices >devices.out 2>&1",
             tmp, mix);
    CHECK_MSG(sh(cmd) == 0, "the installed fedsim's run or devices failed (%s/work)", tmp);
    CHECK(exists("work/runs/tiny-7/metrics.tsv"));
    CHECK_MSG(holds("work/devices.out", "installed-only"), "devices: no installed-only (%s/work)",
              tmp);

    /* its devices.population reads the phone data installed beside its catalog */
    snprintf(cmd, sizeof cmd,
             "cd %s/work && ../moved/bin/fedsim check tiny.yaml --set "
             "'devices.population={phones: 1}' >pop.out 2>&1",
             tmp);
    CHECK_MSG(sh(cmd) == 0, "the installed fedsim's population check failed (%s/work/pop.out)",
              tmp);
    snprintf(want, sizeof want, "list: %s/moved/share/fedsim/devices/phones/ai_benchmark.tsv",
             realpath(tmp, real) ? real : tmp);
    CHECK_MSG(holds("work/pop.out", want), "check does not name %s (%s/work/pop.out)", want, tmp);

    if (!check_failed) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
        sh(cmd);
    }
    return CHECK_DONE();
}
