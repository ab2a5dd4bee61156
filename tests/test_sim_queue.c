/* tests/test_sim_queue.c -- the event heap against a sorted reference over 5·10^4 seeded random
 * operations, and FIFO order among events at the same time. */
#include "sim/queue.h"
#include "sim/rng.h"
#include "tests/check.h"

#include <stdlib.h>

/* index of the earliest (at, seq) in ref: the naive reference for pop */
static size_t earliest(const sim_event *ref, size_t n)
{
    size_t m = 0;
    for (size_t i = 1; i < n; i++)
        if (ref[i].at < ref[m].at || (ref[i].at == ref[m].at && ref[i].seq < ref[m].seq)) m = i;
    return m;
}

int main(void)
{
    sim_queue q;
    sim_queue_init(&q);
    /* ties fire in push order */
    for (int i = 0; i < 5; i++)
        sim_queue_push(&q, 100, i, i, (uint64_t)i);
    sim_queue_push(&q, 50, 9, 9, 9);
    sim_event e;
    CHECK(sim_queue_pop(&q, &e) && e.at == 50);
    int fifo = 1;
    for (int i = 0; i < 5; i++)
        fifo &= sim_queue_pop(&q, &e) && e.who == i;
    CHECK_MSG(fifo, "equal times pop in push order");
    CHECK(!sim_queue_pop(&q, &e));
    CHECK(sim_queue_peek(&q) == NULL);

    /* random pushes and pops against a sorted copy of what is inside */
    sim_rng r;
    sim_rng_seed(&r, 11, SIM_RNG_TEST, 0);
    enum { OPS = 50000 };
    sim_event *ref = malloc(sizeof *ref * OPS);
    size_t nref = 0;
    int bad = 0, verified = 0;
    for (int op = 0; op < OPS; op++) {
        if (nref == 0 || sim_rng_uniform(&r) < 0.6) {
            sim_time at = (sim_time)sim_rng_below(&r, 1000); /* many ties */
            uint64_t seq = q.next_seq;
            sim_queue_push(&q, at, 0, 0, seq);
            ref[nref++] = (sim_event){at, seq, 0, 0, seq};
        } else {
            size_t m = earliest(ref, nref);
            sim_queue_pop(&q, &e);
            bad += e.at != ref[m].at || e.seq != ref[m].seq;
            ref[m] = ref[--nref];
        }
        if (op % 1000 == 0) {
            sim_queue_verify(&q);
            verified++;
        }
    }
    CHECK_EQ_I64(bad, 0);
    CHECK_EQ_I64((long long)q.n, (long long)nref);
    CHECK(verified == OPS / 1000);
    free(ref);
    sim_queue_destroy(&q);
    return CHECK_DONE();
}
