/* tests/test_nn_compress.c -- update compression's codec (nn/compress.h): every scheme's round
 * trip (exact where it keeps values, within the scheme's own bound otherwise), qsgd's and randk's
 * unbiasedness over many draws against their known variances, topk's two index encodings each
 * chosen where it is the smaller, the length computed without encoding against the real one, and
 * malformed or cut messages refused. */
#include "nn/compress.h"
#include "nn/pack.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

static void fill(float *x, size_t n, sim_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)sim_rng_normal(r);
}

/* Encode x by c, decode it back into dec; returns the message's length (0: decode failed). The
 * encoder's `sent` must be what the decoder reads, bit for bit. */
static size_t round_trip(const nn_comp *c, const float *x, size_t n, sim_rng *r, float *dec,
                         msgpack_sbuffer *keep)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    float *sent = sim_xmalloc((n + 1) * sizeof(float));
    nn_comp_encode(&sb, c, x, n, r, sent);
    sim_err err = {0};
    size_t used = 0;
    int rc = nn_comp_decode_buf(dec, n, sb.data, sb.size, &used, "msg", &err);
    CHECK_MSG(rc == SIM_OK, "%s n=%zu: %s", nn_comp_names[c->scheme], n, err.msg);
    CHECK_EQ_I64(used, sb.size);
    CHECK_MSG(!rc && !memcmp(sent, dec, n * sizeof(float)), "%s: decoded != sent",
              nn_comp_names[c->scheme]);
    size_t len = rc ? 0 : sb.size;
    if (keep) {
        keep->size = 0;
        msgpack_sbuffer_write(keep, sb.data, sb.size);
    }
    free(sent);
    msgpack_sbuffer_destroy(&sb);
    return len;
}

