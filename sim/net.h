/* sim/net.h -- a flow-level network (SimGrid's model): transfers are flows that share links by
 * max-min fairness, their rates recomputed when a flow starts or ends.
 *
 * Links are the shared ones (the server's up and down links, a group's such as a cell or an
 * access point), each with a capacity in bit/s. A flow is one transfer of one id (the engine's
 * client: an id has at most one flow at a time) over up to SIM_NET_PATH shared links, capped by
 * its own access link (its client's bandwidth), which no other flow uses and so is a bound on the
 * flow's rate rather than a link of the model. Rates are max-min fair (progressive filling: every
 * flow's rate rises together until a link fills or a flow reaches its cap; those flows are frozen
 * and the rest go on), so no link is over its capacity and a flow's rate can only rise by
 * lowering a smaller one's.
 *
 * Incremental: a start or a stop marks the links of its path; sim_net_settle re-solves only the
 * connected components of links (links joined by a flow crossing both) that hold a marked link,
 * and only the flows whose rate changed get a new finish; a component whose links all have room
 * for their flows' caps, its flows all at their caps, needs no solve at all (net.c). A flow keeps
 * its rate until then, so a caller starting many flows at one instant settles once, after the
 * last.
 *
 * Exactness and determinism: a flow holds its bits left at t0 and its rate since t0 (both
 * double); its bits left at t are rem - rate * (t - t0) / 1e9, taken as the new rem (t0 = t) only
 * when its rate changes, so bits are not lost to repeated rounding. Its finish is t0 + the
 * duration rem / rate seconds rounded to the nearest ns (sim_time_from_s), so a flow alone on its
 * access link ends exactly when the old model (latency + 8 x bytes / bandwidth, dev_price) says,
 * less the latency, which the caller adds. A solve visits flows in increasing id and links in
 * increasing index (ties between equal shares: the lower link first; a cap equal to the lowest
 * share: the cap first), never in storage or pointer order, so the same flows give the same rates
 * bit for bit, whether solved incrementally or all at once (sim_net_solve_all).
 */
#ifndef SIM_NET_H
#define SIM_NET_H

#include "sim/units.h"

#include <stdint.h>

#define SIM_NET_PATH 2 /* shared links a flow may cross: a group's and the server's */

typedef struct sim_net sim_net;

/* One flow as it is (checkpoints; tests). */
typedef struct sim_net_flow {
    int32_t id;
    int n_path;
    int path[SIM_NET_PATH]; /* shared links, in the order given */
    double cap;             /* its own access link, bit/s (> 0) */
    double size;            /* bits sent in all */
    double rem;             /* bits left at t0 */
    double rate;            /* bit/s since t0 (0 until its first settle) */
    sim_time t0, finish;    /* finish: t0 + rem / rate; -1 until its first settle */
} sim_net_flow;

/* A network of n_links shared links of capacity bps[l] (> 0; INFINITY: unlimited) for flows of
 * ids 0 .. n_ids - 1. */
sim_net *sim_net_new(int n_links, const double *bps, int32_t n_ids);
void sim_net_free(sim_net *net);

/* Start id's flow at now: bits (> 0) through path[0 .. n_path) under its own cap (bit/s > 0). It
 * has no rate, and sends nothing, until the next sim_net_settle, which is meant to come at the
 * same instant (after every change at that instant). id must have no flow. */
void sim_net_start(sim_net *net, int32_t id, sim_time now, double bits, double cap, const int *path,
                   int n_path);
/* End id's flow at now (its finish, or earlier: the transfer is abandoned) and return the bits it
 * had left then (0 up to the rounding of its finish to the ns). */
double sim_net_stop(sim_net *net, int32_t id, sim_time now);
/* Re-solve the components touched since the last settle, at now. The ids whose finish changed
 * (new flows among them) go to *changed, in increasing order (valid until the next call); returns
 * how many. */
int sim_net_settle(sim_net *net, sim_time now, const int32_t **changed);
/* Mark every link, then settle: the full solve the incremental one must equal (tests). */
int sim_net_solve_all(sim_net *net, sim_time now, const int32_t **changed);

/* id's flow, or NULL when it has none. */
const sim_net_flow *sim_net_flow_of(const sim_net *net, int32_t id);
/* When id's flow ends at its current rate, or -1 when it has none. */
sim_time sim_net_finish(const sim_net *net, int32_t id);
/* The earliest finish of a flow, or -1 when none is settled (not const: it drops the stale
 * entries of its heap of finishes on the way). */
sim_time sim_net_next(sim_net *net);
/* The ids whose flows finish at now, in increasing id, into out (room for sim_net_count); how
 * many. (Not const, as sim_net_next.) */
int sim_net_due(sim_net *net, sim_time now, int32_t *out);
/* The flows now, in increasing id, into out (room for sim_net_count); returns how many. */
int sim_net_flows(const sim_net *net, sim_net_flow *out);
int sim_net_count(const sim_net *net);
/* Restore a flow as sim_net_flows gave it (a checkpoint), rate and finish included, without
 * solving, and the links sim_net_dirty_links gave marked again: a net restored so is as it was,
 * changes not yet settled included. */
void sim_net_restore(sim_net *net, const sim_net_flow *f);
/* The links changed since the last settle, into out (room for sim_net_links); how many. */
int sim_net_dirty_links(const sim_net *net, int *out);
void sim_net_mark(sim_net *net, int l);
int sim_net_links(const sim_net *net);
/* The sum of the current rates on link l (bit/s). */
double sim_net_link_load(const sim_net *net, int l);
/* Every link's load into out[sim_net_links], as kept while rates change (a flow's change of
 * rate added, its end subtracted, 0 when the link has no flow): the same changes give the same
 * figures bit for bit, and so does a net restored with sim_net_restore_loads of what this gave
 * when it was saved (a restore of flows alone sums them in id order, which may round otherwise). */
void sim_net_link_loads(const sim_net *net, double *out);
void sim_net_restore_loads(sim_net *net, const double *load);

#endif /* SIM_NET_H */
