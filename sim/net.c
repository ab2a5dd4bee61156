/* sim/net.c -- max-min fair flows over shared links (net.h): the progressive-filling solver and
 * its incremental bookkeeping.
 *
 * Workload: a few shared links (the server's two, two per group) and up to a few thousand flows
 * (the jobs in flight), started and stopped a few times per job. A settle finds the touched
 * components by union-find over the links (O(flows)), then solves each in O((F + L) log(F + L)):
 * flows visited in (cap, id) order, a heap of links by fair share (entries made stale by a later
 * change of the link are skipped), each flow frozen once. The id and (cap, id) orders are kept as
 * flows start and stop (a binary search and a move of ids), not sorted at every solve.
 */
#include "sim/net.h"

#include "sim/base.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sim_net {
    int n_links;
    double *bps;     /* [n_links] capacities */
    int *dirty;      /* [n_links] touched since the last settle */
    int any_dirty;   /* some flow without shared links, or a link, was touched */
    sim_net_flow *f; /* active flows, in no particular order; finish -1: not settled yet */
    int n, cap;
    /* the active ids in increasing id, and in increasing (cap, id): the orders a solve visits
     * flows in, kept as flows come and go rather than sorted at every solve */
    int32_t *by_id, *by_cap;
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
    net->by_id = sim_xrealloc(net->by_id, sizeof(int32_t) * (size_t)net->cap);
    net->by_cap = sim_xrealloc(net->by_cap, sizeof(int32_t) * (size_t)net->cap);
}

/* 1 when flow a comes before flow b in (cap, id) order (by_cap), else by id alone */
static int before(const sim_net_flow *a, const sim_net_flow *b, int by_cap)
{
    if (by_cap && a->cap != b->cap) return a->cap < b->cap;
    return a->id < b->id;
}

/* Where f goes in order (n ids): the first position whose flow is not before f. */
static int position(const sim_net *net, const int32_t *order, int n, const sim_net_flow *f,
                    int by_cap)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (before(&net->f[net->slot[order[mid]]], f, by_cap))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void order_insert(sim_net *net, int32_t *order, const sim_net_flow *f, int by_cap)
{
    int at = position(net, order, net->n, f, by_cap);
    memmove(order + at + 1, order + at, sizeof *order * (size_t)(net->n - at));
    order[at] = f->id;
}

static void order_remove(sim_net *net, int32_t *order, const sim_net_flow *f, int by_cap)
{
    int at = position(net, order, net->n, f, by_cap);
    assert(at < net->n && order[at] == f->id);
    memmove(order + at, order + at + 1, sizeof *order * (size_t)(net->n - at - 1));
}

static void add_flow(sim_net *net, const sim_net_flow *f)
{
    assert(f->id >= 0 && f->id < net->n_ids && net->slot[f->id] < 0 && "one flow per id");
    assert(f->n_path >= 0 && f->n_path <= SIM_NET_PATH && f->cap > 0);
    grow(net);
    order_insert(net, net->by_id, f, 0);
    order_insert(net, net->by_cap, f, 1);
    net->slot[f->id] = net->n;
    net->f[net->n++] = *f;
    if (f->finish < 0) net->any_dirty = 1;
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
    order_remove(net, net->by_id, f, 0);
    order_remove(net, net->by_cap, f, 1);
    net->slot[id] = -1;
    if (s != net->n - 1) {
        net->f[s] = net->f[net->n - 1];
        net->slot[net->f[s].id] = s;
    }
    net->n--;
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

sim_time sim_net_next(const sim_net *net)
{
    sim_time t = -1;
    for (int s = 0; s < net->n; s++)
        if (net->f[s].finish >= 0 && (t < 0 || net->f[s].finish < t)) t = net->f[s].finish;
    return t;
}

int sim_net_due(const sim_net *net, sim_time now, int32_t *out)
{
    int k = 0;
    for (int i = 0; i < net->n; i++)
        if (net->f[net->slot[net->by_id[i]]].finish == now) out[k++] = net->by_id[i];
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
    /* a link's entry is pushed once at start and once per flow frozen through it */
    net->heap = sim_xrealloc(net->heap,
                             sizeof *net->heap * (size_t)(net->n_links + c * SIM_NET_PATH + 1));
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
    for (int s = 0; s < net->n; s++) {
        const sim_net_flow *f = &net->f[s];
        for (int k = 1; k < f->n_path; k++) {
            int a = find(net->uf, f->path[0]), b = find(net->uf, f->path[k]);
            if (a != b) net->uf[a > b ? a : b] = a < b ? a : b;
        }
    }
    for (int l = 0; l < L; l++)
        net->in_comp[l] = 0;
    for (int l = 0; l < L; l++)
        if (net->dirty[l]) net->in_comp[find(net->uf, l)] = 1;
    for (int l = 0; l < L; l++)
        net->in_comp[l] = net->in_comp[find(net->uf, l)];
    int m2 = 0;
    for (int i = 0; i < net->n; i++) {
        int s = net->slot[net->by_id[i]], t = net->slot[net->by_cap[i]];
        if (net->f[s].n_path > 0 && net->in_comp[net->f[s].path[0]]) net->comp[m++] = s;
        if (net->f[t].n_path > 0 && net->in_comp[net->f[t].path[0]]) net->order[m2++] = t;
    }
    assert(m == m2);
    (void)m2;
    /* the new rates, by slot: unchanged but for the components solved */
    double *rate = sim_xmalloc(sizeof(double) * (size_t)(net->n > 0 ? net->n : 1));
    for (int s = 0; s < net->n; s++)
        rate[s] = net->f[s].n_path == 0 ? net->f[s].cap : net->f[s].rate;
    if (m) solve(net, net->comp, net->order, m, rate);
    for (int i = 0; i < net->n; i++) { /* in id order: changed comes out sorted */
        int s = net->slot[net->by_id[i]];
        sim_net_flow *f = &net->f[s];
        int fresh = f->finish < 0; /* it has sent nothing yet: rem is its size */
        if (rate[s] == f->rate && !fresh) continue;
        if (!fresh) f->rem = left_at(f, now);
        if (f->rem < 0) f->rem = 0; /* its finish rounded up past its last bit */
        f->t0 = now;
        f->rate = rate[s];
        sim_time d = sim_time_from_s(f->rem / f->rate);
        if (now + d != f->finish) {
            f->finish = now + d;
            net->changed[nc++] = f->id;
        }
    }
    free(rate);
    for (int l = 0; l < L; l++)
        net->dirty[l] = 0;
    net->any_dirty = 0;
    return nc;
}

int sim_net_solve_all(sim_net *net, sim_time now, const int32_t **changed)
{
    for (int l = 0; l < net->n_links; l++)
        net->dirty[l] = 1;
    net->any_dirty = 1;
    return sim_net_settle(net, now, changed);
}

int sim_net_flows(const sim_net *net, sim_net_flow *out)
{
    for (int i = 0; i < net->n; i++)
        out[i] = net->f[net->slot[net->by_id[i]]];
    return net->n;
}

double sim_net_link_load(const sim_net *net, int l)
{
    double sum = 0; /* in id order, so the figure does not depend on storage order */
    for (int i = 0; i < net->n; i++) {
        const sim_net_flow *f = &net->f[net->slot[net->by_id[i]]];
        for (int k = 0; k < f->n_path; k++)
            if (f->path[k] == l) sum += f->rate;
    }
    return sum;
}