static void test_casts(void)
{
    /* every half and bfloat16 that is not NaN survives the cast back exactly; NaN stays NaN */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nn_f16_to_f32((uint16_t)h), g = nn_bf16_to_f32((uint16_t)h);
        if (isnan(f) ? !isnan(nn_f16_to_f32(nn_f32_to_f16(f))) : nn_f32_to_f16(f) != h) bad16++;
        if (isnan(g) ? !isnan(nn_bf16_to_f32(nn_f32_to_bf16(g))) : nn_f32_to_bf16(g) != h) badbf++;
    }
    CHECK_EQ_I64(bad16, 0);
    CHECK_EQ_I64(badbf, 0);
    /* round to nearest, ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    CHECK(nn_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);
    CHECK(nn_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
    CHECK(nn_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
    CHECK(nn_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(nn_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(nn_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(nn_f32_to_f16(-1e30f) == 0xfc00);
    CHECK(nn_f32_to_f16(0x1p-24f) == 0x0001);     /* the smallest subnormal */
    CHECK(nn_f32_to_f16(0x1p-25f) == 0x0000);     /* half of it: ties to even, 0 */
    CHECK(nn_f32_to_f16(0x3p-25f) == 0x0002);     /* 1.5 of it: ties to even, 2 */
    CHECK(nn_f32_to_f16(0x1.ffcp-15f) == 0x0400); /* rounds up into the smallest normal */
    CHECK(nn_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
    CHECK(nn_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
    CHECK(nn_f32_to_bf16(3.4e38f) == 0x7f80); /* rounds to inf */
}

static void test_round_trips(sim_rng *r)
{
    const size_t sizes[] = {1, 7, 8, 9, 100, 1000, 5000};
    for (size_t si = 0; si < SIM_ARRAY_LEN(sizes); si++) {
        size_t n = sizes[si];
        float *x = sim_xmalloc(n * sizeof(float)), *d = sim_xmalloc(n * sizeof(float));
        fill(x, n, r);
        /* topk: the kept values exact at their indices, and no dropped value larger */
        nn_comp c = {NN_COMP_TOPK, 0.1, 0, 1};
        size_t k = nn_comp_k(&c, n), kept = 0;
        round_trip(&c, x, n, r, d, NULL);
        float minkept = INFINITY, maxdrop = 0;
        for (size_t i = 0; i < n; i++) {
            if (d[i] != 0) {
                kept++;
                CHECK(d[i] == x[i]);
                if (fabsf(x[i]) < minkept) minkept = fabsf(x[i]);
            } else if (fabsf(x[i]) > maxdrop) {
                maxdrop = fabsf(x[i]);
            }
        }
        CHECK_EQ_I64(kept, k);
        CHECK_MSG(maxdrop <= minkept, "topk n=%zu dropped %g above kept %g", n, (double)maxdrop,
                  (double)minkept);
        /* randk: k values, each the sent one scaled by n/k */
        c = (nn_comp){NN_COMP_RANDK, 0.25, 0, 0};
        k = nn_comp_k(&c, n);
        round_trip(&c, x, n, r, d, NULL);
        kept = 0;
        for (size_t i = 0; i < n; i++)
            if (d[i] != 0) {
                kept++;
                CHECK(d[i] == (float)((double)x[i] * (double)n / (double)k));
            }
        CHECK_EQ_I64(kept, k);
        /* qsgd: every element within norm/s of the truth (the rounding's own bound, plus the
         * float32 rounding of the decoded value) */
        for (int s = 1; s <= 255; s = s * 4 + 3) {
            c = (nn_comp){NN_COMP_QSGD, 0, s, 0};
            round_trip(&c, x, n, r, d, NULL);
            double norm = 0, worst = 0;
            for (size_t i = 0; i < n; i++)
                norm += (double)x[i] * (double)x[i];
            norm = sqrt(norm);
            for (size_t i = 0; i < n; i++) {
                double e = fabs((double)d[i] - (double)x[i]);
                if (e > worst) worst = e;
                CHECK(d[i] == 0 || (d[i] < 0) == (x[i] < 0));
            }
            CHECK_MSG(worst <= norm / s * (1 + 1e-6), "qsgd s=%d n=%zu: error %g > norm/s %g", s, n,
                      worst, norm / s);
        }
        /* sign: ±mean|x| with x's signs */
        c = (nn_comp){NN_COMP_SIGN, 0, 0, 0};
        round_trip(&c, x, n, r, d, NULL);
        double mean = 0;
        for (size_t i = 0; i < n; i++)
            mean += fabs((double)x[i]);
        mean /= (double)n;
        for (size_t i = 0; i < n; i++)
            CHECK(d[i] == (x[i] < 0 ? -(float)mean : (float)mean));
        /* fp16/bf16: values already representable come back bit for bit */
        for (size_t i = 0; i < n; i++)
            x[i] = nn_f16_to_f32(nn_f32_to_f16(x[i]));
        c = (nn_comp){NN_COMP_FP16, 0, 0, 0};
        round_trip(&c, x, n, r, d, NULL);
        CHECK(!memcmp(x, d, n * sizeof(float)));
        for (size_t i = 0; i < n; i++)
            x[i] = nn_bf16_to_f32(nn_f32_to_bf16(x[i]));
        c = (nn_comp){NN_COMP_BF16, 0, 0, 0};
        round_trip(&c, x, n, r, d, NULL);
        CHECK(!memcmp(x, d, n * sizeof(float)));
        free(x);
        free(d);
    }
}

/* The mean of D decodes of x against x, element by element, within 5 standard deviations of
 * that mean (the scheme's known per-element variance over D): fails for a biased decoder, e.g.
 * randk without its n/k, or qsgd rounding to the nearest level. */
static void test_unbiased(sim_rng *r)
{
    enum { N = 64, D = 4000 };
    float x[N], d[N];
    fill(x, N, r);
    x[3] = 0; /* a zero must decode to exactly zero on average too */
    for (int scheme = NN_COMP_RANDK; scheme <= NN_COMP_QSGD; scheme++) {
        nn_comp c = {scheme, 0.125, 7, 0};
        double sum[N] = {0}, var[N], norm = 0;
        for (int i = 0; i < N; i++)
            norm += (double)x[i] * (double)x[i];
        norm = sqrt(norm);
        size_t k = nn_comp_k(&c, N);
        for (int i = 0; i < N; i++) {
            if (scheme == NN_COMP_RANDK) { /* x·n/k with probability k/n, else 0 */
                var[i] = (double)x[i] * (double)x[i] * ((double)N / (double)k - 1);
            } else { /* norm/s·(l or l + 1) with p = a − l: variance (norm/s)²·p(1 − p) */
                double a = fabs((double)x[i]) / norm * c.levels, p = a - floor(a);
                var[i] = norm / c.levels * norm / c.levels * p * (1 - p);
            }
        }
        for (int t = 0; t < D; t++) {
            round_trip(&c, x, N, r, d, NULL);
            for (int i = 0; i < N; i++)
                sum[i] += (double)d[i];
        }
        int off = 0;
        for (int i = 0; i < N; i++) {
            double mean = sum[i] / D, sd = sqrt(var[i] / D);
            /* float32 rounding of each decoded value: a relative 2^-24 at most */
            double slack = 5 * sd + fabs((double)x[i]) * 0x1p-22;
            if (fabs(mean - (double)x[i]) > slack) {
                off++;
                printf("  %s x[%d] = %.7g: mean of %d decodes %.7g, 5 sd %.3g\n",
                       nn_comp_names[scheme], i, (double)x[i], D, mean, 5 * sd);
            }
        }
        CHECK_MSG(off == 0, "%s: %d of %d elements biased", nn_comp_names[scheme], off, N);
    }
}

/* The "index" field of an encoded topk message */
static int index_is(const msgpack_sbuffer *sb, const char *kind)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int ok = 0;
    if (!nn_msgpack_next(&u, sb->data, sb->size, &off, "msg", NULL)) {
        const msgpack_object *v = nn_map_get(&u.data, "index");
        ok = v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(kind) &&
             !memcmp(v->via.str.ptr, kind, strlen(kind));
    }
    msgpack_unpacked_destroy(&u);
    return ok;
}

