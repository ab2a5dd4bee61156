/* sim/main.c -- the fedsim command line: the table of commands, `fedsim help` made from it, and
 * the dispatch of `fedsim COMMAND ...` to the command, each in a file of its own (sim/cmd.h).
 *
 * `fedsim COMMAND --help` (or -h anywhere after it, or `fedsim help COMMAND`) prints the command's
 * usage and exits 0; arguments the command refuses print what is wrong and its synopsis, and exit
 * with status 2, as every error does ("fedsim: file:line:col: message").
 *
 * Built with -DFEDSIM_MPI (`make mpi`, build/mpi/fedsim-mpi), the same program under mpirun or
 * srun runs `run` and `resume` with MPI ranks 1..N-1 as the training workers: main hands the
 * dispatcher to sim/cmd_mpi.c, the one file that knows about ranks.
 */
#include "sim/blas.h"
#include "sim/cmd.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Every command, in the order `fedsim help` lists them. */
static const sim_command *const commands[] = {
        &sim_cmd_run,    &sim_cmd_resume,    &sim_cmd_check,   &sim_cmd_sweep,
        &sim_cmd_plot,   &sim_cmd_summary,   &sim_cmd_devices, &sim_cmd_keys,
        &sim_cmd_events, &sim_cmd_calibrate, &sim_cmd_train,
};

static const char help_head[] =
        "usage: fedsim COMMAND [options]\n"
        "       fedsim COMMAND --help      the command's usage and options in full\n"
        "\n"
        "fedsim simulates heterogeneous federated learning: real training math per client, and\n"
        "simulated time and bytes from device profiles and what each job really cost.\n"
        "\n"
        "commands:\n";

static const char help_tail[] =
        "\n"
        "Scenario keys and their defaults: fedsim keys [PREFIX], and scenarios/README.md.\n"
        "\n"
        "environment:\n"
        "  OPENBLAS_CORETYPE  OpenBLAS's kernels. Unset, fedsim runs on OpenBLAS's own choice,\n"
        "                     or on its SkylakeX (Haswell) kernels where that choice lacks the\n"
        "                     CPU's AVX-512 (AVX2): a CPU newer than the library gets its SSE3\n"
        "                     ones. Results repeat byte for byte on the same kernels.\n";

/* The program's help: each command's summary, then the environment, ending on the kernels in use
 * (tests/run.sh reads that last line). */
static void print_help(FILE *f)
{
    fputs(help_head, f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "  %-10s %s\n", "help", "this text; help COMMAND: the command's usage");
    fputs(help_tail, f);
    fprintf(f, "                     In use here: %s.\n", sim_blas_corename());
}

/* The command called name; NULL after saying there is none, with the help, on stderr. */
static const sim_command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(commands[i]->name, name)) return commands[i];
    fprintf(stderr, "fedsim: unknown command '%s'\n\n", name);
    print_help(stderr);
    return NULL;
}

/* The command line of one process; ranks: MPI worker ranks for run and resume, or NULL. */
static int cli(int argc, char **argv, rank_hooks *ranks)
{
    if (argc < 2) {
        print_help(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        if (argc == 2 || argv[1][0] == '-' || !strcmp(argv[2], "help")) {
            print_help(stdout);
            return 0;
        }
        const sim_command *c = find_command(argv[2]);
        if (c) fputs(c->usage, stdout);
        return c ? 0 : 2;
    }
    const sim_command *c = find_command(argv[1]);
    if (!c) return 2;
    for (int i = 2; i < argc; i++) /* `fedsim sweep x.yaml --help`: sweep's usage, nothing run */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(c->usage, stdout);
            return 0;
        }
    int rc = c->fn(argc - 2, argv + 2, ranks);
    if (rc != SIM_CLI_BAD_ARGS) return rc;
    /* the synopsis: the usage up to its first blank line */
    const char *end = strstr(c->usage, "\n\n");
    fprintf(stderr, "%.*s\n(fedsim %s --help tells more)\n",
            (int)(end ? end - c->usage : (long)strlen(c->usage)), c->usage, c->name);
    return 2;
}

/* What a command printed (a listing redirected to a file) is output too: a failed write to it
 * fails the command. stdio keeps only that one failed, so the reason is known only when the last
 * flush is the one that fails. */
static int stdout_checked(int rc)
{
    errno = 0;
    if (!fflush(stdout) && !ferror(stdout)) return rc;
    fprintf(stderr, "fedsim: standard output: cannot write: %s\n",
            errno ? strerror(errno) : "an earlier write failed");
    return rc ? rc : 2;
}

int main(int argc, char **argv)
{
    sim_blas_kernels(argv); /* may start fedsim again, on faster kernels: before anything else */
    /* One BLAS thread before anything can call BLAS: results must not depend on a thread count,
     * and the run's training workers are forked processes, which inherit this setting (threads do
     * not survive fork). `fedsim train --threads` raises it for itself. */
    openblas_set_num_threads(1);
#ifdef FEDSIM_MPI
    return stdout_checked(sim_cli_mpi_main(argc, argv, cli));
#else
    return stdout_checked(cli(argc, argv, NULL));
#endif
}
