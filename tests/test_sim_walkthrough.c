/* tests/test_sim_walkthrough.c -- README.md's walkthrough runs as written. Each ```sh block that
 * follows a line "<!-- walkthrough: FILE... -->" runs, in README order, under `sh -e` in one
 * scratch folder holding a link to scenarios/, so later blocks read what earlier ones wrote.
 * There `fedsim` is a shell function calling $FEDSIM_BIN; to run and sweep it appends
 * SHORTER (fewer rounds of a small model: seconds under the sanitizers where the README's
 * lenet5-caffe takes minutes; a later --set wins over the block's own). A block that fails (a
 * wrong command, flag, key, value or path) fails here, naming its README line and showing its
 * output; so does a FILE its marker names that the block did not write. */
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

/* What run and sweep get appended; README.md's walkthrough says so. */
#define SHORTER "--set rounds=2 --set model=mlp:784-32-10"

static const char PREAMBLE[] = "fedsim() {\n"
                               "    case \"$1\" in\n"
                               "    run | sweep) \"$FEDSIM_BIN\" \"$@\" " SHORTER " ;;\n"
                               "    *) \"$FEDSIM_BIN\" \"$@\" ;;\n"
                               "    esac\n"
                               "}\n";

/* The README line number of position p in text. */
static int line_of(const char *text, const char *p)
{
    int line = 1;
    for (const char *q = text; q < p; q++)
        line += *q == '\n';
    return line;
}

/* Writes the block (len bytes) after the preamble into path; 0 on success. */
static int write_script(const char *path, const char *block, size_t len)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(PREAMBLE, f) >= 0 && fwrite(block, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Runs the block at README line `line` whose marker lists `files` (up to its end `fend`) in dir;
 * k numbers its script and log. */
static void run_block(const char *dir, int k, int line, const char *block, size_t len,
                      const char *files, const char *fend)
{
    char script[PATH_MAX], log[PATH_MAX], cmd[3 * PATH_MAX];
    snprintf(script, sizeof script, "%s/block%d.sh", dir, k);
    snprintf(log, sizeof log, "%s/block%d.log", dir, k);
    CHECK_MSG(write_script(script, block, len) == 0, "cannot write %s", script);
    snprintf(cmd, sizeof cmd, "cd '%s' && sh -e '%s' >'%s' 2>&1", dir, script, log);
    int rc = system(cmd);
    int ok = rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
    CHECK_MSG(ok, "README.md:%d: the walkthrough block failed (status %d); its output:", line,
              rc == -1 ? -1 : WEXITSTATUS(rc));
    if (!ok) {
        size_t n;
        char *out = test_slurp(log, &n);
        fprintf(stderr, "%s\n", out ? out : "(no output)");
        free(out);
    }
    /* the files the marker names */
    const char *p = files;
    while (p < fend) {
        p += strspn(p, " \t");
        size_t n = strcspn(p, " \t\n");
        if (p + n > fend) n = (size_t)(fend - p);
        if (!n) break;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%.*s", dir, (int)n, p);
        CHECK_MSG(test_readable(path), "README.md:%d: the block did not write %.*s", line, (int)n,
                  p);
        p += n;
    }
}

int main(void)
{
    const char *bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    /* the blocks run in another folder: a relative path is made absolute */
    char cwd[PATH_MAX], abs_bin[2 * PATH_MAX], dir[] = "/tmp/fedsim-walk-XXXXXX", link[PATH_MAX];
    if (bin[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(abs_bin, sizeof abs_bin, "%s", bin);
    else
        snprintf(abs_bin, sizeof abs_bin, "%s/%s", cwd, bin);
    CHECK_MSG(access(abs_bin, X_OK) == 0, "no fedsim binary at %s", abs_bin);
    setenv("FEDSIM_BIN", abs_bin, 1);
    if (!mkdtemp(dir)) return 1;
    snprintf(link, sizeof link, "%s/scenarios", dir);
    CHECK_MSG(symlink(FEDSIM_ROOT "/scenarios", link) == 0, "cannot link %s", link);

    size_t len;
    char *readme = test_slurp(FEDSIM_ROOT "/README.md", &len);
    CHECK_MSG(readme, "cannot read %s/README.md", FEDSIM_ROOT);
    int blocks = 0;
    const char *marker = "<!-- walkthrough:";
    for (const char *m = readme ? strstr(readme, marker) : NULL; m; m = strstr(m + 1, marker)) {
        int line = line_of(readme, m);
        const char *files = m + strlen(marker), *fend = strstr(files, "-->");
        const char *nl = fend ? strchr(fend, '\n') : NULL;
        int fenced = nl && !strncmp(nl + 1, "```sh\n", 6);
        CHECK_MSG(fenced, "README.md:%d: a walkthrough marker is not followed by a ```sh block",
                  line);
        if (!fenced) continue;
        const char *block = nl + 1 + 6, *end = strstr(block, "\n```\n");
        CHECK_MSG(end, "README.md:%d: the walkthrough block never closes", line);
        if (!end) continue;
        run_block(dir, blocks++, line + 2, block, (size_t)(end + 1 - block), files, fend);
    }
    /* the three jobs: a sweep, a comparison of algorithms, device profiles of one's own */
    CHECK_MSG(blocks >= 3, "README.md has %d walkthrough blocks, the walkthrough has 3 jobs",
              blocks);
    free(readme);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
