/* tests/test_sim_decoders.c -- no msgpack reader trusts a declared size. msgpack-c allocates an
 * array's or map's objects for the count its header declares before it looks at the data, so a
 * 5-byte header declaring 2^32-1 elements made it ask for 64 GB (an abort under ASan) and 2^28
 * cost a gigabyte; every reader must refuse both at once with an error, and still read what is
 * valid:
 *   - the guard itself (nn_msgpack_check): every header kind declaring 2^32-1 or 2^28 elements or
 *     bytes, at the top and nested, 16-bit headers, every truncation of a valid object, 0xc1,
 *     nesting depth, and valid objects measured exactly as msgpack-c reads them;
 *   - job and result frames (sim_frame_serve, sim_frame_take_result), parameter messages
 *     (nn_unpack_params), every algorithm's down, up and private-state readers, the checkpoint
 *     loader (a file with a valid trailer, and a payload in memory), and the event log reader;
 *   - `fedsim events` ($FEDSIM_BIN) on random bytes and on a truncated log exits 2 naming the byte
 *     offset (the truncated one after listing the records before the cut), on a valid log 0. */
#include "algos/algo.h"
#include "nn/pack.h"
#include "sim/checkpoint.h"
#include "sim/engine.h"
#include "sim/events.h"
#include "sim/frame.h"
#include "sim/rng.h"
#include "sim/scenario.h"
#include "tests/algos.h"
#include "tests/check.h"
#include "tests/files.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

/* A header declaring n elements (array, map) or bytes (str, bin, ext) with a 32-bit length, then
 * 16 zero bytes (so the data is not empty), into out; returns its length. */
static size_t bomb(unsigned char *out, unsigned char type, uint32_t n)
{
    size_t k = 0;
    out[k++] = type;
    for (int s = 24; s >= 0; s -= 8)
        out[k++] = (unsigned char)(n >> s);
    if (type == 0xc9) out[k++] = 1; /* ext 32: its type byte */
    memset(out + k, 0, 16);
    return k + 16;
}

static const unsigned char bomb_types[] = {0xdd, 0xdf, 0xdb, 0xc6, 0xc9};
static const uint32_t bomb_counts[] = {0xffffffffu, 1u << 28};

/* Calls f(bytes, len, label) for every bomb: each kind and count, at the top and nested as the
 * third element of an array (where a reader's own fields would be). */
static void each_bomb(void (*f)(const unsigned char *, size_t, const char *))
{
    for (size_t t = 0; t < sizeof bomb_types; t++)
        for (int c = 0; c < 2; c++) {
            unsigned char b[32], nested[40] = {0x93, 0x00, 0x00};
            size_t n = bomb(b, bomb_types[t], bomb_counts[c]);
            memcpy(nested + 3, b, n);
            char label[64];
            snprintf(label, sizeof label, "0x%02x declaring %u", bomb_types[t], bomb_counts[c]);
            f(b, n, label);
            snprintf(label, sizeof label, "nested 0x%02x declaring %u", bomb_types[t],
                     bomb_counts[c]);
            f(nested, n + 3, label);
        }
}

/* A valid object of every kind msgpack has: a map of str, bin, ext, ints, floats, nil, bools and
 * nested arrays. */
static void valid_object(msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    nn_pack_str(&pk, "ints");
    msgpack_pack_array(&pk, 8);
    msgpack_pack_int(&pk, 1);
    msgpack_pack_int(&pk, -1);
    msgpack_pack_int(&pk, 200);
    msgpack_pack_int(&pk, -200);
    msgpack_pack_int(&pk, 70000);
    msgpack_pack_int64(&pk, -5000000000LL);
    msgpack_pack_uint64(&pk, 1ULL << 63);
    msgpack_pack_nil(&pk);
    nn_pack_str(&pk, "floats");
    msgpack_pack_array(&pk, 4);
    msgpack_pack_float(&pk, 1.5f);
    msgpack_pack_double(&pk, 2.5);
    msgpack_pack_true(&pk);
    msgpack_pack_false(&pk);
    nn_pack_str(&pk, "bin");
    static const unsigned char bytes[300] = {1, 2, 3};
    msgpack_pack_bin(&pk, sizeof bytes);
    msgpack_pack_bin_body(&pk, bytes, sizeof bytes);
    nn_pack_str(&pk, "ext");
    msgpack_pack_array(&pk, 3);
    msgpack_pack_ext(&pk, 1, 5);
    msgpack_pack_ext_body(&pk, bytes, 1);
    msgpack_pack_ext(&pk, 16, 5);
    msgpack_pack_ext_body(&pk, bytes, 16);
    msgpack_pack_ext(&pk, 20, 5);
    msgpack_pack_ext_body(&pk, bytes, 20);
    nn_pack_str(&pk, "nested");
    msgpack_pack_array(&pk, 2);
    msgpack_pack_array(&pk, 0);
    msgpack_pack_map(&pk, 1);
    nn_pack_str(&pk, "a");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_str(&pk, 40);
    msgpack_pack_str_body(&pk, bytes, 40);
}

