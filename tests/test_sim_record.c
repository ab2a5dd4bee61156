/* tests/test_sim_record.c -- field tables (sim/record.h), the writer and reader of the engine's
 * checkpoint records: a record of every kind, extreme values included, round-trips (write, read,
 * write gives the same bytes and the same struct), a list of them too; each field that is of
 * another type, out of its range (a constant one, or relative to what the reader knows), a
 * message whose length disagrees with its content, or a record one element short, is refused
 * naming that field, and blobs read before the refusal stay owned by the struct (the leak
 * checker sees a lost or doubly freed one).
 */
#include "sim/record.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

typedef struct rec {
    int i;
    int32_t small;
    int64_t big;
    uint64_t u;
    double d;
    void *blob;
    size_t blob_len;
    void *msg;
    size_t msg_len;
    uint64_t w[3];
} rec;

enum { BY_LIMIT = 1 }; /* lim[BY_LIMIT]: i's upper bound, known only when reading */

static const sim_field fields[] = {
        {"i", SIM_F_INT, offsetof(rec, i), sizeof(int), 0, {0, -5}, {BY_LIMIT, -1}},
        {"small", SIM_F_INT, offsetof(rec, small), 4, 0, {0, INT32_MIN}, {0, INT32_MAX}},
        {"big", SIM_F_INT, offsetof(rec, big), 8, 0, {0, INT64_MIN}, {0, INT64_MAX}},
        {"u", SIM_F_U64, offsetof(rec, u), 8, 0, {0, 0}, {0, 0}},
        {"d", SIM_F_F64, offsetof(rec, d), 8, 0, {0, 0}, {0, 0}},
        {"blob",
         SIM_F_BLOB,
         offsetof(rec, blob),
         sizeof(void *),
         offsetof(rec, blob_len),
         {0, 0},
         {0, 0}},
        {"msg",
         SIM_F_MSG,
         offsetof(rec, msg),
         sizeof(void *),
         offsetof(rec, msg_len),
         {0, 0},
         {0, 0}},
        {"w", SIM_F_WORDS, offsetof(rec, w), sizeof(uint64_t[3]), 0, {0, 0}, {0, 0}},
};
enum { NF = sizeof fields / sizeof fields[0] };
static const int64_t lim[2] = {0, 10};

