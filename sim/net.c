/* sim/net.c -- max-min fair flows over shared links (net.h): the progressive-filling solver and
 * its incremental bookkeeping.
 *
 * Workload: a few shared links (the server's two, two per group) and up to a few thousand flows
 * (the jobs in flight), started and stopped a few times per job; a cost-only run of 1,300 jobs a
 * round settles about 740 times a round. A settle finds the touched components by union-find
 * over the links (joined by the links' pairs that flows cross: O(L + pairs)), then:
 *   - when every link in them is slack (its flows' caps fit in it with room to spare) and every
 *     settled flow there runs at its cap, the solve could only give each flow its cap: the new
 *     flows get theirs and nothing else moves (O(new flows)); most starts and ends of a round,
 *     on a link that is not full, are settled so;
 *   - else the components are solved: O(F) to gather their flows from the id and (cap, id)
 *     orders, kept as flows start and stop (a binary search and a move of slots; no pass when
 *     every flow crosses the one link solved, alone), then the
 *     filling: for one link a pass over its flows in (cap, id) order, for more a heap of links
 *     by fair share (entries made stale by a later change of the link are skipped), each flow
 *     frozen once, O((F + L) log(F + L)). Only flows whose rate changed are touched after.
 * The earliest finish is the top of a heap of (finish, id) entries, one pushed per new finish,
 * stale ones dropped as they surface, so sim_net_next and sim_net_due cost O(log F) a flow, not
 * a scan. Both kinds of settle give the same rates bit for bit as solving every component
 * whole (sim_net_solve_all, which test_sim_net checks against at every step of its random runs):
 * measured with make bench's 1M-client engine case, 1.64x the wall time without a network, where
 * re-solving the touched link at each change was 4.4x.
 */
#include "sim/net.h"

#include "sim/base.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sim_net {
    int n_links;
    double *bps;   /* [n_links] capacities */
    int *dirty;    /* [n_links] touched since the last settle */
    int any_dirty; /* some flow without shared links, or a link, was touched */
    int force;     /* sim_net_solve_all: no shortcut */
    /* per link, for the shortcut (slack): its flows, the sum of their caps and a bound on that
     * sum's rounding, and how many of its settled flows run below their cap */
    int *nflows, *held;
    int n_long; /* flows on more than one link */
    double *capsum, *caperr;
    double *load; /* the sum of its flows' rates, kept as they change (sim_net_link_loads) */
    /* flows joining two links (path[0], path[1]) and how many: the components' edges */
    struct edge {
        int a, b, n;
    } * edge;
    int n_edge, cap_edge;
    int32_t *fresh; /* the ids of the flows not settled yet (finish -1) */
    int n_fresh;
    /* the settled flows by (finish, id): a heap whose entries a later finish (or the flow's
     * end) makes stale, skipped when they surface; rebuilt when stale ones outnumber the rest */
    struct fin_ent {
        sim_time at;
        int32_t id, slot; /* the flow's slot when it was pushed */
    } * fin;
    int n_fin, cap_fin;
    struct fin_ent *due; /* sim_net_due's scratch */
    int cap_due;
    double *rate;    /* settle's scratch: the new rates by slot */
    sim_net_flow *f; /* active flows, in no particular order; finish -1: not settled yet */
    int n, cap;
    /* the active flows' slots in increasing id, and in increasing (cap, id): the orders a solve
     * visits flows in, kept as flows come and go rather than sorted at every solve (slots, not
     * ids: a scan then reads f in place, never the ids' slot table, which is as long as the
     * population) */
    int *by_id, *by_cap;
    int32_t n_ids;
    int32_t *slot;    /* [n_ids] index of id's flow in f, -1 none */
    int32_t *changed; /* settle's output */
    /* solver scratch, grown as needed */
    int *uf, *in_comp, *cnt, *start, *ver, *done, *lflows, *order, *comp, *frozen;
    double *rem;
    struct heap_ent {
        double share;
        int link, ver;
    } * heap;
    int scratch_flows;
};