static void check_bomb(const unsigned char *b, size_t n, const char *label)
{
    size_t end;
    int more = 0;
    sim_err err = {0};
    CHECK_MSG(nn_msgpack_check(b, n, 100, &end, &more, "m", &err) == SIM_EFORMAT, "%s", label);
    CHECK_MSG(more == 1 && strstr(err.msg, "declares") && !strcmp(err.file, "m"), "%s: %s", label,
              err.msg);
    /* the offset is the stream's: base 100 plus the header's position */
    const char *at = b[0] == 0x93 ? "byte 103:" : "byte 100:";
    CHECK_MSG(!strncmp(err.msg, at, strlen(at)), "%s: %s", label, err.msg);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK_MSG(nn_msgpack_next(&u, b, n, &off, "m", &err) == SIM_EFORMAT && off == 0, "%s", label);
    msgpack_unpacked_destroy(&u);
}

static void test_check(void)
{
    each_bomb(check_bomb);
    /* 16-bit counts, and counts that fit exactly or by one byte too many */
    size_t end;
    int more;
    sim_err err = {0};
    static const unsigned char a16[] = {0xdc, 0xff, 0xff, 0, 0, 0};
    CHECK(nn_msgpack_check(a16, sizeof a16, 0, &end, &more, "m", &err) == SIM_EFORMAT && more);
    static const unsigned char fit[] = {0x93, 1, 2, 3}, over[] = {0x94, 1, 2, 3},
                               mapover[] = {0x82, 1, 2, 3}, strfit[] = {0xa3, 'a', 'b', 'c'},
                               strover[] = {0xa4, 'a', 'b', 'c'};
    CHECK(nn_msgpack_check(fit, 4, 0, &end, &more, "m", &err) == SIM_OK && end == 4);
    CHECK(nn_msgpack_check(over, 4, 0, &end, &more, "m", &err) == SIM_EFORMAT && more);
    CHECK(nn_msgpack_check(mapover, 4, 0, &end, &more, "m", &err) == SIM_EFORMAT && more);
    CHECK(nn_msgpack_check(strfit, 4, 0, &end, &more, "m", &err) == SIM_OK && end == 4);
    CHECK(nn_msgpack_check(strover, 4, 0, &end, &more, "m", &err) == SIM_EFORMAT && more);
    /* the byte msgpack never uses: no more bytes can help */
    static const unsigned char c1[] = {0x91, 0xc1};
    CHECK(nn_msgpack_check(c1, 2, 0, &end, &more, "m", &err) == SIM_EFORMAT && !more);
    CHECK_MSG(strstr(err.msg, "byte 1:") == err.msg, "%s", err.msg);
    /* nesting: msgpack-c's own limit passes, one more level is refused */
    unsigned char deep[NN_MSGPACK_DEPTH + 2];
    memset(deep, 0x91, sizeof deep);
    deep[NN_MSGPACK_DEPTH] = 0x00;
    CHECK(nn_msgpack_check(deep, NN_MSGPACK_DEPTH + 1, 0, &end, &more, "m", &err) == SIM_OK &&
          end == NN_MSGPACK_DEPTH + 1);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    CHECK(nn_msgpack_next(&u, deep, NN_MSGPACK_DEPTH + 1, &off, "m", &err) == SIM_OK);
    deep[NN_MSGPACK_DEPTH] = 0x91, deep[NN_MSGPACK_DEPTH + 1] = 0x00;
    CHECK(nn_msgpack_check(deep, sizeof deep, 0, &end, &more, "m", &err) == SIM_EFORMAT && !more);
    CHECK_MSG(strstr(err.msg, "nested"), "%s", err.msg);

    /* a valid object is measured exactly, as msgpack-c reads it, even with bytes after it */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    valid_object(&sb);
    size_t len = sb.size;
    msgpack_sbuffer_write(&sb, "\x01\x02", 2);
    CHECK(nn_msgpack_check(sb.data, sb.size, 0, &end, &more, "m", &err) == SIM_OK && end == len);
    off = 0;
    CHECK(nn_msgpack_next(&u, sb.data, sb.size, &off, "m", &err) == SIM_OK && off == len);
    CHECK(u.data.type == MSGPACK_OBJECT_MAP && u.data.via.map.size == 5);
    /* every truncation is refused as one more bytes could complete */
    int caught = 0;
    for (size_t cut = 0; cut < len; cut++)
        caught += nn_msgpack_check(sb.data, cut, 0, &end, &more, "m", &err) == SIM_EFORMAT && more;
    CHECK_EQ_I64(caught, (long long)len);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

/* ---------------------------------------------------------------------------------------- */
/* frames and parameter messages */

static void frame_bomb(const unsigned char *b, size_t n, const char *label)
{
    sim_job_out o;
    memset(&o, 0, sizeof o);
    fl_result_init(&o.res);
    const char *why = NULL;
    CHECK_MSG(sim_frame_take_result(b, n, 0, 0, &o, &why) == SIM_EFORMAT && why, "result %s",
              label);
    fl_result_destroy(&o.res);
    /* a malformed job is refused before the algorithm, the environment or the worker is used */
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    CHECK_MSG(sim_frame_serve(&fl_fedavg, NULL, NULL, 0, 0, 1, b, n, &out) == SIM_EFORMAT, "job %s",
              label);
    msgpack_sbuffer_destroy(&out);
}

static nn_arch params_arch;

static void params_bomb(const unsigned char *b, size_t n, const char *label)
{
    float *p = sim_xcalloc(params_arch.layout.n_floats, sizeof(float));
    sim_err err = {0};
    CHECK_MSG(nn_unpack_params(p, &params_arch, b, n, "msg", &err) == SIM_EFORMAT, "%s", label);
    CHECK_MSG(strstr(err.msg, "declares") && !strcmp(err.file, "msg"), "%s: %s", label, err.msg);
    free(p);
}

static void test_frames_params(void)
{
    each_bomb(frame_bomb);
    /* a valid result frame (a failed job's) is taken, each of its truncations refused */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, 5);
    msgpack_pack_int(&pk, 1);
    msgpack_pack_int(&pk, 3);
    msgpack_pack_int(&pk, 2);
    msgpack_pack_int(&pk, SIM_EINVAL);
    nn_pack_str(&pk, "no such thing");
    int refused = 0;
    for (size_t cut = 0; cut <= sb.size; cut++) {
        sim_job_out o;
        memset(&o, 0, sizeof o);
        fl_result_init(&o.res);
        const char *why;
        int rc = sim_frame_take_result(sb.data, cut, 3, 2, &o, &why);
        if (cut == sb.size)
            CHECK(rc == SIM_OK && o.rc == SIM_EINVAL && !strcmp(o.err.msg, "no such thing"));
        else
            refused += rc == SIM_EFORMAT;
        fl_result_destroy(&o.res);
    }
    CHECK_EQ_I64(refused, (long long)sb.size);
    msgpack_sbuffer_destroy(&sb);

    sim_err err = {0};
    CHECK(nn_arch_build(&params_arch, "cnn2", 1, 28, 28, 10, &err) == SIM_OK);
    each_bomb(params_bomb);
    /* the bomb as a key's value of the map the reader expects */
    unsigned char m[48] = {0x81, 0xa4, 'd', 'a', 't', 'a'};
    size_t n = 6 + bomb(m + 6, 0xdd, 0xffffffffu);
    params_bomb(m, n, "\"data\": 2^32-1 elements");
}

