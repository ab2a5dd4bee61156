/* tests/test_sim_commands.c -- the fedsim binary's command table from outside: `fedsim help` lists
 * every command once, each command answers --help (anywhere after its name, running nothing),
 * -h and `fedsim help NAME` with its own usage on stdout and exit 0, refuses an option it
 * does not have with its synopsis on stderr and exit 2, and an unknown command exits 2 naming it.
 * The commands are listed here, not read from the help: one missing from the help, or one added
 * to the table without a line here, fails. The binary is $FEDSIM_BIN (make test sets it). */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const commands[] = {"run",    "resume",    "check",   "sweep",
                                       "plot",   "summary",   "devices", "keys",
                                       "events", "calibrate", "train"};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static char dir[64], out_path[128], err_path[128];
static const char *bin;

/* Run "BIN args" with stdout and stderr into out_path and err_path; the exit status. */
static int fedsim(const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", bin, args, out_path, err_path);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether the file at path starts with "usage: fedsim NAME" followed by a space or a newline. */
static int usage_of(const char *path, const char *name)
{
    size_t len;
    char *txt = test_slurp(path, &len), want[64];
    int n = snprintf(want, sizeof want, "usage: fedsim %s", name);
    int ok = txt && !strncmp(txt, want, (size_t)n) && (txt[n] == ' ' || txt[n] == '\n');
    free(txt);
    return ok;
}

static int is_empty(const char *path)
{
    struct stat st;
    return !stat(path, &st) && st.st_size == 0;
}

/* `fedsim help`: each command on a line of its own under "commands:", exactly once, and nothing
 * else there but help itself. */
static void test_listing(void)
{
    CHECK(fedsim("help") == 0);
    size_t len;
    char *txt = test_slurp(out_path, &len);
    const char *p = txt ? strstr(txt, "\ncommands:\n") : NULL;
    CHECK_MSG(p, "fedsim help has a commands section: %s", txt ? txt : "(nothing)");
    int seen[N_COMMANDS] = {0}, help = 0;
    for (p = p ? p + strlen("\ncommands:\n") : NULL; p && !strncmp(p, "  ", 2);) {
        char name[32] = "";
        sscanf(p, "%31s", name);
        int k = 0;
        while (k < N_COMMANDS && strcmp(commands[k], name))
            k++;
        if (k < N_COMMANDS)
            seen[k]++;
        else if (!strcmp(name, "help"))
            help++;
        else
            CHECK_MSG(0, "fedsim help lists '%s', which this test does not know", name);
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    for (int k = 0; k < N_COMMANDS; k++)
        CHECK_MSG(seen[k] == 1, "fedsim help lists %s once, not %d times", commands[k], seen[k]);
    CHECK_MSG(help == 1, "fedsim help lists help");
    free(txt);
    /* `fedsim --help` and `-h` are the same text; bare `fedsim` prints it on stderr, exit 2 */
    CHECK(fedsim("--help") == 0 && usage_of(out_path, "COMMAND"));
    CHECK(fedsim("-h") == 0 && usage_of(out_path, "COMMAND"));
    CHECK(fedsim("") == 2 && usage_of(err_path, "COMMAND") && is_empty(out_path));
}

static void test_command_help(void)
{
    char args[512], never[128];
    snprintf(never, sizeof never, "%s/never", dir);
    for (int k = 0; k < N_COMMANDS; k++) {
        const char *c = commands[k];
        /* --help after arguments that would otherwise run (and create --out) */
        snprintf(args, sizeof args, "%s scenarios/tiny.yaml --out %s --help", c, never);
        CHECK_MSG(fedsim(args) == 0 && usage_of(out_path, c) && is_empty(err_path), "fedsim %s",
                  args);
        /* -h and `help NAME` take the same path for every command: two suffice */
        snprintf(args, sizeof args, k % 2 ? "%s -h" : "help %s", c);
        CHECK_MSG(fedsim(args) == 0 && usage_of(out_path, c), "fedsim %s", args);
        /* a bad option: the command's synopsis on stderr, nothing on stdout */
        snprintf(args, sizeof args, "%s --no-such-option", c);
        CHECK_MSG(fedsim(args) == 2 && is_empty(out_path), "fedsim %s: exit 2, nothing on stdout",
                  args);
        size_t len;
        char *err = test_slurp(err_path, &len), want[64];
        snprintf(want, sizeof want, "usage: fedsim %s ", c);
        CHECK_MSG(err && strstr(err, want), "fedsim %s: its synopsis on stderr: %s", args,
                  err ? err : "(nothing)");
        free(err);
    }
    CHECK_MSG(access(never, F_OK) != 0, "--help ran nothing (%s was not created)", never);
    CHECK(fedsim("nosuch") == 2);
    size_t len;
    char *err = test_slurp(err_path, &len);
    CHECK_MSG(err && strstr(err, "fedsim: unknown command 'nosuch'") &&
                      strstr(err, "\nusage: fedsim COMMAND"),
              "unknown command: %s", err ? err : "(nothing)");
    free(err);
    CHECK(fedsim("help nosuch") == 2);
}

/* How many lines of text start with line (NULL text: -1). */
static int count_lines(const char *text, const char *line)
{
    if (!text) return -1;
    int n = 0;
    for (const char *p = text; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        n += !strncmp(p, line, strlen(line));
    return n;
}

/* How many key lines of `fedsim keys` (two spaces, the key's name, two spaces or more: an
 * intro's or a doc's words are one space apart) do not start with "  " prefix. */
static int other_keys(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        size_t w = strcspn(p + 2, " \n");
        if (strncmp(p, "  ", 2) || p[2] == ' ' || strncmp(p + 2 + w, "  ", 2)) continue;
        n += strncmp(p + 2, prefix, strlen(prefix)) != 0;
    }
    return n;
}

/* `fedsim keys`: every section's keys with their full names; a prefix keeps those under it (a
 * key line each, as many as the Markdown's table rows); a prefix that matches nothing is an
 * error, as is a second one. */
static void test_keys(void)
{
    size_t len;
    CHECK(fedsim("keys") == 0 && is_empty(err_path));
    char *all = test_slurp(out_path, &len);
    static const char *const some[] = {"\n  seed ",
                                       "\n  dataset.scale ",
                                       "\n  partition.scheme ",
                                       "\n  algorithm.lr ",
                                       "\n  algorithm.spafl.alpha ",
                                       "\n  federation.staleness.kind ",
                                       "\n  eval.shift ",
                                       "\n  devices.mix ",
                                       "\n  devices.profiles.NAME.compute "};
    for (size_t i = 0; i < sizeof some / sizeof some[0]; i++)
        CHECK_MSG(all && strstr(all, some[i]), "fedsim keys lists%s", some[i]);
    free(all);
    CHECK(fedsim("keys algorithm.spafl") == 0);
    char *spafl = test_slurp(out_path, &len);
    int lines = count_lines(spafl, "  algorithm.spafl.");
    CHECK_MSG(lines > 0 && other_keys(spafl, "algorithm.spafl.") == 0 &&
                      other_keys(spafl, "algorithm.spafl.alpha ") == lines - 1,
              "fedsim keys algorithm.spafl: its keys only:\n%s", spafl ? spafl : "(nothing)");
    free(spafl);
    CHECK(fedsim("keys --markdown algorithm.spafl") == 0);
    char *md = test_slurp(out_path, &len);
    CHECK_MSG(md && strstr(md, "\n### `algorithm.spafl`\n") && !strstr(md, "federation"),
              "fedsim keys --markdown algorithm.spafl: %s", md ? md : "(nothing)");
    CHECK_MSG(count_lines(md, "| `") == lines, "as many rows (%d) as key lines (%d)",
              count_lines(md, "| `"), lines);
    free(md);
    CHECK(fedsim("keys federation") == 0);
    char *fed = test_slurp(out_path, &len);
    CHECK_MSG(fed && strstr(fed, "\n  federation.staleness.b ") && !other_keys(fed, "federation."),
              "fedsim keys federation: %s", fed ? fed : "(nothing)");
    free(fed);
    CHECK(fedsim("keys nosuch") == 2 && is_empty(out_path));
    char *err = test_slurp(err_path, &len);
    CHECK_MSG(err && strstr(err, "'nosuch'"), "keys nosuch: %s", err ? err : "(nothing)");
    free(err);
    CHECK(fedsim("keys eval federation") == 2 && is_empty(out_path));
}

int main(void)
{
    bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    snprintf(dir, sizeof dir, "/tmp/fedsim-commands-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(out_path, sizeof out_path, "%s/out.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    test_listing();
    test_command_help();
    test_keys();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) printf("could not remove %s\n", dir);
    return CHECK_DONE();
}
