/* tests/test_sim_net.c -- the flow-level network (sim/net.h): hand-computed max-min cases, then
 * seeded random runs checked against the definition of max-min fairness at every instant, for
 * conservation of bits, and against a twin network solved whole at every change. */
#include "sim/net.h"
#include "sim/rng.h"
#include "tests/check.h"

#include <stdlib.h>
#include <string.h>

#define BIG 1e12 /* an access link no shared link of these cases comes near */

/* Settle at now and return how many finishes changed. */
static int settle(sim_net *net, sim_time now)
{
    const int32_t *ch;
    return sim_net_settle(net, now, &ch);
}

static double rate_of(sim_net *net, int32_t id)
{
    const sim_net_flow *f = sim_net_flow_of(net, id);
    return f ? f->rate : -1;
}

static void test_two_equal(void)
{
    /* one 1 Mbit/s link, two flows of 1 Mbit: 0.5 Mbit/s each, both done at 2 s */
    double bps = 1e6;
    int path = 0;
    sim_net *net = sim_net_new(1, &bps, 2);
    sim_net_start(net, 0, 0, 1e6, BIG, &path, 1);
    sim_net_start(net, 1, 0, 1e6, BIG, &path, 1);
    CHECK_EQ_I64(settle(net, 0), 2);
    CHECK(rate_of(net, 0) == 5e5 && rate_of(net, 1) == 5e5);
    CHECK_EQ_I64(sim_net_finish(net, 0), 2 * SIM_SEC);
    CHECK_EQ_I64(sim_net_finish(net, 1), 2 * SIM_SEC);
    CHECK(sim_net_stop(net, 0, 2 * SIM_SEC) == 0);
    CHECK(sim_net_stop(net, 1, 2 * SIM_SEC) == 0);
    CHECK_EQ_I64(sim_net_count(net), 0);
    sim_net_free(net);
}

static void test_capped(void)
{
    /* link 9 Mbit/s; flow 0 capped at 1 Mbit/s by its own access link, 1 and 2 uncapped:
     *   r0 = 1, r1 = r2 = (9 - 1) / 2 = 4 Mbit/s
     * 4 Mbit each: 1 and 2 end at 1 s; 0 stays at its cap and ends at 4 s */
    double bps = 9e6;
    int path = 0;
    sim_net *net = sim_net_new(1, &bps, 3);
    sim_net_start(net, 0, 0, 4e6, 1e6, &path, 1);
    sim_net_start(net, 1, 0, 4e6, BIG, &path, 1);
    sim_net_start(net, 2, 0, 4e6, BIG, &path, 1);
    settle(net, 0);
    CHECK(rate_of(net, 0) == 1e6 && rate_of(net, 1) == 4e6 && rate_of(net, 2) == 4e6);
    CHECK_EQ_I64(sim_net_finish(net, 1), SIM_SEC);
    CHECK_EQ_I64(sim_net_finish(net, 2), SIM_SEC);
    CHECK_EQ_I64(sim_net_finish(net, 0), 4 * SIM_SEC);
    sim_net_stop(net, 1, SIM_SEC);
    sim_net_stop(net, 2, SIM_SEC);
    CHECK_EQ_I64(settle(net, SIM_SEC), 0); /* flow 0's rate and finish stay */
    CHECK_EQ_I64(sim_net_finish(net, 0), 4 * SIM_SEC);
    sim_net_free(net);
}

