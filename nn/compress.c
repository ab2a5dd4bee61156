/* nn/compress.c -- update compression's schemes: encoding, the length without encoding, and the
 * checked decoder (see compress.h for the schemes and the message). */
#include "nn/compress.h"

#include "nn/pack.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const nn_comp_names[] = {"none", "topk", "randk", "qsgd", "sign", "fp16", "bf16", NULL};

size_t nn_comp_k(const nn_comp *c, size_t n)
{
    double k = ceil(c->ratio * (double)n - 1e-9); /* 0.1 of 1000 is 100, not 101 */
    return n == 0 ? 0 : k < 1 ? 1 : k >= (double)n ? n : (size_t)k;
}

int nn_comp_level_bits(int s)
{
    int b = 0;
    while ((1ull << b) < 2ull * (unsigned)s + 1)
        b++;
    return b;
}

/* ---- the casts ---- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t nn_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000) /* NaN: quiet, the payload's top bits kept */
        return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));
    if (ax >= 0x477ff000) /* 65520 and above (inf too) round to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax >= 0x38800000) { /* a normal half: rebias the exponent, round the 13 bits dropped */
        ax -= 0x38000000;
        ax += 0xfff + ((ax >> 13) & 1);
        return (uint16_t)(sign | (ax >> 13));
    }
    /* a subnormal half (or zero): |f| / 2^-24 rounded to the nearest even integer; it may round
     * up to 0x400, the smallest normal, which is its encoding too */
    uint32_t e = ax >> 23, m = (ax & 0x7fffff) | (e ? 0x800000 : 0);
    int shift = 126 - (int)(e ? e : 1);
    if (shift > 24) return (uint16_t)sign; /* below half the smallest subnormal */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

float nn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000 | (m << 13));
    if (e) return bits_f32(sign | ((e + 112) << 23) | (m << 13));
    float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
    return sign ? -v : v;
}

uint16_t nn_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40); /* NaN, quiet */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float nn_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

/* ---- bit streams and varints ---- */

/* Write the low b bits of v at bit `at` of buf (zeroed beforehand), least significant first. */
static void put_bits(unsigned char *buf, size_t at, uint32_t v, int b)
{
    for (int j = 0; j < b; j++, at++)
        if (v >> j & 1) buf[at / 8] |= (unsigned char)(1u << (at % 8));
}

static uint32_t get_bits(const unsigned char *buf, size_t at, int b)
{
    uint32_t v = 0;
    for (int j = 0; j < b; j++, at++)
        v |= (uint32_t)(buf[at / 8] >> (at % 8) & 1) << j;
    return v;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    for (; v >= 128; v >>= 7)
        n++;
    return n;
}

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    for (; v >= 128; v >>= 7)
        p[n++] = (unsigned char)(v | 128);
    p[n++] = (unsigned char)v;
    return n;
}

/* ---- the lengths msgpack-c's packer gives (msgpack_pack_uint64 takes the shortest form) ---- */

static size_t uint_len(uint64_t v)
{
    return v < 128 ? 1 : v < 256 ? 2 : v < 65536 ? 3 : v <= 0xffffffffu ? 5 : 9;
}

static size_t str_len(const char *s)
{
    size_t n = strlen(s);
    return (n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5) + n;
}

/* ---- selection ---- */

/* topk's order: larger magnitude first (NaN the largest), then the lower index. */
static float mag(float x)
{
    return isnan(x) ? INFINITY : fabsf(x);
}

/* Swap-free three-way quickselect over keys[lo..hi): after it, the element of rank r (0 = the
 * largest) is at keys[r]; the pivot is the middle element (deterministic). */
