/* sim/cmd_devices.c -- `fedsim devices`: the device catalog, one profile a line. */
#include "devices/catalog.h"
#include "sim/cmd.h"

#include <stdio.h>
#include <string.h>

static int cmd_devices(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    const char *path = sim_default_catalog();
    if (argc == 2 && !strcmp(argv[0], "--catalog"))
        path = argv[1];
    else if (argc)
        return SIM_CLI_BAD_ARGS;
    dev_catalog cat;
    sim_err err = {0};
    if (dev_catalog_load(&cat, path, &err)) return sim_cli_print_err(&err);
    printf("# %s\n", path);
    for (int i = 0; i < cat.n; i++) {
        char line[512];
        dev_profile_describe(&cat.profiles[i], line, sizeof line);
        printf("%-20s %s\n", cat.profiles[i].name, line);
    }
    dev_catalog_destroy(&cat);
    return 0;
}

static const char devices_usage[] =
        "usage: fedsim devices [--catalog FILE]\n"
        "\n"
        "List the profiles of the device catalog FILE [devices/catalog.yaml].\n";

const sim_command sim_cmd_devices = {
        .name = "devices",
        .summary = "list the device catalog",
        .usage = devices_usage,
        .fn = cmd_devices,
};