static void test_staggered(void)
{
    /* link 2 Mbit/s. Flow 0 (4 Mbit) alone from 0 s: 2 Mbit/s, due at 2 s. Flow 1 (1 Mbit)
     * starts at 1 s, when 0 has 2 Mbit left: 1 Mbit/s each, so 1 ends at 2 s, when 0 has
     * 1 Mbit left; alone again at 2 Mbit/s, 0 ends at 2.5 s. */
    double bps = 2e6;
    int path = 0;
    sim_net *net = sim_net_new(1, &bps, 2);
    sim_net_start(net, 0, 0, 4e6, BIG, &path, 1);
    settle(net, 0);
    CHECK_EQ_I64(sim_net_finish(net, 0), 2 * SIM_SEC);
    sim_net_start(net, 1, SIM_SEC, 1e6, BIG, &path, 1);
    CHECK_EQ_I64(settle(net, SIM_SEC), 2);
    CHECK(rate_of(net, 0) == 1e6 && rate_of(net, 1) == 1e6);
    CHECK_EQ_I64(sim_net_finish(net, 0), 3 * SIM_SEC);
    CHECK_EQ_I64(sim_net_finish(net, 1), 2 * SIM_SEC);
    CHECK(sim_net_stop(net, 1, 2 * SIM_SEC) == 0);
    settle(net, 2 * SIM_SEC);
    CHECK(rate_of(net, 0) == 2e6);
    CHECK_EQ_I64(sim_net_finish(net, 0), 2500 * SIM_MS);
    CHECK(sim_net_stop(net, 0, 2500 * SIM_MS) == 0);
    sim_net_free(net);
}

static void test_group(void)
{
    /* server link 0: 10 Mbit/s; group link 1: 4 Mbit/s, inside it (its flows cross both).
     * Flows 0..2 behind the group, 3 and 4 not:
     *   the group fills first: r0 = r1 = r2 = 4/3 Mbit/s;
     *   the server has 10 - 4 = 6 left for two: r3 = r4 = 3 Mbit/s.
     * 4 Mbit each: 3 and 4 end at 4/3 s (1333333333 ns); the group's flows are still held by
     * the group, so they keep their rates and end at 3 s. */
    double bps[2] = {10e6, 4e6};
    int in[2] = {1, 0}, out = 0;
    sim_net *net = sim_net_new(2, bps, 5);
    for (int32_t i = 0; i < 3; i++)
        sim_net_start(net, i, 0, 4e6, BIG, in, 2);
    for (int32_t i = 3; i < 5; i++)
        sim_net_start(net, i, 0, 4e6, BIG, &out, 1);
    settle(net, 0);
    for (int32_t i = 0; i < 3; i++)
        CHECK_NEAR(rate_of(net, i), 4e6 / 3, 1e-6);
    CHECK(rate_of(net, 3) == 3e6 && rate_of(net, 4) == 3e6);
    CHECK_EQ_I64(sim_net_finish(net, 3), 1333333333);
    CHECK_EQ_I64(sim_net_finish(net, 0), 3 * SIM_SEC);
    CHECK(sim_net_link_load(net, 0) <= 10e6 && sim_net_link_load(net, 1) <= 4e6);
    sim_net_stop(net, 3, 1333333333);
    sim_net_stop(net, 4, 1333333333);
    CHECK_EQ_I64(settle(net, 1333333333), 0);
    CHECK_EQ_I64(sim_net_finish(net, 2), 3 * SIM_SEC);
    sim_net_free(net);
}