sim_net *sim_net_new(int n_links, const double *bps, int32_t n_ids)
{
    sim_net *net = sim_xcalloc(1, sizeof *net);
    net->n_links = n_links;
    size_t nl = (size_t)(n_links > 0 ? n_links : 1);
    net->bps = sim_xcalloc(nl, sizeof *net->bps);
    for (int l = 0; l < n_links; l++) {
        assert(bps[l] > 0);
        net->bps[l] = bps[l];
    }
    net->dirty = sim_xcalloc(nl, sizeof(int));
    net->nflows = sim_xcalloc(nl, sizeof(int));
    net->held = sim_xcalloc(nl, sizeof(int));
    net->capsum = sim_xcalloc(nl, sizeof(double));
    net->caperr = sim_xcalloc(nl, sizeof(double));
    net->load = sim_xcalloc(nl, sizeof(double));
    net->uf = sim_xcalloc(nl, sizeof(int));
    net->in_comp = sim_xcalloc(nl, sizeof(int));
    net->cnt = sim_xcalloc(nl, sizeof(int));
    net->start = sim_xcalloc(nl + 1, sizeof(int));
    net->ver = sim_xcalloc(nl, sizeof(int));
    net->done = sim_xcalloc(nl, sizeof(int));
    net->rem = sim_xcalloc(nl, sizeof(double));
    net->n_ids = n_ids;
    net->slot = sim_xmalloc(sizeof(int32_t) * (size_t)(n_ids > 0 ? n_ids : 1));
    for (int32_t i = 0; i < n_ids; i++)
        net->slot[i] = -1;
    return net;
}

void sim_net_free(sim_net *net)
{
    if (!net) return;
    free(net->bps);
    free(net->dirty);
    free(net->nflows);
    free(net->held);
    free(net->capsum);
    free(net->caperr);
    free(net->load);
    free(net->edge);
    free(net->fresh);
    free(net->fin);
    free(net->due);
    free(net->rate);
    free(net->f);
    free(net->by_id);
    free(net->by_cap);
    free(net->slot);
    free(net->changed);
    free(net->uf);
    free(net->in_comp);
    free(net->cnt);
    free(net->start);
    free(net->ver);
    free(net->done);
    free(net->rem);
    free(net->lflows);
    free(net->order);
    free(net->comp);
    free(net->frozen);
    free(net->heap);
    free(net);
}

static void grow(sim_net *net)
{
    if (net->n < net->cap) return;
    net->cap = net->cap ? 2 * net->cap : 64;
    net->f = sim_xrealloc(net->f, sizeof *net->f * (size_t)net->cap);
    net->by_id = sim_xrealloc(net->by_id, sizeof(int) * (size_t)net->cap);
    net->by_cap = sim_xrealloc(net->by_cap, sizeof(int) * (size_t)net->cap);
    net->fresh = sim_xrealloc(net->fresh, sizeof(int32_t) * (size_t)net->cap);
}

/* 1 when flow a comes before flow b in (cap, id) order (by_cap), else by id alone */
static int before(const sim_net_flow *a, const sim_net_flow *b, int by_cap)
{
    if (by_cap && a->cap != b->cap) return a->cap < b->cap;
    return a->id < b->id;
}

/* Where f goes in order (n slots): the first position whose flow is not before f. */
static int position(const sim_net *net, const int *order, int n, const sim_net_flow *f, int by_cap)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (before(&net->f[order[mid]], f, by_cap))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* f, in slot s, joins order (of net->n slots). */
static void order_insert(sim_net *net, int *order, const sim_net_flow *f, int s, int by_cap)
{
    int at = position(net, order, net->n, f, by_cap);
    memmove(order + at + 1, order + at, sizeof *order * (size_t)(net->n - at));
    order[at] = s;
}

/* Slot s leaves order (of net->n slots). */
static void order_remove(sim_net *net, int *order, int s, int by_cap)
{
    int at = position(net, order, net->n, &net->f[s], by_cap);
    assert(at < net->n && order[at] == s);
    memmove(order + at, order + at + 1, sizeof *order * (size_t)(net->n - at - 1));
}

/* The flow in the last slot moved to slot s: order (of n slots) says so. */
static void order_move(sim_net *net, int *order, int n, int s, int by_cap)
{
    int at = position(net, order, n, &net->f[s], by_cap);
    assert(at < n && order[at] == net->n - 1);
    order[at] = s;
}

/* ---------------------------------------------------------------------------------------- */
/* the finish heap */

static int fin_less(const struct fin_ent *a, const struct fin_ent *b)
{
    return a->at < b->at || (a->at == b->at && a->id < b->id);
}