static void pack(msgpack_sbuffer *sb, const rec *r)
{
    msgpack_sbuffer_init(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    sim_record_pack(&pk, fields, NF, r);
}

static void rec_free(rec *r)
{
    free(r->blob);
    free(r->msg);
}

/* a: a record whose message has a length but no content (a cost-only run's), b: the other way */
static const char blob_bytes[] = "\x00\x01\xfe\xff";
static rec sample(int which)
{
    rec r = {9, INT32_MIN, INT64_MIN, UINT64_MAX, -0.0, malloc(4), 4, NULL, 7, {0, 1, UINT64_MAX}};
    memcpy(r.blob, blob_bytes, 4);
    if (which) {
        r.i = -5, r.small = INT32_MAX, r.big = INT64_MAX, r.u = 0, r.d = 1e300;
        free(r.blob);
        r.blob = NULL, r.blob_len = 0;
        r.msg = malloc(3), r.msg_len = 3;
        memcpy(r.msg, "abc", 3);
    }
    return r;
}

static void test_round_trip(void)
{
    for (int which = 0; which < 2; which++) {
        rec a = sample(which), b = {0};
        msgpack_sbuffer s1, s2;
        pack(&s1, &a);
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        CHECK(msgpack_unpack_next(&u, s1.data, s1.size, NULL) == MSGPACK_UNPACK_SUCCESS);
        CHECK(u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == NF + 1);
        const char *bad = sim_record_read(&u.data, fields, NF, &b, lim);
        CHECK_MSG(!bad, "sample %d reads back (refused at %s)", which, bad ? bad : "");
        CHECK(a.i == b.i && a.small == b.small && a.big == b.big && a.u == b.u);
        CHECK(memcmp(&a.d, &b.d, sizeof a.d) == 0); /* -0.0 stays -0.0 */
        CHECK(a.blob_len == b.blob_len &&
              (a.blob ? b.blob && !memcmp(a.blob, b.blob, a.blob_len) : !b.blob));
        CHECK(a.msg_len == b.msg_len &&
              (a.msg ? b.msg && !memcmp(a.msg, b.msg, a.msg_len) : !b.msg));
        CHECK(!memcmp(a.w, b.w, sizeof a.w));
        pack(&s2, &b);
        CHECK_MSG(s1.size == s2.size && !memcmp(s1.data, s2.data, s1.size),
                  "sample %d: write, read, write gives the same bytes", which);
        msgpack_unpacked_destroy(&u);
        msgpack_sbuffer_destroy(&s1);
        msgpack_sbuffer_destroy(&s2);
        rec_free(&a);
        rec_free(&b);
    }

    /* a list: both samples, stride apart, read back one by one */
    rec two[2] = {sample(0), sample(1)}, back[2] = {{0}};
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    sim_record_pack_list(&pk, fields, NF, two, sizeof two[0], 2);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CHECK(msgpack_unpack_next(&u, sb.data, sb.size, NULL) == MSGPACK_UNPACK_SUCCESS);
    CHECK(u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size == 2);
    for (int i = 0; i < 2 && u.data.type == MSGPACK_OBJECT_ARRAY; i++) {
        CHECK(!sim_record_read(&u.data.via.array.ptr[i], fields, NF, &back[i], lim));
        CHECK(back[i].i == two[i].i && back[i].big == two[i].big &&
              back[i].msg_len == two[i].msg_len);
    }
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    for (int i = 0; i < 2; i++)
        rec_free(&two[i]), rec_free(&back[i]);
}

/* Read sample 0 with element k of its record replaced by v (or, v NULL, the record one element
 * short); what the reader refused, "" for nothing. */
static const char *read_changed(uint32_t k, const msgpack_object *v)
{
    static char got[64];
    rec a = sample(0), b = {0};
    msgpack_sbuffer sb;
    pack(&sb, &a);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    msgpack_unpack_next(&u, sb.data, sb.size, NULL);
    if (v)
        u.data.via.array.ptr[k] = *v;
    else
        u.data.via.array.size--;
    const char *bad = sim_record_read(&u.data, fields, NF, &b, lim);
    snprintf(got, sizeof got, "%s", bad ? bad : "");
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    rec_free(&a);
    rec_free(&b); /* what was read before the refusal is b's */
    return got;
}

static msgpack_object int_obj(int64_t v)
{
    msgpack_object o = {.type = v < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER
                                      : MSGPACK_OBJECT_POSITIVE_INTEGER};
    if (v < 0)
        o.via.i64 = v;
    else
        o.via.u64 = (uint64_t)v;
    return o;
}

static void test_refusals(void)
{
    /* each element of another type: a string where anything else was */
    msgpack_object str = {.type = MSGPACK_OBJECT_STR};
    str.via.str.ptr = "x";
    str.via.str.size = 1;
    /* the record's elements: i small big u d blob msg msg_len w */
    static const char *const owner[] = {"i", "small", "big", "u", "d", "blob", "msg", "msg", "w"};
    for (uint32_t k = 0; k < NF + 1; k++) {
        const char *got = read_changed(k, &str);
        CHECK_MSG(!strcmp(got, owner[k]), "a string at element %u: refused at '%s', want '%s'", k,
                  got, owner[k]);
    }
    /* ranges: i in [-5, lim - 1], the upper bound the reader's */
    msgpack_object v = int_obj(9);
    CHECK(!strcmp(read_changed(0, &v), ""));
    v = int_obj(10);
    CHECK_MSG(!strcmp(read_changed(0, &v), "i"), "i = 10 is past lim - 1");
    v = int_obj(-5);
    CHECK(!strcmp(read_changed(0, &v), ""));
    v = int_obj(-6);
    CHECK_MSG(!strcmp(read_changed(0, &v), "i"), "i = -6 is below -5");
    v = int_obj((int64_t)INT32_MAX + 1);
    CHECK_MSG(!strcmp(read_changed(1, &v), "small"), "small past INT32_MAX");
    v = int_obj(-1);
    CHECK_MSG(!strcmp(read_changed(3, &v), "u"), "u negative");
    /* a message's content (3 bytes) and its length (7) disagree */
    msgpack_object bin = {.type = MSGPACK_OBJECT_BIN};
    bin.via.bin.ptr = "abc";
    bin.via.bin.size = 3;
    CHECK_MSG(!strcmp(read_changed(6, &bin), "msg"), "a message whose length is not its size");
    v = int_obj(3);
    CHECK(!strcmp(read_changed(7, &v), "")); /* nil content, any length */
    /* words: 3 of them, no fewer */
    msgpack_object w = {.type = MSGPACK_OBJECT_ARRAY};
    w.via.array.size = 2;
    w.via.array.ptr = &v;
    CHECK(!strcmp(read_changed(8, &w), "w"));
    /* one element short, and not an array at all */
    CHECK(!strcmp(read_changed(0, NULL), "the field count"));
    rec b = {0};
    CHECK(!strcmp(sim_record_read(&str, fields, NF, &b, lim), "the field count"));
}

int main(void)
{
    test_round_trip();
    test_refusals();
    return CHECK_DONE();
}
