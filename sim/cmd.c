/* sim/cmd.c -- helpers the fedsim commands share (sim/cmd.h): error messages, numbers and
 * options, folders, the gnuplot notice.
 */
#include "sim/cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int sim_cli_die(const char *msg)
{
    fprintf(stderr, "fedsim: %s\n", msg);
    return 2;
}

int sim_cli_print_err(const sim_err *err)
{
    char msg[1200];
    sim_err_format(err, msg, sizeof msg);
    return sim_cli_die(msg);
}

int sim_cli_parse_num(const char *key, const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "fedsim: %s: '%s' is not a number in [%g, %g]\n", key, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int sim_cli_next_option(const char *cmd, int argc, char **argv, int *i, char *key, const char **k,
                        const char **v)
{
    *k = argv[*i];
    *v = NULL;
    const char *eq = strchr(*k, '=');
    if (eq) {
        snprintf(key, 64, "%.*s", (int)(eq - *k), *k);
        *k = key;
        *v = eq + 1;
    } else if (*i + 1 < argc) {
        *v = argv[++*i];
    }
    if (strncmp(*k, "--", 2) || !*v) {
        fprintf(stderr, "fedsim %s: expected --option VALUE, got '%s'\n", cmd, argv[*i]);
        return -1;
    }
    return 0;
}

/* What plot and summary judge a run by when it has both. */
int sim_cli_parse_acc(const char *v, int *pers)
{
    if (!strcmp(v, "global") || !strcmp(v, "personalized")) {
        *pers = v[0] == 'p';
        return 0;
    }
    return sim_cli_die("--acc: expected global or personalized");
}

int sim_cli_mkdirs(const char *path)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

void sim_cli_gnuplot_missing(void)
{
    fprintf(stderr, "fedsim: gnuplot is not on PATH, so no plots (apt-get install gnuplot-nox; "
                    "then fedsim plot RUN_DIR draws them)\n");
}