static void test_topk_index(sim_rng *r)
{
    enum { N = 4000 };
    float *x = sim_xcalloc(N, sizeof(float)), d[N];
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    /* 10 of 4000, 300 apart: deltas of 2 bytes, 20 bytes against a 500-byte bitmap */
    for (int j = 0; j < 10; j++)
        x[17 + 300 * j] = (float)(j + 1);
    nn_comp c = {NN_COMP_TOPK, 10.0 / N, 0, 1};
    size_t len = round_trip(&c, x, N, r, d, &sb);
    CHECK(index_is(&sb, "delta"));
    CHECK(!memcmp(x, d, sizeof d)); /* exactly the vector: its only non-zeros were kept */
    CHECK(len <= nn_comp_bytes(&c, N));
    /* the same with a gap of 0 first (index 0) and one of 1 */
    x[0] = 100, x[1] = 99;
    c.ratio = 12.0 / N;
    round_trip(&c, x, N, r, d, &sb);
    CHECK(index_is(&sb, "delta"));
    CHECK(!memcmp(x, d, sizeof d));
    /* half of them kept: at least a byte per index, against the 500-byte bitmap */
    fill(x, N, r);
    c.ratio = 0.5;
    len = round_trip(&c, x, N, r, d, &sb);
    CHECK(index_is(&sb, "bitmap"));
    CHECK(len <= nn_comp_bytes(&c, N));
    /* evenly spread indices are the bound's worst case: k − 1 gaps of n/k */
    for (size_t k = 1; k <= N; k = k * 3 + 1) {
        memset(x, 0, sizeof d);
        for (size_t j = 0; j < k; j++)
            x[j * (N / k)] = 1;
        c.ratio = (double)k / N;
        CHECK_EQ_I64(nn_comp_k(&c, N), k);
        len = round_trip(&c, x, N, r, d, &sb);
        CHECK_MSG(len <= nn_comp_bytes(&c, N), "topk k=%zu: %zu bytes > bound %zu", k, len,
                  nn_comp_bytes(&c, N));
    }
    /* the bound is tight when one gap is as long as it can be */
    memset(x, 0, sizeof d);
    x[N - 1] = 1;
    c.ratio = 1.0 / N;
    CHECK_EQ_I64(round_trip(&c, x, N, r, d, &sb), nn_comp_bytes(&c, N));
    msgpack_sbuffer_destroy(&sb);
    free(x);
}

/* nn_comp_bytes is the encoded length itself for every scheme but topk */
static void test_lengths(sim_rng *r)
{
    const size_t sizes[] = {1, 15, 16, 100, 127, 128, 255, 256, 20000, 40000, 70000};
    const nn_comp cs[] = {
            {NN_COMP_RANDK, 0.01, 0, 0}, {NN_COMP_RANDK, 1, 0, 0}, {NN_COMP_QSGD, 0, 1, 0},
            {NN_COMP_QSGD, 0, 255, 0},   {NN_COMP_QSGD, 0, 15, 0}, {NN_COMP_QSGD, 0, 100000, 0},
            {NN_COMP_SIGN, 0, 0, 0},     {NN_COMP_FP16, 0, 0, 0},  {NN_COMP_BF16, 0, 0, 0}};
    for (size_t si = 0; si < SIM_ARRAY_LEN(sizes); si++) {
        size_t n = sizes[si];
        float *x = sim_xmalloc(n * sizeof(float)), *d = sim_xmalloc(n * sizeof(float));
        fill(x, n, r);
        for (size_t ci = 0; ci < SIM_ARRAY_LEN(cs); ci++) {
            size_t len = round_trip(&cs[ci], x, n, r, d, NULL);
            CHECK_MSG(len == nn_comp_bytes(&cs[ci], n), "%s n=%zu: %zu bytes, computed %zu",
                      nn_comp_names[cs[ci].scheme], n, len, nn_comp_bytes(&cs[ci], n));
        }
        nn_comp t = {NN_COMP_TOPK, 0.1, 0, 1};
        CHECK(round_trip(&t, x, n, r, d, NULL) <= nn_comp_bytes(&t, n));
        free(x);
        free(d);
    }
}