/* ---------------------------------------------------------------------------------------- */
/* every algorithm's messages and private states */

static int load_tiny(sim_scenario *sc, const char *const *sets, int n_sets)
{
    sim_err err = {0};
    int rc = sim_scenario_load(sc, "scenarios/tiny.yaml", sets, n_sets, &err);
    CHECK_MSG(rc == SIM_OK, "tiny.yaml: %s", err.msg);
    return rc;
}

static void test_algos(void)
{
    unsigned char b[2][32];
    size_t bn[2] = {bomb(b[0], 0xdd, 0xffffffffu), bomb(b[1], 0xdf, 1u << 28)};
    for (int i = 0; fl_algos[i]; i++) {
        const fl_algo *a = fl_algos[i];
        char set[80];
        snprintf(set, sizeof set, "algorithm.name=%s", a->name);
        const char *sets[] = {set};
        sim_scenario sc;
        if (load_tiny(&sc, sets, 1)) continue;
        const fl_env *env = &sc.spec.env;
        sim_err err = {0};
        void *server = a->server_new(env, &err);
        CHECK_MSG(server, "%s: %s", a->name, err.msg);
        fl_worker w;
        fl_worker_init(&w);
        msgpack_sbuffer down;
        msgpack_sbuffer_init(&down);
        a->job_down(server, 1, 0, &down);
        nn_model m;
        nn_model_init(&m, env->arch, 64);
        for (int k = 0; k < 2; k++) {
            /* a down message that is a bomb, then a private state that is one (with a valid
             * down): a job that reads it fails; one that does not (no message, no state) may
             * train, and what it sends is its own */
            fl_job jobs[2] = {{1, 0, b[k], bn[k], NULL, 0, 1u << 20 | 1},
                              {1, 0, down.data, down.size, b[k], bn[k], 1u << 20 | 2}};
            for (int j = 0; j < 2; j++) {
                fl_result res;
                fl_result_init(&res);
                int rc = a->client_train(env, &jobs[j], &w, &res, &err);
                if (j == 0 && down.size)
                    CHECK_MSG(rc == SIM_EFORMAT, "%s: a bombed down message is refused", a->name);
                fl_result_destroy(&res);
            }
            /* an upload that is a bomb is refused by every algorithm that takes uploads (those
             * without a global model send nothing) */
            int rc = a->server_absorb(server, 1, b[k], bn[k], 1, 1, &err);
            CHECK_MSG(rc == SIM_EFORMAT || !(a->flags & FL_HAS_GLOBAL),
                      "%s: a bombed upload is refused (%d)", a->name, rc);
            /* evaluation on a bombed private state falls back or fails, without allocating */
            a->eval_params(server, 1, b[k], bn[k], &m);
            if (a->eval_client) {
                int32_t idx[4] = {0, 1, 2, 3};
                double density;
                a->eval_client(server, 1, b[k], bn[k], env->test, idx, 4, &m, &density);
            }
        }
        nn_model_destroy(&m);
        msgpack_sbuffer_destroy(&down);
        fl_worker_destroy(&w);
        a->server_free(server);
        sim_scenario_destroy(&sc);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* checkpoints and event logs, from a real run of the tiny scenario */

static void run_tiny_into(const char *out, int stop_after)
{
    sim_scenario sc;
    if (load_tiny(&sc, NULL, 0)) return;
    sc.spec.out_dir = out;
    sc.spec.quiet = 1;
    sc.spec.stop_after_round = stop_after;
    sim_engine *e;
    sim_err err = {0};
    int rc = sim_engine_new(&e, &sc.spec, &err);
    if (!rc) {
        rc = sim_engine_run(e, &err);
        sim_engine_free(e);
    }
    CHECK_MSG(rc == SIM_OK, "tiny run: %s", err.msg);
    sim_scenario_destroy(&sc);
}

/* Resume the tiny scenario from the payload (in memory when file is 0, else written as out's
 * checkpoint file); returns the status and err. */
static int resume_from(const char *out, const void *payload, size_t len, int file, sim_err *err)
{
    sim_scenario sc;
    if (load_tiny(&sc, NULL, 0)) return SIM_EINVAL;
    sc.spec.quiet = 1;
    sc.spec.resume = 1;
    if (file) {
        char path[200];
        snprintf(path, sizeof path, "%s/checkpoint.msgpack", out);
        CHECK(sim_checkpoint_write(path, payload, len, err) == SIM_OK);
        sc.spec.out_dir = out;
    } else {
        sc.spec.resume_payload = payload;
        sc.spec.resume_len = len;
    }
    sim_engine *e = NULL;
    int rc = sim_engine_new(&e, &sc.spec, err);
    sim_engine_free(e);
    sim_scenario_destroy(&sc);
    return rc;
}

static void test_checkpoint(void)
{
    char out[128], path[200];
    snprintf(out, sizeof out, "%s/ck", dir);
    mkdir(out, 0755);
    run_tiny_into(out, 2);
    snprintf(path, sizeof path, "%s/checkpoint.msgpack", out);
    void *payload = NULL;
    size_t len = 0;
    sim_err err = {0};
    CHECK_MSG(sim_checkpoint_read(path, &payload, &len, &err) == SIM_OK, "%s", err.msg);
    if (!payload) return;
    /* the real payload resumes from memory; its truncations are refused */
    CHECK_MSG(resume_from(out, payload, len, 0, &err) == SIM_OK, "%s", err.msg);
    int refused = 0, tries = 0;
    for (size_t cut = 0; cut < len; cut += len / 37 + 1, tries++)
        refused += resume_from(out, payload, cut, 0, &err) == SIM_EFORMAT;
    CHECK_EQ_I64(refused, tries);
    /* bombs, at the top and as the field after the magic and version, from memory and from a
     * file whose trailer is valid; the file is named */
    unsigned char b[64] = {0x93, 0xb1};
    memcpy(b + 2, "fedsim-checkpoint", 17);
    b[19] = 0x05;
    for (int c = 0; c < 2; c++)
        for (int nested = 0; nested < 2; nested++)
            for (int file = 0; file < 2; file++) {
                size_t n = nested ? 20 + bomb(b + 20, 0xdd, bomb_counts[c])
                                  : bomb(b, 0xdf, bomb_counts[c]);
                int rc = resume_from(out, b, n, file, &err);
                CHECK_MSG(rc == SIM_EFORMAT && strstr(err.msg, "declares"),
                          "checkpoint bomb %d/%d/%d: %s", c, nested, file, err.msg);
                CHECK(!file || strstr(err.file, "checkpoint.msgpack"));
                if (!nested) b[0] = 0x93, b[1] = 0xb1; /* restore the prefix */
            }
    free(payload);
}

/* Run the fedsim binary's events command on path; returns the exit status, stdout and stderr. */
static int events_cli(const char *path, char **out, char **errs)
{
    const char *bin = getenv("FEDSIM_BIN");
    if (!bin) bin = "build/test/fedsim";
    char cmd[600], o[128], e[128];
    snprintf(o, sizeof o, "%s/ev.out", dir);
    snprintf(e, sizeof e, "%s/ev.err", dir);
    snprintf(cmd, sizeof cmd, "%s events %s >%s 2>%s", bin, path, o, e);
    int st = system(cmd);
    size_t n;
    *out = test_slurp(o, &n);
    *errs = test_slurp(e, &n);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
}

static void test_events(void)
{
    char out[128], path[200];
    snprintf(out, sizeof out, "%s/ev", dir);
    mkdir(out, 0755);
    run_tiny_into(out, 0);
    snprintf(path, sizeof path, "%s/events.msgpack", out);
    size_t len;
    unsigned char *log = (unsigned char *)test_slurp(path, &len);
    CHECK(log && len > 100);
    if (!log) return;
    /* the whole log: every record listed, from memory, from a stream and by the command */
    char *txt = NULL;
    size_t tn = 0;
    FILE *mem = open_memstream(&txt, &tn);
    sim_err err = {0};
    CHECK_MSG(sim_events_list_buf(log, len, "log", mem, &err) == SIM_OK, "%s", err.msg);
    fclose(mem);
    int lines = count_lines(txt);
    CHECK(lines > 20 && strstr(txt, "upload_done") && strstr(txt, "aggregate"));
    FILE *in = fopen(path, "rb");
    char *txt2 = NULL;
    mem = open_memstream(&txt2, &tn);
    CHECK(in && sim_events_list(in, "log", mem, &err) == SIM_OK);
    fclose(mem);
    if (in) fclose(in);
    CHECK(txt2 && !strcmp(txt, txt2));
    free(txt2);
    char *so, *se;
    CHECK(events_cli(out, &so, &se) == 0 && so && !strcmp(so, txt));
    free(so), free(se);

    /* truncated inside the last record: the records before it are listed, then the error names
     * the offset where that record starts */
    size_t last = 0, end;
    for (size_t at = 0; at < len; at += end) { /* where the last object starts */
        last = at;
        int more;
        if (nn_msgpack_check(log + at, len - at, at, &end, &more, "log", &err)) break;
    }
    CHECK(last > 0 && log[last] == 0x96); /* a record: an array of 6 */
    for (size_t cut = last + 1; cut < len; cut += 7) {
        mem = open_memstream(&txt2, &tn);
        CHECK(sim_events_list_buf(log, cut, "log", mem, &err) == SIM_EFORMAT);
        fclose(mem);
        char want[40];
        snprintf(want, sizeof want, "byte %zu:", last);
        CHECK_MSG(strstr(err.msg, want) == err.msg, "cut at %zu: %s", cut, err.msg);
        CHECK_EQ_I64(count_lines(txt2), lines - 1);
        free(txt2);
    }
    char cut_path[200];
    snprintf(cut_path, sizeof cut_path, "%s/cut.msgpack", dir);
    write_bytes(cut_path, log, last + 3);
    int st = events_cli(cut_path, &so, &se);
    char want[80];
    snprintf(want, sizeof want, "cut.msgpack: byte %zu:", last);
    CHECK_MSG(st == 2 && se && strstr(se, want), "truncated log: exit %d, %s", st, se);
    CHECK_EQ_I64(count_lines(so), lines - 1);
    free(so), free(se);

    /* random bytes are no event log: exit 2, an offset named, nothing listed */
    sim_rng r;
    sim_rng_seed(&r, 5, SIM_RNG_TEST, 0);
    for (int k = 0; k < 4; k++) {
        unsigned char rnd[4096];
        for (size_t i = 0; i < sizeof rnd; i++)
            rnd[i] = (unsigned char)sim_rng_u64(&r);
        CHECK(sim_events_list_buf(rnd, sizeof rnd, "rnd", NULL, &err) == SIM_EFORMAT);
        char rp[200];
        snprintf(rp, sizeof rp, "%s/random.msgpack", dir);
        write_bytes(rp, rnd, sizeof rnd);
        st = events_cli(rp, &so, &se);
        CHECK_MSG(st == 2 && se && strstr(se, "random.msgpack: byte "), "random bytes: exit %d, %s",
                  st, se);
        CHECK(so && !*so);
        free(so), free(se);
    }
    /* empty, and bombs as the header or after a valid prefix; the offset is the bomb's */
    CHECK(sim_events_list_buf(log, 0, "log", NULL, &err) == SIM_EFORMAT);
    unsigned char *bad = sim_xmalloc(len + 64);
    for (int c = 0; c < 2; c++) {
        size_t n = bomb(bad, 0xdd, bomb_counts[c]);
        CHECK(sim_events_list_buf(bad, n, "log", NULL, &err) == SIM_EFORMAT);
        CHECK_MSG(strstr(err.msg, "byte 0:") == err.msg, "%s", err.msg);
        memcpy(bad, log, last);
        n = last + bomb(bad + last, 0xdf, bomb_counts[c]);
        CHECK(sim_events_list_buf(bad, n, "log", NULL, &err) == SIM_EFORMAT);
        snprintf(want, sizeof want, "byte %zu:", last);
        CHECK_MSG(strstr(err.msg, want) == err.msg, "%s", err.msg);
        write_bytes(cut_path, bad, n);
        st = events_cli(cut_path, &so, &se);
        CHECK_MSG(st == 2 && se && strstr(se, want), "bomb in a log: exit %d, %s", st, se);
        free(so), free(se);
    }
    free(bad);
    free(txt);
    free(log);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/fedsim-decoders-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    test_check();
    test_frames_params();
    test_algos();
    test_checkpoint();
    test_events();
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
