/* sim/cmd_events.c -- `fedsim events`: a run's event log (events.msgpack) as text. */
#include "sim/cmd.h"
#include "sim/events.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int cmd_events(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    if (argc != 1 || argv[0][0] == '-') return SIM_CLI_BAD_ARGS;
    char path[1024];
    struct stat st;
    if (!stat(argv[0], &st) && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/events.msgpack", argv[0]);
    else
        snprintf(path, sizeof path, "%s", argv[0]);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fedsim: %s: cannot open: %s\n", path, strerror(errno));
        return 2;
    }
    sim_err err = {0};
    int rc = sim_events_list(f, path, stdout, &err);
    fclose(f);
    return rc ? sim_cli_print_err(&err) : 0;
}

static const char events_usage[] =
        "usage: fedsim events RUN_DIR|FILE\n"
        "\n"
        "Print a run's event log, RUN_DIR/events.msgpack or FILE, as text: one event a\n"
        "line (time, kind, client, round, bytes, FLOPs); a truncated log is listed up to\n"
        "where it breaks, then refused (exit 2).\n";

const sim_command sim_cmd_events = {
        .name = "events",
        .summary = "print a run's events.msgpack as text",
        .usage = events_usage,
        .fn = cmd_events,
};