/* A message with key k's value replaced by the msgpack bytes v (vn of them). */
static void rewrite(const msgpack_sbuffer *in, const char *k, const char *v, size_t vn,
                    msgpack_sbuffer *out)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    out->size = 0;
    if (nn_msgpack_next(&u, in->data, in->size, &off, "msg", NULL)) return;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
    const msgpack_object *o = &u.data;
    msgpack_pack_map(&pk, o->via.map.size);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *e = &o->via.map.ptr[i];
        msgpack_pack_object(&pk, e->key);
        if (e->key.via.str.size == strlen(k) && !memcmp(e->key.via.str.ptr, k, strlen(k)))
            msgpack_sbuffer_write(out, v, vn);
        else
            msgpack_pack_object(&pk, e->val);
    }
    msgpack_unpacked_destroy(&u);
}

/* decoding msg fails with SIM_EFORMAT and a message holding want */
static void refused(const msgpack_sbuffer *msg, size_t n, const char *want, int line)
{
    float d[64];
    sim_err err = {0};
    int rc = nn_comp_decode_buf(d, n, msg->data, msg->size, NULL, "msg", &err);
    CHECK_AT(rc == SIM_EFORMAT && strstr(err.msg, want) && !strcmp(err.file, "msg"),
             "line %d: expected an error with '%s', got %d '%s'", line, want, rc, err.msg);
}
#define REFUSED(msg, n, want) refused(msg, n, want, __LINE__)

