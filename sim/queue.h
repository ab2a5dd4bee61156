/* sim/queue.h -- the event queue: a binary heap of events keyed by (time, seq).
 *
 * Workload: a run holds O(clients in flight) pending events (thousands; a million-client cost-only
 * run a few thousand too, since only selected clients have events), and every round pushes and pops
 * a few per job, so push/pop are O(log n) on one growable array of events stored by value, with no
 * allocation per event. seq is the push order: events at the same simulated time fire in the order
 * they were scheduled, whatever the heap's shape, which is what makes runs repeat exactly.
 */
#ifndef SIM_QUEUE_H
#define SIM_QUEUE_H

#include "sim/units.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sim_event {
    sim_time at;  /* when it fires */
    uint64_t seq; /* push order, the tie-breaker */
    int kind;     /* what happens (the engine's SIM_EV_* values) */
    int32_t who;  /* client id, or -1 for server events */
    uint64_t arg; /* kind-specific (round, job generation, ...) */
} sim_event;

typedef struct sim_queue {
    sim_event *ev; /* heap array, owned */
    size_t n, cap;
    uint64_t next_seq;
} sim_queue;

void sim_queue_init(sim_queue *q);
void sim_queue_destroy(sim_queue *q);
/* Insert; assigns seq. */
void sim_queue_push(sim_queue *q, sim_time at, int kind, int32_t who, uint64_t arg);
/* Take k seqs now for events pushed later (sim_queue_push_seq): they fire, among events at their
 * time, where events pushed now would have. Returns the first of them. */
uint64_t sim_queue_reserve(sim_queue *q, uint64_t k);
/* Insert with a seq taken by sim_queue_reserve. */
void sim_queue_push_seq(sim_queue *q, sim_time at, int kind, int32_t who, uint64_t arg,
                        uint64_t seq);
/* Remove the earliest event into *out; returns 0 when empty. */
int sim_queue_pop(sim_queue *q, sim_event *out);
/* The earliest event without removing it, or NULL. */
const sim_event *sim_queue_peek(const sim_queue *q);
/* Asserts the heap property over the whole array (tests call it after every operation). */
void sim_queue_verify(const sim_queue *q);

#endif /* SIM_QUEUE_H */