static void test_slack(void)
{
    /* link 10 Mbit/s, flows capped at 3 Mbit/s by their own links. Three fit (9 < 10), each at
     * its cap, and a fourth's start moves none of them; their 3 Mbit take 1 s. At 0.5 s a
     * fourth comes: 12 > 10, 2.5 Mbit/s each: the three have 1.5 Mbit left, 0.6 s more, the
     * fourth's 3 Mbit 1.2 s. At 1.1 s they end; the fourth (1.5 Mbit sent) is alone at its cap
     * again: 0.5 s more, to 1.6 s. */
    double bps = 10e6;
    int path = 0;
    sim_net *net = sim_net_new(1, &bps, 4);
    for (int32_t i = 0; i < 3; i++)
        sim_net_start(net, i, 0, 3e6, 3e6, &path, 1);
    CHECK_EQ_I64(settle(net, 0), 3);
    for (int32_t i = 0; i < 3; i++)
        CHECK(rate_of(net, i) == 3e6 && sim_net_finish(net, i) == SIM_SEC);
    CHECK(sim_net_next(net) == SIM_SEC);
    sim_net_start(net, 3, 500 * SIM_MS, 3e6, 3e6, &path, 1);
    CHECK_EQ_I64(settle(net, 500 * SIM_MS), 4);
    for (int32_t i = 0; i < 4; i++)
        CHECK(rate_of(net, i) == 2.5e6);
    CHECK_EQ_I64(sim_net_finish(net, 0), 1100 * SIM_MS);
    CHECK_EQ_I64(sim_net_finish(net, 3), 1700 * SIM_MS);
    CHECK(sim_net_next(net) == 1100 * SIM_MS);
    int32_t due[4];
    CHECK_EQ_I64(sim_net_due(net, 1100 * SIM_MS, due), 3);
    CHECK(due[0] == 0 && due[1] == 1 && due[2] == 2);
    for (int32_t i = 0; i < 3; i++)
        sim_net_stop(net, i, 1100 * SIM_MS);
    CHECK_EQ_I64(settle(net, 1100 * SIM_MS), 1);
    CHECK(rate_of(net, 3) == 3e6);
    CHECK_EQ_I64(sim_net_finish(net, 3), 1600 * SIM_MS);
    CHECK(sim_net_next(net) == 1600 * SIM_MS);
    /* another fits beside it (6 < 10): its start moves nothing else */
    sim_net_start(net, 0, 1200 * SIM_MS, 3e6, 3e6, &path, 1);
    const int32_t *ch;
    CHECK_EQ_I64(sim_net_settle(net, 1200 * SIM_MS, &ch), 1);
    CHECK(ch[0] == 0 && rate_of(net, 0) == 3e6 && sim_net_finish(net, 3) == 1600 * SIM_MS);
    sim_net_free(net);
}

/* ---------------------------------------------------------------------------------------- */
/* random runs */

enum { LINKS = 6, IDS = 40 };

/* Max-min fairness by its definition, on the flows now: no link over capacity (up to the
 * rounding of a share summed back), every rate positive and at most its cap, and every flow
 * below its cap crosses a link that is full and on which no flow is faster. Returns failures. */
static int check_maxmin(const sim_net *net, const double *bps)
{
    sim_net_flow fl[IDS];
    int n = sim_net_flows(net, fl), bad = 0;
    double load[LINKS] = {0}, top[LINKS] = {0};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < fl[i].n_path; k++) {
            load[fl[i].path[k]] += fl[i].rate;
            if (fl[i].rate > top[fl[i].path[k]]) top[fl[i].path[k]] = fl[i].rate;
        }
    for (int l = 0; l < LINKS; l++)
        bad += load[l] > bps[l] * (1 + 1e-12);
    for (int i = 0; i < n; i++) {
        bad += !(fl[i].rate > 0) || fl[i].rate > fl[i].cap;
        if (fl[i].rate >= fl[i].cap) continue;
        int held = 0;
        for (int k = 0; k < fl[i].n_path; k++) {
            int l = fl[i].path[k];
            held |= load[l] >= bps[l] * (1 - 1e-12) && fl[i].rate >= top[l] * (1 - 1e-12);
        }
        bad += !held;
    }
    return bad;
}