static void test_malformed(sim_rng *r)
{
    enum { N = 40 };
    float x[N], d[N];
    fill(x, N, r);
    msgpack_sbuffer sb, bad;
    msgpack_sbuffer_init(&sb);
    msgpack_sbuffer_init(&bad);
    /* every scheme: every cut refused, and bytes flipped anywhere never crash (ASan) */
    const nn_comp cs[] = {{NN_COMP_TOPK, 0.1, 0, 1},  {NN_COMP_TOPK, 0.9, 0, 1},
                          {NN_COMP_RANDK, 0.2, 0, 0}, {NN_COMP_QSGD, 0, 3, 0},
                          {NN_COMP_SIGN, 0, 0, 0},    {NN_COMP_FP16, 0, 0, 0},
                          {NN_COMP_BF16, 0, 0, 0}};
    for (size_t ci = 0; ci < SIM_ARRAY_LEN(cs); ci++) {
        round_trip(&cs[ci], x, N, r, d, &sb);
        int caught = 0;
        for (size_t cut = 0; cut < sb.size; cut++)
            caught += nn_comp_decode_buf(d, N, sb.data, cut, NULL, "msg", NULL) == SIM_EFORMAT;
        CHECK_EQ_I64(caught, sb.size);
        /* the right message for another length */
        CHECK(nn_comp_decode_buf(d, N + 1, sb.data, sb.size, NULL, "msg", NULL) == SIM_EFORMAT);
        for (int t = 0; t < 2000; t++) {
            bad.size = 0;
            msgpack_sbuffer_write(&bad, sb.data, sb.size);
            for (int f = 0; f < 3; f++)
                bad.data[sim_rng_below(r, bad.size)] ^= (char)(1u << sim_rng_below(r, 8));
            int rc = nn_comp_decode_buf(d, N, bad.data, bad.size, NULL, "msg", NULL);
            CHECK_AT(rc == SIM_OK || rc == SIM_EFORMAT, "rc %d", rc);
        }
    }
    /* fields that lie, each named */
    nn_comp c = {NN_COMP_TOPK, 0.1, 0, 1}; /* k = 4 of 40: delta varints */
    round_trip(&c, x, N, r, d, &sb);
    rewrite(&sb, "n", "\x29", 1, &bad); /* 41 */
    REFUSED(&bad, N, "41 values where 40");
    rewrite(&sb, "k", "\x05", 1, &bad);
    REFUSED(&bad, N, "\"data\" should be a bin of 20 bytes");
    rewrite(&sb, "k", "\x29", 1, &bad);
    REFUSED(&bad, N, "\"k\" should be an integer in [1, 40]");
    rewrite(&sb, "scheme", "\xa3zip", 4, &bad);
    REFUSED(&bad, N, "\"scheme\" should be");
    rewrite(&sb, "index", "\xa3map", 4, &bad);
    REFUSED(&bad, N, "\"index\" should be");
    rewrite(&sb, "idx", "\xc4\x04\x01\x00\x02\x03", 6, &bad); /* a gap of 0 after the first */
    REFUSED(&bad, N, "repeats");
    rewrite(&sb, "idx", "\xc4\x04\x01\x02\x03\x28", 6, &bad); /* 1, 3, 6, 46 >= 40 */
    REFUSED(&bad, N, "beyond the 40 values");
    rewrite(&sb, "idx", "\xc4\x04\x01\x02\x03\x84", 6, &bad); /* the last varint cut */
    REFUSED(&bad, N, "cut");
    rewrite(&sb, "idx", "\xc4\x03\x01\x02\x03", 5, &bad); /* 3 indices, k = 4 */
    REFUSED(&bad, N, "3 indices where k = 4");
    rewrite(&sb, "idx", "\xc4\x05\x01\x02\x03\x04\x05", 7, &bad);
    REFUSED(&bad, N, "more than k = 4");
    rewrite(&sb, "index",
            "\xa6"
            "bitmap",
            7, &bad);
    REFUSED(&bad, N, "the bitmap has");
    msgpack_sbuffer tmp;
    msgpack_sbuffer_init(&tmp);
    rewrite(&bad, "idx", "\xc4\x05\x0f\x00\x00\x00\x00", 7, &tmp); /* 4 bits: k = 4 */
    CHECK(nn_comp_decode_buf(d, N, tmp.data, tmp.size, NULL, "msg", NULL) == SIM_OK);
    CHECK(d[0] != 0 && d[3] != 0 && d[4] == 0);
    rewrite(&bad, "idx", "\xc4\x05\x1f\x00\x00\x00\x00", 7, &tmp); /* 5 bits */
    REFUSED(&tmp, N, "more than k = 4");
    rewrite(&bad, "idx", "\xc4\x05\x07\x00\x00\x00\x00", 7, &tmp); /* 3 bits */
    REFUSED(&tmp, N, "3 indices where k = 4");
    c = (nn_comp){NN_COMP_QSGD, 0, 3, 0}; /* 3 bits a level: 7 is beyond 2s = 6 */
    round_trip(&c, x, N, r, d, &sb);
    rewrite(&sb, "data", "\xc4\x0f\x07\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 17, &bad);
    REFUSED(&bad, N, "level 7 is beyond 2s = 6");
    rewrite(&sb, "norm", "\x01", 1, &bad);
    REFUSED(&bad, N, "\"norm\" should be a float32");
    rewrite(&sb, "s", "\x00", 1, &bad);
    REFUSED(&bad, N, "\"s\" should be an integer");
    rewrite(&sb, "s", "\x04", 1, &bad); /* 4 levels take 4 bits: data is then short */
    REFUSED(&bad, N, "\"data\" should be a bin of 20 bytes");
    c = (nn_comp){NN_COMP_RANDK, 0.2, 0, 0};
    round_trip(&c, x, N, r, d, &sb);
    rewrite(&sb, "seed", "\xa1x", 2, &bad);
    REFUSED(&bad, N, "\"seed\"");
    bad.size = 0;
    msgpack_sbuffer_write(&bad, "\x93\x01\x02\x03", 4);
    REFUSED(&bad, N, "not a msgpack map");
    bad.size = 0;
    msgpack_sbuffer_write(&bad, "\xdd\xff\xff\xff\xff", 5); /* declares 2^32 − 1 elements */
    REFUSED(&bad, N, "more than the 0 bytes");
    msgpack_sbuffer_destroy(&tmp);
    msgpack_sbuffer_destroy(&sb);
    msgpack_sbuffer_destroy(&bad);
}

int main(void)
{
    sim_rng r;
    sim_rng_seed(&r, 42, SIM_RNG_TEST, 0);
    test_casts();
    test_round_trips(&r);
    test_unbiased(&r);
    test_topk_index(&r);
    test_lengths(&r);
    test_malformed(&r);
    return CHECK_DONE();
}
