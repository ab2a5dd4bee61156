/* sim/cmd_devices.c -- `fedsim devices`: the device catalog, one profile a line (and where its
 * figures come from, for a profile that says), then the measured population's data. */
#include "devices/catalog.h"
#include "devices/population.h"
#include "sim/cmd.h"

#include <stdio.h>
#include <string.h>

/* The data devices.population reads by default, beside the default catalog, and what it holds. */
static void print_population(void)
{
    const char *cat = sim_default_catalog(), *slash = strrchr(cat, '/');
    int dir = slash ? (int)(slash - cat + 1) : 0;
    char list[4200], bw[4200];
    snprintf(list, sizeof list, "%.*sphones/ai_benchmark.tsv", dir, cat);
    snprintf(bw, sizeof bw, "%.*sphones/bandwidth.tsv", dir, cat);
    dev_population pop;
    sim_err err = {0};
    if (dev_population_load(&pop, list, bw, &err)) {
        char msg[1200];
        sim_err_format(&err, msg, sizeof msg);
        printf("# devices.population: its data does not load: %s\n", msg);
        return;
    }
    printf("# devices.population: %d phones of %s (AI-Benchmark, via PKU-Chengxu/FLASH), scaled "
           "from a measured profile above;\n#   the network of %d users of %s (FLASH's "
           "measurements)\n",
           pop.n_phones, list, pop.n_users, bw);
    dev_population_destroy(&pop);
}

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
        char line[1024];
        dev_profile_describe(&cat.profiles[i], line, sizeof line);
        printf("%-20s %s\n", cat.profiles[i].name, line);
        if (cat.profiles[i].source[0]) printf("%-20s source: %s\n", "", cat.profiles[i].source);
    }
    dev_catalog_destroy(&cat);
    print_population();
    return 0;
}

static const char devices_usage[] =
        "usage: fedsim devices [--catalog FILE]\n"
        "\n"
        "List the profiles of the device catalog FILE [devices/catalog.yaml], with the source of\n"
        "the measured ones, and the data devices.population draws phones from.\n";

const sim_command sim_cmd_devices = {
        .name = "devices",
        .summary = "list the device catalog",
        .usage = devices_usage,
        .fn = cmd_devices,
};
