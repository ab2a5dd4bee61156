/* tests/fuzz/replay.c -- `make test`'s stand-in for libFuzzer: feeds every file of a fuzz corpus
 * to one harness's LLVMFuzzerTestOneInput, so the committed corpora (and every crash `make fuzz`
 * kept) are replayed under gcc's ASan/UBSan without clang.
 *
 * Linked with tests/fuzz/fuzz_<name>.c as build/<mode>/tests/fuzz/replay_<name>, it replays
 * tests/fuzz/corpus/<name>/ (the name comes from argv[0]; arguments, files or folders, replace
 * the default). Files go in name order, each announced before it runs so that a crash's log names
 * it. A sanitizer report or a broken invariant aborts the process, which tests/run.sh counts as a
 * crashed test; a corpus that is missing, empty or unreadable counts as failed.
 */
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int passed, failed;

static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL %s: cannot open: %s\n", path, strerror(errno));
        failed++;
        return;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        printf("FAIL %s: cannot read\n", path);
        free(buf);
        failed++;
        return;
    }
    printf("replay %s (%zu bytes)\n", path, n);
    fflush(stdout);
    /* an exact-size copy, so that ASan sees a read past the input's end */
    uint8_t *in = malloc(n ? n : 1);
    if (n) memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    passed++;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        printf("FAIL %s: cannot open the corpus: %s\n", dir, strerror(errno));
        failed++;
        return;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (!n) {
        printf("FAIL %s: the corpus is empty\n", dir);
        failed++;
    }
    qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        replay_file(names[i]);
        free(names[i]);
    }
    free(names);
}

static void replay(const char *path)
{
    struct stat st;
    if (!stat(path, &st) && S_ISDIR(st.st_mode))
        replay_dir(path);
    else
        replay_file(path);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            replay(argv[i]);
    } else {
        const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
        const char *name = strncmp(base, "replay_", 7) ? base : base + 7;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", FEDSIM_ROOT, name);
        replay(dir);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