static void fin_push(sim_net *net, sim_time at, int32_t id, int32_t slot)
{
    if (net->n_fin == net->cap_fin) {
        net->cap_fin = net->cap_fin ? 2 * net->cap_fin : 64;
        net->fin = sim_xrealloc(net->fin, sizeof *net->fin * (size_t)net->cap_fin);
    }
    struct fin_ent e = {at, id, slot}, *h = net->fin;
    int i = net->n_fin++;
    while (i > 0 && fin_less(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static struct fin_ent fin_pop(sim_net *net)
{
    struct fin_ent *h = net->fin, top = h[0], last = h[--net->n_fin];
    int i = 0, n = net->n_fin;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && fin_less(&h[c + 1], &h[c])) c++;
        if (!fin_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n > 0) h[i] = last;
    return top;
}

/* An entry is live while its flow is in the slot it names and still due then (a flow moved to
 * another slot has an entry for that one: the ids' slot table, as long as the population, is
 * not read). */
static int fin_live(const sim_net *net, struct fin_ent e)
{
    return e.slot < net->n && net->f[e.slot].id == e.id && net->f[e.slot].finish == e.at;
}

/* The flow in slot s has a new finish, or a new slot: an entry for it, and the heap rebuilt
 * when stale entries dominate. */
static void fin_note(sim_net *net, int s)
{
    if (net->n_fin >= 2 * net->n + 64) {
        net->n_fin = 0;
        for (int t = 0; t < net->n; t++)
            if (net->f[t].finish >= 0 && t != s) fin_push(net, net->f[t].finish, net->f[t].id, t);
    }
    fin_push(net, net->f[s].finish, net->f[s].id, s);
}

/* ---------------------------------------------------------------------------------------- */
/* per-link bookkeeping */

static int below_cap(const sim_net_flow *f)
{
    return f->finish >= 0 && f->rate != f->cap;
}

/* f joins (sign 1) or leaves (-1) its links. */
static void account(sim_net *net, const sim_net_flow *f, int sign)
{
    for (int k = 0; k < f->n_path; k++) {
        int l = f->path[k];
        net->nflows[l] += sign;
        net->held[l] += sign * below_cap(f);
        if (net->nflows[l] == 0) {
            net->capsum[l] = net->caperr[l] = net->load[l] = 0;
        } else {
            net->capsum[l] += sign * f->cap;
            net->caperr[l] += DBL_EPSILON * fabs(net->capsum[l]);
            if (f->rate != 0) net->load[l] += sign * f->rate;
        }
    }
    net->n_long += sign * (f->n_path > 1);
    if (f->n_path < 2 || f->path[0] == f->path[1]) return;
    int a = f->path[0], b = f->path[1], i = 0;
    while (i < net->n_edge && (net->edge[i].a != a || net->edge[i].b != b))
        i++;
    if (i == net->n_edge) {
        assert(sign > 0);
        if (net->n_edge == net->cap_edge) {
            net->cap_edge = net->cap_edge ? 2 * net->cap_edge : 8;
            net->edge = sim_xrealloc(net->edge, sizeof *net->edge * (size_t)net->cap_edge);
        }
        net->edge[net->n_edge++] = (struct edge){a, b, 0};
    }
    net->edge[i].n += sign;
    if (net->edge[i].n == 0) net->edge[i] = net->edge[--net->n_edge];
}

static void add_flow(sim_net *net, const sim_net_flow *f)
{
    assert(f->id >= 0 && f->id < net->n_ids && net->slot[f->id] < 0 && "one flow per id");
    assert(f->n_path >= 0 && f->n_path <= SIM_NET_PATH && f->cap > 0);
    grow(net);
    order_insert(net, net->by_id, f, net->n, 0);
    order_insert(net, net->by_cap, f, net->n, 1);
    net->slot[f->id] = net->n;
    net->f[net->n++] = *f;
    account(net, f, 1);
    if (f->finish < 0) {
        net->any_dirty = 1;
        net->fresh[net->n_fresh++] = f->id;
    } else {
        fin_note(net, net->n - 1);
    }
}

void sim_net_start(sim_net *net, int32_t id, sim_time now, double bits, double cap, const int *path,
                   int n_path)
{
    assert(bits > 0);
    sim_net_flow f = {.id = id,
                      .n_path = n_path,
                      .cap = cap,
                      .size = bits,
                      .rem = bits,
                      .t0 = now,
                      .finish = -1};
    for (int k = 0; k < n_path; k++) {
        assert(path[k] >= 0 && path[k] < net->n_links);
        f.path[k] = path[k];
        net->dirty[path[k]] = 1;
    }
    add_flow(net, &f);
}

void sim_net_restore(sim_net *net, const sim_net_flow *f)
{
    add_flow(net, f);
}

int sim_net_dirty_links(const sim_net *net, int *out)
{
    int k = 0;
    for (int l = 0; l < net->n_links; l++)
        if (net->dirty[l]) out[k++] = l;
    return k;
}

void sim_net_mark(sim_net *net, int l)
{
    assert(l >= 0 && l < net->n_links);
    net->dirty[l] = 1;
    net->any_dirty = 1;
}

int sim_net_links(const sim_net *net)
{
    return net->n_links;
}

/* Bits f has left at now >= t0. */
static double left_at(const sim_net_flow *f, sim_time now)
{
    assert(now >= f->t0);
    return f->rem - f->rate * ((double)(now - f->t0) * 1e-9);
}

double sim_net_stop(sim_net *net, int32_t id, sim_time now)
{
    assert(id >= 0 && id < net->n_ids && net->slot[id] >= 0 && "no flow to stop");
    int s = net->slot[id];
    sim_net_flow *f = &net->f[s];
    double left = left_at(f, now);
    for (int k = 0; k < f->n_path; k++)
        net->dirty[f->path[k]] = 1;
    net->any_dirty = 1;
    account(net, f, -1);
    if (f->finish < 0) {
        int i = 0;
        while (net->fresh[i] != id)
            i++;
        net->fresh[i] = net->fresh[--net->n_fresh];
    }
    order_remove(net, net->by_id, s, 0);
    order_remove(net, net->by_cap, s, 1);
    net->slot[id] = -1;
    if (s != net->n - 1) {
        net->f[s] = net->f[net->n - 1];
        net->slot[net->f[s].id] = s;
        order_move(net, net->by_id, net->n - 1, s, 0);
        order_move(net, net->by_cap, net->n - 1, s, 1);
    }
    net->n--;
    if (s < net->n && net->f[s].finish >= 0) fin_note(net, s);
    return left;
}

const sim_net_flow *sim_net_flow_of(const sim_net *net, int32_t id)
{
    assert(id >= 0 && id < net->n_ids);
    return net->slot[id] < 0 ? NULL : &net->f[net->slot[id]];
}

sim_time sim_net_finish(const sim_net *net, int32_t id)
{
    const sim_net_flow *f = sim_net_flow_of(net, id);
    return f ? f->finish : -1;
}

sim_time sim_net_next(sim_net *net)
{
    while (net->n_fin > 0 && !fin_live(net, net->fin[0]))
        fin_pop(net);
    return net->n_fin > 0 ? net->fin[0].at : -1;
}

static int cmp_id(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int sim_net_due(sim_net *net, sim_time now, int32_t *out)
{
    /* the live entries up to now come off the heap (the stale ones for good) in (finish, id)
     * order, so those due now come in id order, an entry there twice (a finish moved away and
     * back) next to itself; they all go back */
    if (net->cap_due < net->n_fin) {
        net->cap_due = net->n_fin;
        net->due = sim_xrealloc(net->due, sizeof *net->due * (size_t)net->cap_due);
    }
    int m = 0, k = 0;
    while (net->n_fin > 0 && net->fin[0].at <= now) {
        struct fin_ent e = fin_pop(net);
        if (fin_live(net, e) &&
            (m == 0 || e.at != net->due[m - 1].at || e.id != net->due[m - 1].id))
            net->due[m++] = e;
    }
    for (int i = 0; i < m; i++) {
        fin_push(net, net->due[i].at, net->due[i].id, net->due[i].slot);
        if (net->due[i].at == now) out[k++] = net->due[i].id;
    }
    return k;
}

int sim_net_count(const sim_net *net)
{
    return net->n;
}

static int find(int *uf, int l)
{
    while (uf[l] != l) {
        uf[l] = uf[uf[l]];
        l = uf[l];
    }
    return l;
}

/* ---------------------------------------------------------------------------------------- */
/* the solver */

static int heap_less(const struct heap_ent *a, const struct heap_ent *b)
{
    return a->share < b->share || (a->share == b->share && a->link < b->link);
}

static void heap_push(struct heap_ent *h, int *n, struct heap_ent e)
{
    int i = (*n)++;
    while (i > 0 && heap_less(&e, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static struct heap_ent heap_pop(struct heap_ent *h, int *n)
{
    struct heap_ent top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* Link l's fair share now: what is left of it split over its flows not yet frozen. */
static void push_share(sim_net *net, struct heap_ent *h, int *nh, int l)
{
    net->ver[l]++;
    if (net->cnt[l] > 0 && !net->done[l])
        heap_push(h, nh, (struct heap_ent){net->rem[l] / net->cnt[l], l, net->ver[l]});
}

/* Freeze flow slot s at rate r: its links lose r and a flow, except `skip` (being frozen whole). */
static void freeze(sim_net *net, struct heap_ent *h, int *nh, int s, double r, int skip,
                   double *rate)
{
    net->frozen[s] = 1;
    rate[s] = r;
    const sim_net_flow *f = &net->f[s];
    for (int k = 0; k < f->n_path; k++) {
        int l = f->path[k];
        if (l == skip) continue;
        net->rem[l] -= r;
        net->cnt[l]--;
        push_share(net, h, nh, l);
    }
}

/* Progressive filling over the m flow slots comp[] (in id order; order[]: the same in (cap, id)
 * order) and the links they cross (in_comp set): their new rates into rate[slot]. */
static void solve(sim_net *net, const int *comp, const int *order, int m, double *rate)
{
    int L = net->n_links;
    for (int l = 0; l < L; l++)
        if (net->in_comp[l]) {
            net->rem[l] = net->bps[l];
            net->cnt[l] = 0;
            net->done[l] = 0;
        }
    for (int i = 0; i < m; i++) {
        const sim_net_flow *f = &net->f[comp[i]];
        net->frozen[comp[i]] = 0;
        for (int k = 0; k < f->n_path; k++)
            net->cnt[f->path[k]]++;
    }
    /* each link's flows, in id order (CSR) */
    net->start[0] = 0;
    for (int l = 0; l < L; l++)
        net->start[l + 1] = net->start[l] + (net->in_comp[l] ? net->cnt[l] : 0);
    int *pos = net->ver; /* borrowed as fill cursors, reset below */
    for (int l = 0; l < L; l++)
        pos[l] = net->start[l];
    for (int i = 0; i < m; i++) {
        const sim_net_flow *f = &net->f[comp[i]];
        for (int k = 0; k < f->n_path; k++)
            net->lflows[pos[f->path[k]]++] = comp[i];
    }
    int nh = 0;
    struct heap_ent *h = net->heap;
    for (int l = 0; l < L; l++) {
        net->ver[l] = 0;
        if (net->in_comp[l]) push_share(net, h, &nh, l);
    }
    int next = 0, left = m;
    while (left > 0) {
        while (next < m && net->frozen[order[next]])
            next++;
        while (nh > 0 && (h[0].ver != net->ver[h[0].link] || net->done[h[0].link]))
            heap_pop(h, &nh);
        double cmin = next < m ? net->f[order[next]].cap : INFINITY;
        if (nh == 0 || cmin <= h[0].share) { /* a flow reaches its own cap first */
            assert(next < m);
            freeze(net, h, &nh, order[next], cmin, -1, rate);
            left--;
            continue;
        }
        struct heap_ent b = heap_pop(h, &nh); /* the bottleneck: its flows get its share */
        net->done[b.link] = 1;
        for (int j = net->start[b.link]; j < net->start[b.link + 1]; j++) {
            int s = net->lflows[j];
            if (net->frozen[s]) continue;
            freeze(net, h, &nh, s, b.share, b.link, rate);
            left--;
        }
    }
}

/* solve for a component of one link l, whose m flows cross it alone (order: their slots in
 * (cap, id) order): the same filling without the heap of shares, so the same operations in the
 * same order, the same rates bit for bit. */
static void solve_link(sim_net *net, int l, const int *order, int m, double *rate)
{
    double rem = net->bps[l];
    int i = 0;
    for (; i < m; i++) {
        double cap = net->f[order[i]].cap, share = rem / (m - i);
        if (cap > share) break;
        rate[order[i]] = cap;
        rem -= cap;
    }
    if (i == m) return;
    double share = rem / (m - i);
    for (; i < m; i++)
        rate[order[i]] = share;
}

static void scratch(sim_net *net)
{
    if (net->scratch_flows >= net->n && net->lflows) return;
    int c = net->cap > 64 ? net->cap : 64;
    net->scratch_flows = c;
    net->lflows = sim_xrealloc(net->lflows, sizeof(int) * (size_t)c * SIM_NET_PATH);
    net->order = sim_xrealloc(net->order, sizeof(int) * (size_t)c);
    net->comp = sim_xrealloc(net->comp, sizeof(int) * (size_t)c);
    net->frozen = sim_xrealloc(net->frozen, sizeof(int) * (size_t)c);
    net->changed = sim_xrealloc(net->changed, sizeof(int32_t) * (size_t)c);
    net->rate = sim_xrealloc(net->rate, sizeof(double) * (size_t)c);
    /* a link's entry is pushed once at start and once per flow frozen through it */
    net->heap = sim_xrealloc(net->heap,
                             sizeof *net->heap * (size_t)(net->n_links + c * SIM_NET_PATH + 1));
}

/* The touched components can be settled without a solve: every link in them is slack (its
 * flows' caps sum below its capacity by more than a solve's rounding could reach: 4 x (k + 4)
 * ulps of the capacity for k flows; the solver's rounding after j flows frozen is at most
 * (j + 1) ulps of it, so every step of the filling sees its links' shares above the lowest cap
 * and freezes that flow at its cap) and every settled flow in them already runs at its cap. So
 * the solve would give each flow its cap and change no settled flow: only the new ones need a
 * rate, which is what a start or an end on an uncongested link costs. */
static int slack(const sim_net *net)
{
    for (int l = 0; l < net->n_links; l++) {
        if (!net->in_comp[l] || net->nflows[l] == 0) continue;
        double c = net->bps[l], margin = 4.0 * (net->nflows[l] + 4) * DBL_EPSILON * c;
        if (net->held[l] > 0 || !(net->capsum[l] + net->caperr[l] + margin <= c)) return 0;
    }
    return 1;
}

/* Flow slot s runs at rate from now: its bits left, its finish and the links' counts of flows
 * held below their caps follow. Returns 1 when its finish changed. */
static int set_rate(sim_net *net, int s, double rate, sim_time now)
{
    sim_net_flow *f = &net->f[s];
    int fresh = f->finish < 0; /* it has sent nothing yet: rem is its size */
    int was = below_cap(f);
    if (!fresh) f->rem = left_at(f, now);
    if (f->rem < 0) f->rem = 0; /* its finish rounded up past its last bit */
    f->t0 = now;
    for (int k = 0; k < f->n_path; k++)
        net->load[f->path[k]] += rate - f->rate;
    f->rate = rate;
    sim_time d = sim_time_from_s(f->rem / f->rate);
    int moved = now + d != f->finish;
    f->finish = now + d;
    for (int k = 0; k < f->n_path; k++)
        net->held[f->path[k]] += below_cap(f) - was;
    if (moved) fin_note(net, s);
    return moved;
}

int sim_net_settle(sim_net *net, sim_time now, const int32_t **changed)
{
    *changed = net->changed;
    if (!net->any_dirty) return 0;
    scratch(net); /* may move changed */
    *changed = net->changed;
    int L = net->n_links, nc = 0, m = 0;
    for (int l = 0; l < L; l++)
        net->uf[l] = l;
    for (int i = 0; i < net->n_edge; i++) {
        int a = find(net->uf, net->edge[i].a), b = find(net->uf, net->edge[i].b);
        if (a != b) net->uf[a > b ? a : b] = a < b ? a : b;
    }
    for (int l = 0; l < L; l++)
        net->in_comp[l] = 0;
    for (int l = 0; l < L; l++)
        if (net->dirty[l]) net->in_comp[find(net->uf, l)] = 1;
    for (int l = 0; l < L; l++)
        net->in_comp[l] = net->in_comp[find(net->uf, l)];
    if (!net->force && slack(net)) {
        if (net->n_fresh > 1) qsort(net->fresh, (size_t)net->n_fresh, sizeof(int32_t), cmp_id);
        for (int i = 0; i < net->n_fresh; i++) {
            int s = net->slot[net->fresh[i]];
            if (set_rate(net, s, net->f[s].cap, now)) net->changed[nc++] = net->fresh[i];
        }
    } else {
        int m2 = 0, one = -1, longer = 0; /* one: the only link solved, or -2 */
        for (int l = 0; l < L; l++)
            if (net->in_comp[l]) one = one == -1 ? l : -2;
        /* the flows solved, in id and in (cap, id) order: every flow when all cross that one
         * link alone (no pass needed), else gathered */
        const int *comp = net->comp, *order = net->order;
        if (one >= 0 && net->n_long == 0 && net->nflows[one] == net->n) {
            comp = net->by_id;
            order = net->by_cap;
            m = net->n;
        }
        for (int i = 0; comp == net->comp && i < net->n; i++) {
            int s = net->by_id[i], t = net->by_cap[i];
            if (net->f[s].n_path > 0 && net->in_comp[net->f[s].path[0]]) {
                net->comp[m++] = s;
                longer |= net->f[s].n_path > 1; /* a link twice on a path */
            }
            if (net->f[t].n_path > 0 && net->in_comp[net->f[t].path[0]]) net->order[m2++] = t;
        }
        assert(comp != net->comp || m == m2);
        (void)m2;
        /* the new rates, by slot, of the flows solved (every one of them gets one); the rest
         * keep theirs, but for new flows on no shared link, which run at their caps */
        double *rate = net->rate;
        if (m && one >= 0 && !longer && !net->force)
            solve_link(net, one, order, m, rate);
        else if (m)
            solve(net, comp, order, m, rate);
        int nf = 0;
        for (int i = 0; i < net->n_fresh; i++) {
            int s = net->slot[net->fresh[i]];
            if (net->f[s].n_path == 0) {
                rate[s] = net->f[s].cap;
                net->fresh[nf++] = net->fresh[i];
            }
        }
        if (nf > 1) qsort(net->fresh, (size_t)nf, sizeof(int32_t), cmp_id);
        /* both lists in id order, merged: changed comes out sorted */
        for (int i = 0, j = 0; i < m || j < nf;) {
            int s = j == nf || (i < m && net->f[comp[i]].id < net->fresh[j])
                            ? comp[i++]
                            : net->slot[net->fresh[j++]];
            if (rate[s] == net->f[s].rate && net->f[s].finish >= 0) continue;
            if (set_rate(net, s, rate[s], now)) net->changed[nc++] = net->f[s].id;
        }
        /* a solved link's cap sum afresh once its rounding bound nears slack's margin */
        int redo = 0;
        for (int l = 0; l < L; l++)
            redo |= net->in_comp[l] &&
                    net->caperr[l] > (net->nflows[l] + 4) * DBL_EPSILON * net->bps[l];
        for (int l = 0; l < L && redo; l++)
            if (net->in_comp[l]) net->capsum[l] = 0;
        for (int i = 0; i < m && redo; i++) {
            const sim_net_flow *f = &net->f[comp[i]];
            for (int k = 0; k < f->n_path; k++)
                net->capsum[f->path[k]] += f->cap;
        }
        for (int l = 0; l < L && redo; l++)
            if (net->in_comp[l]) net->caperr[l] = DBL_EPSILON * net->nflows[l] * net->capsum[l];
    }
    net->n_fresh = 0;
    for (int l = 0; l < L; l++)
        net->dirty[l] = 0;
    net->any_dirty = 0;
    net->force = 0;
    return nc;
}

int sim_net_solve_all(sim_net *net, sim_time now, const int32_t **changed)
{
    for (int l = 0; l < net->n_links; l++)
        net->dirty[l] = 1;
    net->any_dirty = 1;
    net->force = 1;
    return sim_net_settle(net, now, changed);
}

int sim_net_flows(const sim_net *net, sim_net_flow *out)
{
    for (int i = 0; i < net->n; i++)
        out[i] = net->f[net->by_id[i]];
    return net->n;
}

void sim_net_link_loads(const sim_net *net, double *out)
{
    memcpy(out, net->load, sizeof *out * (size_t)net->n_links);
}

void sim_net_restore_loads(sim_net *net, const double *load)
{
    memcpy(net->load, load, sizeof *load * (size_t)net->n_links);
}

double sim_net_link_load(const sim_net *net, int l)
{
    double sum = 0; /* in id order, so the figure does not depend on storage order */
    for (int i = 0; i < net->n; i++) {
        const sim_net_flow *f = &net->f[net->by_id[i]];
        for (int k = 0; k < f->n_path; k++)
            if (f->path[k] == l) sum += f->rate;
    }
    return sum;
}