static void select_rank(float *keys, size_t lo, size_t hi, size_t r)
{
    while (hi - lo > 1) {
        float p = keys[lo + (hi - lo) / 2];
        size_t lt = lo, i = lo, gt = hi; /* [lo, lt) > p, [lt, i) == p, [gt, hi) < p */
        while (i < gt) {
            float v = keys[i];
            if (v > p) {
                keys[i++] = keys[lt];
                keys[lt++] = v;
            } else if (v < p) {
                keys[i] = keys[--gt];
                keys[gt] = v;
            } else {
                i++;
            }
        }
        if (r < lt)
            hi = lt;
        else if (r >= gt)
            lo = gt;
        else
            return;
    }
}

/* The k indices of x's k largest magnitudes, ascending, into idx. */
static void topk_indices(const float *x, size_t n, size_t k, uint32_t *idx)
{
    if (!k) return;
    float *keys = sim_xmalloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++)
        keys[i] = mag(x[i]);
    select_rank(keys, 0, n, k - 1);
    float t = keys[k - 1]; /* the k-th largest: all above it are kept, then ties by index */
    size_t above = 0, m = 0;
    for (size_t i = 0; i < n; i++)
        above += mag(x[i]) > t;
    size_t ties = k - above;
    for (size_t i = 0; i < n && m < k; i++) {
        float v = mag(x[i]);
        if (v > t || (v == t && ties && ties--)) idx[m++] = (uint32_t)i;
    }
    free(keys);
}

/* randk's k indices of n from seed, ascending (selection sampling, Knuth's Algorithm S): the
 * decoder draws the same. */
static void randk_indices(uint64_t seed, size_t n, size_t k, uint32_t *idx)
{
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_COMPRESS, 0);
    size_t m = 0;
    for (size_t i = 0; i < n && m < k; i++)
        if (sim_rng_below(&r, n - i) < k - m) idx[m++] = (uint32_t)i;
}

/* ---- encoding ---- */

static void pack_bin(msgpack_packer *pk, const void *p, size_t n)
{
    msgpack_pack_bin(pk, n);
    msgpack_pack_bin_body(pk, p, n);
}

static void put_le32(unsigned char *p, float v)
{
    uint32_t u = f32_bits(v);
    for (int j = 0; j < 4; j++)
        p[j] = (unsigned char)(u >> 8 * j);
}