static void test_random(uint64_t seed)
{
    sim_rng r;
    sim_rng_seed(&r, seed, SIM_RNG_TEST, 0);
    /* links 0, 1: the server's up and down; 2..5: two groups' up and down; some unlimited */
    double bps[LINKS];
    for (int l = 0; l < LINKS; l++)
        bps[l] = sim_rng_below(&r, 5) == 0 ? INFINITY : 1e6 * (double)(1 + sim_rng_below(&r, 100));
    sim_net *inc = sim_net_new(LINKS, bps, IDS), *full = sim_net_new(LINKS, bps, IDS);
    /* got[id]: bits id's flow sent, integrated here from the rates the net gave over time */
    double got[IDS] = {0};
    sim_time now = 0;
    int bad_maxmin = 0, bad_twin = 0, bad_left = 0, bad_past = 0, bad_sum = 0, started = 0;
    for (int step = 0; step < 400; step++) {
        /* the next instant: the earliest finish, or a random one before it */
        sim_time next = -1;
        for (int32_t id = 0; id < IDS; id++) {
            sim_time f = sim_net_finish(inc, id);
            if (f >= 0 && (next < 0 || f < next)) next = f;
        }
        sim_time jump = (sim_time)sim_rng_below(&r, 3 * SIM_SEC);
        if (next < 0 || (sim_rng_below(&r, 2) && now + jump < next)) next = now + jump;
        bad_past += next < now;
        for (int32_t id = 0; id < IDS; id++)
            if (sim_net_flow_of(inc, id))
                got[id] += sim_net_flow_of(inc, id)->rate * ((double)(next - now) * 1e-9);
        now = next;
        /* end every flow due now; abandon one at random sometimes (a lost job) */
        for (int32_t id = 0; id < IDS; id++) {
            sim_time f = sim_net_finish(inc, id);
            if (f < 0) continue;
            int abandon = f > now && sim_rng_below(&r, 30) == 0;
            if (f != now && !abandon) continue;
            const sim_net_flow *fl = sim_net_flow_of(inc, id);
            double size = fl->size, rate = fl->rate;
            double left = sim_net_stop(inc, id, now);
            sim_net_stop(full, id, now);
            /* at its finish a flow has sent its bits, up to half a ns of its rate */
            if (!abandon) bad_left += !(fabs(left) <= rate * 0.5e-9 + size * 1e-12);
            if (abandon) bad_left += !(left > 0);
            /* what the rates delivered is what the flow had to send (or sent before it was
             * abandoned), up to half a ns of its rate and the rounding of the sums */
            bad_sum += !(fabs(got[id] - (size - left)) <= rate * 0.5e-9 + size * 1e-9);
            got[id] = 0;
        }
        /* start a few flows on idle ids: a download or an upload, in a group or not */
        int starts = (int)sim_rng_below(&r, 4);
        for (int s = 0; s < starts; s++) {
            int32_t id = (int32_t)sim_rng_below(&r, IDS);
            if (sim_net_flow_of(inc, id)) continue;
            int dir = (int)sim_rng_below(&r, 2), g = (int)sim_rng_below(&r, 3) - 1;
            int path[2], np = 0;
            if (g >= 0 && isfinite(bps[2 + 2 * g + dir])) path[np++] = 2 + 2 * g + dir;
            if (isfinite(bps[dir])) path[np++] = dir;
            double bits = 8 * (double)(1 + sim_rng_below(&r, 2000000));
            double cap = 1e5 * (double)(1 + sim_rng_below(&r, 1000));
            sim_net_start(inc, id, now, bits, cap, path, np);
            sim_net_start(full, id, now, bits, cap, path, np);
            started++;
        }
        const int32_t *ch;
        sim_net_settle(inc, now, &ch);
        sim_net_solve_all(full, now, &ch);
        bad_maxmin += check_maxmin(inc, bps);
        sim_net_flow a[IDS], b[IDS];
        int na = sim_net_flows(inc, a), nb = sim_net_flows(full, b);
        bad_twin += na != nb || memcmp(a, b, sizeof *a * (size_t)na) != 0;
    }
    CHECK_MSG(started > 100, "seed %llu: %d flows started", (unsigned long long)seed, started);
    CHECK_MSG(bad_maxmin == 0, "seed %llu: %d max-min violations", (unsigned long long)seed,
              bad_maxmin);
    CHECK_MSG(bad_twin == 0, "seed %llu: incremental differs from full solve %d times",
              (unsigned long long)seed, bad_twin);
    CHECK_MSG(bad_left == 0, "seed %llu: %d flows ended with bits left", (unsigned long long)seed,
              bad_left);
    CHECK_MSG(bad_past == 0, "seed %llu: a finish in the past", (unsigned long long)seed);
    CHECK_MSG(bad_sum == 0, "seed %llu: %d flows delivered other than their bits",
              (unsigned long long)seed, bad_sum);
    sim_net_free(inc);
    sim_net_free(full);
}

int main(void)
{
    test_two_equal();
    test_capped();
    test_staggered();
    test_group();
    test_slack();
    for (uint64_t seed = 1; seed <= 20; seed++)
        test_random(seed);
    return CHECK_DONE();
}
