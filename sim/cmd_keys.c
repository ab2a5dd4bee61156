/* sim/cmd_keys.c -- `fedsim keys`: every scenario key from the key tables
 * (sim_scenario_keys_print), for a terminal or as the Markdown of scenarios/README.md's key tables.
 */
#include "sim/cmd.h"

#include <stdio.h>
#include <string.h>

static int cmd_keys(int argc, char **argv, rank_hooks *ranks)
{
    (void)ranks;
    const char *prefix = NULL;
    int markdown = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--markdown")) {
            markdown = 1;
        } else if (argv[i][0] == '-' || prefix) {
            fprintf(stderr, "fedsim keys: unexpected '%s'\n", argv[i]);
            return SIM_CLI_BAD_ARGS;
        } else {
            prefix = argv[i];
        }
    }
    if (!sim_scenario_keys_print(stdout, prefix, markdown)) {
        fprintf(stderr, "fedsim: no scenario key starts with '%s' (fedsim keys lists them all)\n",
                prefix);
        return 2;
    }
    return 0;
}

static const char keys_usage[] =
        "usage: fedsim keys [PREFIX] [--markdown]\n"
        "\n"
        "Every key a scenario may set, section by section: its type, default, range or choices\n"
        "(with its unit), and what it does; the algorithms' keys too (algorithm.KEY, and each\n"
        "algorithm's section, algorithm.SECTION.KEY). A default in words (min(10, clients))\n"
        "follows the scenario; `fedsim check FILE` prints every value resolved.\n"
        "\n"
        "  PREFIX      only the keys whose dotted name starts with it (fedsim keys federation,\n"
        "              fedsim keys algorithm.spafl); none is an error (exit 2)\n"
        "  --markdown  Markdown tables: scenarios/README.md's key tables are this output\n"
        "              (make docs writes them there)\n";

const sim_command sim_cmd_keys = {
        .name = "keys",
        .summary = "list the scenario keys: type, default, range and what each does",
        .usage = keys_usage,
        .fn = cmd_keys,
};