static float get_le32(const unsigned char *p)
{
    return bits_f32((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                    (uint32_t)p[3] << 24);
}

/* The k values of x at idx as float32 into a fresh buffer. */
static unsigned char *values_at(const float *x, const uint32_t *idx, size_t k)
{
    unsigned char *v = sim_xmalloc(4 * k + 1);
    for (size_t j = 0; j < k; j++)
        put_le32(v + 4 * j, x[idx[j]]);
    return v;
}

/* randk's decoded value: the kept one scaled by n/k (encoder and decoder alike) */
static float randk_scale(float v, size_t n, size_t k)
{
    return (float)((double)v * (double)n / (double)k);
}

/* qsgd's norm as sent: ‖x‖₂ in double, rounded up to a float32 so that s·|x_i|/norm <= s. */
static float qsgd_norm(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    double nd = sqrt(s);
    float nf = (float)nd;
    if ((double)nf < nd) nf = nextafterf(nf, INFINITY);
    return nf;
}

static float qsgd_value(float norm, int64_t q, int s)
{
    return (float)((double)norm * (double)q / (double)s);
}

void nn_comp_encode(msgpack_sbuffer *sb, const nn_comp *c, const float *x, size_t n, sim_rng *r,
                    float *sent)
{
    assert(c->scheme > NN_COMP_NONE && c->scheme <= NN_COMP_BF16);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    static const int fields[] = {[NN_COMP_TOPK] = 6, [NN_COMP_RANDK] = 5, [NN_COMP_QSGD] = 5,
                                 [NN_COMP_SIGN] = 4, [NN_COMP_FP16] = 3,  [NN_COMP_BF16] = 3};
    msgpack_pack_map(&pk, (size_t)fields[c->scheme]);
    nn_pack_str(&pk, "scheme");
    nn_pack_str(&pk, nn_comp_names[c->scheme]);
    nn_pack_str(&pk, "n");
    msgpack_pack_uint64(&pk, n);
    size_t k = nn_comp_k(c, n);
    if (sent && (c->scheme == NN_COMP_TOPK || c->scheme == NN_COMP_RANDK))
        memset(sent, 0, n * sizeof(float));
    switch (c->scheme) {
    case NN_COMP_TOPK:
    case NN_COMP_RANDK: {
        uint32_t *idx = sim_xmalloc((k ? k : 1) * sizeof(uint32_t));
        nn_pack_str(&pk, "k");
        msgpack_pack_uint64(&pk, k);
        if (c->scheme == NN_COMP_RANDK) {
            uint64_t seed = sim_rng_u64(r);
            randk_indices(seed, n, k, idx);
            nn_pack_str(&pk, "seed");
            msgpack_pack_fix_uint64(&pk, seed);
            for (size_t j = 0; sent && j < k; j++)
                sent[idx[j]] = randk_scale(x[idx[j]], n, k);
        } else {
            topk_indices(x, n, k, idx);
            size_t vlen = 0, blen = (n + 7) / 8;
            for (size_t j = 0; j < k; j++)
                vlen += varint_len(idx[j] - (j ? idx[j - 1] : 0));
            int bitmap = blen <= vlen;
            unsigned char *ib = sim_xcalloc((bitmap ? blen : vlen) + 1, 1), *p = ib;
            for (size_t j = 0; j < k; j++) {
                if (bitmap)
                    ib[idx[j] / 8] |= (unsigned char)(1u << (idx[j] % 8));
                else
                    p += put_varint(p, idx[j] - (j ? idx[j - 1] : 0));
                if (sent) sent[idx[j]] = x[idx[j]];
            }
            nn_pack_str(&pk, "index");
            nn_pack_str(&pk, bitmap ? "bitmap" : "delta");
            nn_pack_str(&pk, "idx");
            pack_bin(&pk, ib, bitmap ? blen : vlen);
            free(ib);
        }
        unsigned char *v = values_at(x, idx, k);
        nn_pack_str(&pk, "data");
        pack_bin(&pk, v, 4 * k);
        free(v);
        free(idx);
        break;
    }
    case NN_COMP_QSGD: {
        int s = c->levels, b = nn_comp_level_bits(s);
        float norm = qsgd_norm(x, n);
        size_t len = (n * (size_t)b + 7) / 8;
        unsigned char *d = sim_xcalloc(len + 1, 1);
        int usable = norm > 0 && isfinite(norm);
        for (size_t i = 0; i < n; i++) {
            int64_t q = 0; /* the level, |q| <= s */
            if (usable) {
                double a = fabs((double)x[i]) / (double)norm * s, l = floor(a);
                q = (int64_t)l + (sim_rng_uniform(r) < a - l);
                if (q > s) q = s;
                if (x[i] < 0) q = -q;
            }
            put_bits(d, i * (size_t)b, (uint32_t)(q + s), b);
            if (sent) sent[i] = qsgd_value(norm, q, s);
        }
        nn_pack_str(&pk, "s");
        msgpack_pack_uint64(&pk, (uint64_t)s);
        nn_pack_str(&pk, "norm");
        msgpack_pack_float(&pk, norm);
        nn_pack_str(&pk, "data");
        pack_bin(&pk, d, len);
        free(d);
        break;
    }
    case NN_COMP_SIGN: {
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += fabs((double)x[i]);
        float scale = n ? (float)(sum / (double)n) : 0;
        size_t len = (n + 7) / 8;
        unsigned char *d = sim_xcalloc(len + 1, 1);
        for (size_t i = 0; i < n; i++) {
            int pos = !(x[i] < 0);
            if (pos) d[i / 8] |= (unsigned char)(1u << (i % 8));
            if (sent) sent[i] = pos ? scale : -scale;
        }
        nn_pack_str(&pk, "scale");
        msgpack_pack_float(&pk, scale);
        nn_pack_str(&pk, "data");
        pack_bin(&pk, d, len);
        free(d);
        break;
    }
    default: { /* fp16, bf16 */
        int half = c->scheme == NN_COMP_FP16;
        unsigned char *d = sim_xmalloc(2 * n + 1);
        for (size_t i = 0; i < n; i++) {
            uint16_t h = half ? nn_f32_to_f16(x[i]) : nn_f32_to_bf16(x[i]);
            d[2 * i] = (unsigned char)h;
            d[2 * i + 1] = (unsigned char)(h >> 8);
            if (sent) sent[i] = half ? nn_f16_to_f32(h) : nn_bf16_to_f32(h);
        }
        nn_pack_str(&pk, "data");
        pack_bin(&pk, d, 2 * n);
        free(d);
    }
    }
}

/* The most bytes k ascending indices below n take as delta varints: a delta needs more than L
 * bytes only when it is at least 128^L, and the deltas sum to less than n, so at most
 * min(k, (n − 1)/128^L) of them do. */
static size_t varint_bound(size_t n, size_t k)
{
    size_t total = k;
    for (uint64_t p = 128; n > 0 && p <= n - 1; p *= 128)
        total += (n - 1) / p < k ? (n - 1) / p : k;
    return total;
}

size_t nn_comp_bytes(const nn_comp *c, size_t n)
{
    size_t b = 1 + str_len("scheme") + str_len(nn_comp_names[c->scheme]) + str_len("n") +
               uint_len(n) + str_len("data"),
           k = nn_comp_k(c, n);
    switch (c->scheme) {
    case NN_COMP_TOPK: {
        size_t blen = (n + 7) / 8, vlen = varint_bound(n, k);
        return b + str_len("k") + uint_len(k) + str_len("index") +
               (blen <= vlen ? str_len("bitmap") : str_len("delta")) + str_len("idx") +
               nn_bin_bytes(blen <= vlen ? blen : vlen) + nn_bin_bytes(4 * k);
    }
    case NN_COMP_RANDK:
        return b + str_len("k") + uint_len(k) + str_len("seed") + 9 + nn_bin_bytes(4 * k);
    case NN_COMP_QSGD:
        return b + str_len("s") + uint_len((uint64_t)c->levels) + str_len("norm") + 5 +
               nn_bin_bytes((n * (size_t)nn_comp_level_bits(c->levels) + 7) / 8);
    case NN_COMP_SIGN:
        return b + str_len("scale") + 5 + nn_bin_bytes((n + 7) / 8);
    default:
        return b + nn_bin_bytes(2 * n);
    }
}

/* ---- decoding ---- */

static int bad(sim_err *err, const char *what, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static int bad(sim_err *err, const char *what, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return sim_fail(err, SIM_EFORMAT, what, 0, 0, "compressed message: %s", msg);
}

/* The bin at key k of o holding exactly len bytes: its bytes, or NULL (an error in err). */
static const unsigned char *bin_of(const msgpack_object *o, const char *k, size_t len,
                                   const char *what, sim_err *err)
{
    const msgpack_object *v = nn_map_get(o, k);
    if (!v || v->type != MSGPACK_OBJECT_BIN || v->via.bin.size != len) {
        bad(err, what, "\"%s\" should be a bin of %zu bytes", k, len);
        return NULL;
    }
    return (const unsigned char *)v->via.bin.ptr;
}

static int int_of(const msgpack_object *o, const char *k, int64_t lo, int64_t hi, int64_t *out,
                  const char *what, sim_err *err)
{
    const msgpack_object *v = nn_map_get(o, k);
    if (!v || nn_unpack_int(v, lo, hi, out))
        return bad(err, what, "\"%s\" should be an integer in [%lld, %lld]", k, (long long)lo,
                   (long long)hi);
    return SIM_OK;
}

static int float_of(const msgpack_object *o, const char *k, float *out, const char *what,
                    sim_err *err)
{
    const msgpack_object *v = nn_map_get(o, k);
    if (!v || v->type != MSGPACK_OBJECT_FLOAT32)
        return bad(err, what, "\"%s\" should be a float32", k);
    *out = (float)v->via.f64;
    return SIM_OK;
}

/* topk's indices from the idx bin (bitmap or delta varints) into idx (k), checked. */
static int topk_read(const msgpack_object *o, size_t n, size_t k, uint32_t *idx, const char *what,
                     sim_err *err)
{
    const msgpack_object *kind = nn_map_get(o, "index"), *ib = nn_map_get(o, "idx");
    int bitmap = kind && kind->type == MSGPACK_OBJECT_STR && kind->via.str.size == 6 &&
                 !memcmp(kind->via.str.ptr, "bitmap", 6);
    int delta = kind && kind->type == MSGPACK_OBJECT_STR && kind->via.str.size == 5 &&
                !memcmp(kind->via.str.ptr, "delta", 5);
    if (!bitmap && !delta) return bad(err, what, "\"index\" should be \"bitmap\" or \"delta\"");
    if (!ib || ib->type != MSGPACK_OBJECT_BIN) return bad(err, what, "\"idx\" should be a bin");
    const unsigned char *p = (const unsigned char *)ib->via.bin.ptr;
    size_t len = ib->via.bin.size, m = 0;
    if (bitmap) {
        if (len != (n + 7) / 8)
            return bad(err, what, "the bitmap has %zu bytes for %zu values (%zu expected)", len, n,
                       (n + 7) / 8);
        for (size_t i = 0; i < 8 * len; i++) {
            if (!(p[i / 8] >> (i % 8) & 1)) continue;
            if (i >= n) return bad(err, what, "the bitmap marks index %zu of %zu", i, n);
            if (m == k) return bad(err, what, "the bitmap marks more than k = %zu indices", k);
            idx[m++] = (uint32_t)i;
        }
    } else {
        size_t at = 0;
        uint64_t prev = 0;
        while (at < len) {
            uint64_t d = 0;
            int shift = 0;
            for (;;) {
                if (at == len) return bad(err, what, "a delta varint is cut at byte %zu", at);
                if (shift > 56) return bad(err, what, "a delta varint is too long at byte %zu", at);
                unsigned char c = p[at++];
                d |= (uint64_t)(c & 127) << shift;
                shift += 7;
                if (!(c & 128)) break;
            }
            if (m == k) return bad(err, what, "the deltas hold more than k = %zu indices", k);
            if (m && d == 0) return bad(err, what, "index %zu repeats the one before", m);
            if (d >= n || prev + d >= n)
                return bad(err, what, "index %zu is beyond the %zu values", m, n);
            prev += d;
            idx[m++] = (uint32_t)prev;
        }
    }
    if (m != k) return bad(err, what, "%zu indices where k = %zu", m, k);
    return SIM_OK;
}

int nn_comp_decode(float *x, size_t n, const msgpack_object *o, const char *what, sim_err *err)
{
    if (o->type != MSGPACK_OBJECT_MAP) return bad(err, what, "not a msgpack map");
    const msgpack_object *sv = nn_map_get(o, "scheme");
    int scheme = -1;
    for (int i = 1; sv && sv->type == MSGPACK_OBJECT_STR && nn_comp_names[i] && scheme < 0; i++)
        if (sv->via.str.size == strlen(nn_comp_names[i]) &&
            !memcmp(sv->via.str.ptr, nn_comp_names[i], sv->via.str.size))
            scheme = i;
    if (scheme < 0)
        return bad(err, what, "\"scheme\" should be topk, randk, qsgd, sign, fp16 or bf16");
    int64_t nv, kv = 0, sv2 = 0;
    int rc = int_of(o, "n", 0, INT64_MAX, &nv, what, err);
    if (rc) return rc;
    if ((uint64_t)nv != n)
        return bad(err, what, "it holds %lld values where %zu are expected", (long long)nv, n);
    switch (scheme) {
    case NN_COMP_TOPK:
    case NN_COMP_RANDK: {
        if ((rc = int_of(o, "k", n ? 1 : 0, (int64_t)n, &kv, what, err))) return rc;
        size_t k = (size_t)kv;
        const unsigned char *v = bin_of(o, "data", 4 * k, what, err);
        if (!v) return SIM_EFORMAT;
        uint32_t *idx = sim_xmalloc((k ? k : 1) * sizeof(uint32_t));
        if (scheme == NN_COMP_RANDK) {
            const msgpack_object *seed = nn_map_get(o, "seed");
            if (!seed || seed->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                rc = bad(err, what, "\"seed\" should be an unsigned integer");
            else
                randk_indices(seed->via.u64, n, k, idx);
        } else {
            rc = topk_read(o, n, k, idx, what, err);
        }
        if (!rc) {
            memset(x, 0, n * sizeof(float));
            for (size_t j = 0; j < k; j++) {
                float val = get_le32(v + 4 * j);
                x[idx[j]] = scheme == NN_COMP_RANDK ? randk_scale(val, n, k) : val;
            }
        }
        free(idx);
        return rc;
    }
    case NN_COMP_QSGD: {
        float norm = 0;
        if ((rc = int_of(o, "s", 1, NN_COMP_MAX_LEVELS, &sv2, what, err)) ||
            (rc = float_of(o, "norm", &norm, what, err)))
            return rc;
        int s = (int)sv2, b = nn_comp_level_bits(s);
        const unsigned char *d = bin_of(o, "data", (n * (size_t)b + 7) / 8, what, err);
        if (!d) return SIM_EFORMAT;
        for (size_t i = 0; i < n; i++) {
            uint32_t u = get_bits(d, i * (size_t)b, b);
            if (u > 2u * (unsigned)s)
                return bad(err, what, "value %zu's level %u is beyond 2s = %d", i, u, 2 * s);
            x[i] = qsgd_value(norm, (int64_t)u - s, s);
        }
        return SIM_OK;
    }
    case NN_COMP_SIGN: {
        float scale = 0;
        if ((rc = float_of(o, "scale", &scale, what, err))) return rc;
        const unsigned char *d = bin_of(o, "data", (n + 7) / 8, what, err);
        if (!d) return SIM_EFORMAT;
        for (size_t i = 0; i < n; i++)
            x[i] = d[i / 8] >> (i % 8) & 1 ? scale : -scale;
        return SIM_OK;
    }
    default: {
        const unsigned char *d = bin_of(o, "data", 2 * n, what, err);
        if (!d) return SIM_EFORMAT;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(d[2 * i] | d[2 * i + 1] << 8);
            x[i] = scheme == NN_COMP_FP16 ? nn_f16_to_f32(h) : nn_bf16_to_f32(h);
        }
        return SIM_OK;
    }
    }
}

int nn_comp_decode_buf(float *x, size_t n, const void *buf, size_t len, size_t *used,
                       const char *what, sim_err *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = nn_msgpack_next(&u, buf, len, &off, what, err);
    if (!rc) rc = nn_comp_decode(x, n, &u.data, what, err);
    if (!rc && used) *used = off;
    msgpack_unpacked_destroy(&u);
    return rc;
}

void nn_comp_gather(const nn_arch *a, const float *params, float *v)
{
    const nn_layout *L = &a->layout;
    for (int t = 0; t < L->n; t++) {
        size_t len = (size_t)L->t[t].rows * L->t[t].cols;
        memcpy(v, params + L->t[t].off, len * sizeof(float));
        v += len;
    }
}

void nn_comp_scatter(const nn_arch *a, const float *v, float *params)
{
    const nn_layout *L = &a->layout;
    for (int t = 0; t < L->n; t++) {
        size_t len = (size_t)L->t[t].rows * L->t[t].cols;
        memcpy(params + L->t[t].off, v, len * sizeof(float));
        v += len;
    }
}
