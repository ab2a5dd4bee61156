/* sim/queue.c -- binary min-heap of sim_event ordered by (at, seq) (see queue.h). */
#include "sim/queue.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static int before(const sim_event *a, const sim_event *b)
{
    return a->at != b->at ? a->at < b->at : a->seq < b->seq;
}

void sim_queue_init(sim_queue *q)
{
    memset(q, 0, sizeof *q);
}

void sim_queue_destroy(sim_queue *q)
{
    if (!q) return;
    free(q->ev);
    memset(q, 0, sizeof *q);
}

void sim_queue_push(sim_queue *q, sim_time at, int kind, int32_t who, uint64_t arg)
{
    sim_queue_push_seq(q, at, kind, who, arg, q->next_seq++);
}

uint64_t sim_queue_reserve(sim_queue *q, uint64_t k)
{
    uint64_t first = q->next_seq;
    q->next_seq += k;
    return first;
}

void sim_queue_push_seq(sim_queue *q, sim_time at, int kind, int32_t who, uint64_t arg,
                        uint64_t seq)
{
    assert(seq < q->next_seq && "a seq not yet taken");
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        q->ev = sim_xrealloc(q->ev, q->cap * sizeof *q->ev);
    }
    sim_event e = {at, seq, kind, who, arg};
    size_t i = q->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&e, &q->ev[parent])) break;
        q->ev[i] = q->ev[parent];
        i = parent;
    }
    q->ev[i] = e;
}

int sim_queue_pop(sim_queue *q, sim_event *out)
{
    if (!q->n) return 0;
    *out = q->ev[0];
    sim_event last = q->ev[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && before(&q->ev[c + 1], &q->ev[c])) c++;
        if (!before(&q->ev[c], &last)) break;
        q->ev[i] = q->ev[c];
        i = c;
    }
    if (q->n) q->ev[i] = last;
    return 1;
}

const sim_event *sim_queue_peek(const sim_queue *q)
{
    return q->n ? &q->ev[0] : NULL;
}

void sim_queue_verify(const sim_queue *q)
{
    for (size_t i = 1; i < q->n; i++)
        assert(!before(&q->ev[i], &q->ev[(i - 1) / 2]) && "heap property");
    (void)q;
}
