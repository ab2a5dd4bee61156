/* tests/test_sim_readme.c -- scenarios/README.md's key tables are what `fedsim keys --markdown`
 * ($FEDSIM_BIN) prints now: the text between its marker lines ("<!-- keys: ..." and
 * "<!-- end keys -->") is that output and a blank line, as `make docs` writes it. A key, default
 * or doc changed in a table without `make docs` fails here, naming the README's first line that
 * differs and what the command prints there. */
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FEDSIM_ROOT
#define FEDSIM_ROOT "."
#endif

/* The line of text starting at p, up to its newline, into buf. */
static const char *line_at(const char *p, char *buf, size_t n)
{
    snprintf(buf, n, "%.*s", (int)strcspn(p, "\n"), p);
    return buf;
}

/* Whether the README's block (text, len bytes, starting on README line first) is want; when not,
 * says where they part. */
static int same_block(const char *text, size_t len, int first, const char *want)
{
    size_t wlen = strlen(want);
    if (len == wlen && !memcmp(text, want, len)) return 1;
    size_t i = 0, line_start = 0;
    int line = first;
    while (i < len && i < wlen && text[i] == want[i])
        if (text[i++] == '\n') {
            line++;
            line_start = i;
        }
    char a[256], b[256];
    CHECK_MSG(0,
              "scenarios/README.md:%d differs from `fedsim keys --markdown` (make docs rewrites "
              "it):\n  README:  %s\n  command: %s",
              line, line_start < len ? line_at(text + line_start, a, sizeof a) : "(block ends)",
              line_start < wlen ? line_at(want + line_start, b, sizeof b) : "(output ends)");
    return 0;
}

int main(void)
{
    const char *bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    char dir[] = "/tmp/fedsim-readme-XXXXXX", out[64], cmd[512];
    if (!mkdtemp(dir)) return 1;
    snprintf(out, sizeof out, "%s/keys.md", dir);
    snprintf(cmd, sizeof cmd, "%s keys --markdown >%s", bin, out);
    CHECK_MSG(system(cmd) == 0, "%s", cmd);
    size_t glen, rlen;
    char *gen = test_slurp(out, &glen),
         *readme = test_slurp(FEDSIM_ROOT "/scenarios/README.md", &rlen);
    CHECK_MSG(gen && glen > 1000, "fedsim keys --markdown printed %zu bytes", gen ? glen : 0);
    CHECK_MSG(readme, "cannot read %s/scenarios/README.md", FEDSIM_ROOT);
    const char *start = readme ? strstr(readme, "\n<!-- keys: ") : NULL,
               *end = start ? strstr(start, "\n<!-- end keys -->\n") : NULL;
    CHECK_MSG(start && end, "scenarios/README.md has the marker lines of its key tables");
    if (gen && start && end) {
        int first = 2; /* the README's line after the start marker */
        for (const char *p = readme; p <= start; p++)
            first += *p == '\n';
        start = strchr(start + 1, '\n') + 1;
        /* the block ends on the blank line before the end marker */
        char *want = malloc(glen + 2);
        snprintf(want, glen + 2, "%s\n", gen);
        same_block(start, (size_t)(end + 1 - start), first, want);
        free(want);
    }
    free(gen);
    free(readme);
    unlink(out);
    rmdir(dir);
    return CHECK_DONE();
}
