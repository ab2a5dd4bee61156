/* sim/eval.c -- evaluation (engine.h): the global model on the test set and every client's (or
 * eval.clients' sample's) personalized model on its own split, under each eval.shift, by the
 * algorithm's base evaluation and on its validation split; one metrics.tsv row each time. An
 * observer: it costs no simulated time, and spreads over the worker processes' count
 * (sim/fanout.h).
 */
#include "sim/engine_int.h"

#include "nn/train.h"
#include "sim/fanout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether metrics.tsv has the base columns: the algorithm names a base and clients are
 * evaluated on their own splits. */
int sim_eng_has_base(const sim_engine *e)
{
    return e->spec.algo->base && e->spec.eval.personalized;
}

/* Whether metrics.tsv has acc_val_mean: clients are evaluated on their own splits and the
 * partition sets validation splits apart (partition.local_val). */
int sim_eng_has_val(const sim_engine *e)
{
    return e->spec.eval.personalized && e->spec.env.part->val_idx;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* eval.shift: client c's split under shift p keeps its size; a random round(p·n) of its samples
 * are replaced by samples drawn without replacement from the pool of every client's split (the
 * paper's meta-distribution). The draws come from the stream (seed, SIM_RNG_SHIFT, c) and are
 * nested: a larger p replaces the same samples and more, so every method and run sees the same
 * shifted sets. */
void sim_eng_build_shifts(sim_engine *e)
{
    const nn_partition *part = e->spec.env.part;
    int ns = e->spec.eval.n_shift;
    size_t pool_n = 0;
    for (int c = 0; c < e->n; c++)
        pool_n += (size_t)(part->n_test[c] > 0 ? part->n_test[c] : 0);
    int32_t *pool = sim_xmalloc(sizeof(int32_t) * (pool_n + 1)),
            *draw = sim_xmalloc(sizeof(int32_t) * (pool_n + 1));
    for (int c = 0, k = 0; c < e->n; c++)
        for (int j = 0; j < part->n_test[c]; j++)
            pool[k++] = part->test_idx[c][j];
    e->shift_idx = sim_xcalloc((size_t)ns * (size_t)e->n, sizeof *e->shift_idx);
    for (int c = 0; c < e->n; c++) {
        int n = part->n_test[c];
        if (n <= 0) continue;
        sim_rng r;
        sim_rng_seed(&r, e->spec.seed, SIM_RNG_SHIFT, (uint64_t)c);
        uint32_t *where = sim_xmalloc(sizeof(uint32_t) * (size_t)n);
        for (int j = 0; j < n; j++)
            where[j] = (uint32_t)j;
        sim_rng_shuffle_u32(&r, where, (size_t)n);
        memcpy(draw, pool, sizeof(int32_t) * pool_n);
        for (size_t j = 0; j < (size_t)n && j < pool_n; j++) { /* partial Fisher-Yates */
            size_t q = j + (size_t)sim_rng_below(&r, pool_n - j);
            int32_t t = draw[j];
            draw[j] = draw[q];
            draw[q] = t;
        }
        for (int i = 0; i < ns; i++) {
            int32_t *l = sim_xmalloc(sizeof(int32_t) * (size_t)n);
            memcpy(l, part->test_idx[c], sizeof(int32_t) * (size_t)n);
            int k = (int)floor(e->spec.eval.shift[i] * n + 0.5);
            for (int j = 0; j < k; j++)
                l[where[j]] = draw[j];
            e->shift_idx[(size_t)i * (size_t)e->n + (size_t)c] = l;
        }
        free(where);
    }
    free(pool);
    free(draw);
}

/* eval.clients: the clients personalized evaluation covers, in client-id order, into out (room
 * for every client; NULL: only count them); returns how many, with *n_split (if not NULL) the
 * clients with a local test split. With eval.clients at 0 or not below that number, all of
 * them; else a random eval.clients of them, drawn (a partial Fisher-Yates over their list) from
 * the stream (seed, SIM_RNG_EVAL_SAMPLE, 0) alone: the same sample at every evaluation and after
 * a resume, recomputed each time rather than kept (it costs a pass over the clients, as the
 * evaluation's own loop does). */
int sim_eng_eval_sample(const sim_engine *e, int32_t *out, int *n_split)
{
    const nn_partition *part = e->spec.env.part;
    int m = 0, want = e->spec.eval.clients;
    for (int32_t c = 0; part->n_test && c < e->n; c++)
        m += part->n_test[c] > 0;
    if (n_split) *n_split = m;
    int k = want > 0 && want < m ? want : m;
    if (!out) return k;
    for (int32_t c = 0, i = 0; part->n_test && c < e->n; c++)
        if (part->n_test[c] > 0) out[i++] = c;
    if (k == m) return k;
    sim_rng r;
    sim_rng_seed(&r, e->spec.seed, SIM_RNG_EVAL_SAMPLE, 0);
    for (int i = 0; i < k; i++) {
        int j = i + (int)sim_rng_below(&r, (uint64_t)(m - i));
        int32_t t = out[i];
        out[i] = out[j];
        out[j] = t;
    }
    sim_eng_sort_ids(out, k);
    return k;
}

/* Client c's personalized accuracy on samples idx[0..n) of d, its private state priv[0..len);
 * *dens gets its model's density. base: by the base evaluation (its model from eval_params,
 * evaluated plainly). */
static double client_accuracy(sim_engine *e, int32_t c, const void *priv, size_t len,
                              const nn_dataset *d, const int32_t *idx, int n, double *dens,
                              int base)
{
    const fl_algo *a = e->spec.algo;
    nn_model *m = &e->eval_model;
    *dens = 1;
    if (a->eval_client && !base) return a->eval_client(e->server, c, priv, len, d, idx, n, m, dens);
    *dens = a->eval_params(e->server, c, priv, len, m);
    return nn_evaluate(m, d, idx, n, NULL);
}

/* Evaluation as independent tasks (sim/fanout.h): first the global model's test set in chunks
 * of the evaluation batch, then every client's personalized accuracy on its own split, then on
 * its split under each nonzero eval.shift, then on its validation split (sim_eng_has_val). Each
 * writes three numbers: a chunk its correct count and loss·B (summed afterwards in chunk order,
 * exactly as nn_evaluate sums), a client its accuracy (NaN on an empty validation split), its
 * model's density and its accuracy by the base evaluation (NaN without one, and on validation). */
enum { VAL_TASK = -2 }; /* eval_tasks.shift of a client's validation task */
/* The private states and rows one fan-out reads, at most (a batch holds one client at the
 * least): the parent copies them out of the store before it forks, since the children must not
 * use it.
 * FEDSIM_TEST_EVAL_BATCH=BYTES sets it for tests, so that small runs take several batches. */
static size_t eval_batch_bytes(void)
{
    const char *v = getenv("FEDSIM_TEST_EVAL_BATCH");
    return v ? strtoull(v, NULL, 10) : (size_t)256 << 20;
}

typedef struct eval_tasks {
    sim_engine *e;
    int nt, n_chunks;      /* global: samples evaluated, chunks of them */
    int n_pers;            /* personalized tasks */
    int32_t *client;       /* of personalized task k */
    int *shift;            /* its eval.shift index, -1 for the client's own split, VAL_TASK */
    int holds_global;      /* this process's eval model holds the global model */
    int first;             /* the fan-out's task 0 is this task */
    unsigned char *states; /* the batch's clients' private states, back to back */
    size_t cap;            /* states' room */
    size_t *at;            /* [n]: client c's offset in states (of this batch's clients) */
} eval_tasks;

static void eval_task(void *ctx, int i, void *out)
{
    eval_tasks *t = ctx;
    sim_engine *e = t->e;
    const fl_env *env = &e->spec.env;
    nn_model *m = &e->eval_model;
    double *o = out;
    i += t->first;
    if (i < t->n_chunks) {
        if (!t->holds_global) e->spec.algo->eval_params(e->server, -1, NULL, 0, m);
        t->holds_global = 1;
        int s = i * m->max_batch, B = t->nt - s < m->max_batch ? t->nt - s : m->max_batch,
            f = nn_dataset_features(env->test);
        double l;
        o[0] = nn_model_evaluate(m, env->test->x + (size_t)s * f, env->test->y + s, B, &l);
        o[1] = l * B;
        o[2] = 0;
        return;
    }
    int k = i - t->n_chunks, sh = t->shift[k];
    int32_t c = t->client[k];
    t->holds_global = 0;
    const nn_dataset *src = env->part->test_from_train ? env->train : env->test;
    size_t len = e->c[c].priv_len;
    const void *priv = len ? t->states + t->at[c] : NULL;
    if (sh == VAL_TASK) {
        int n = env->part->n_val[c];
        o[0] = n ? client_accuracy(e, c, priv, len, src, env->part->val_idx[c], n, &o[1], 0) : NAN;
        o[2] = NAN;
        return;
    }
    const int32_t *idx =
            sh < 0 ? env->part->test_idx[c] : e->shift_idx[(size_t)sh * (size_t)e->n + (size_t)c];
    o[0] = client_accuracy(e, c, priv, len, src, idx, env->part->n_test[c], &o[1], 0);
    double dens;
    o[2] = sim_eng_has_base(e)
                   ? client_accuracy(e, c, priv, len, src, idx, env->part->n_test[c], &dens, 1)
                   : NAN;
}

/* Run tasks [t->first, end) over the evaluation's processes, outputs at o (3 doubles each),
 * with the private states and the server's rows of their clients read from the store first. */
static int eval_batch(sim_engine *e, eval_tasks *t, int end, double *o, sim_err *err)
{
    size_t used = 0;
    int k0 = t->first > t->n_chunks ? t->first - t->n_chunks : 0;
    int rc = end - t->n_chunks > k0
                     ? sim_eng_rows_fetch(e, t->client + k0, end - t->n_chunks - k0, err)
                     : SIM_OK;
    for (int k = k0; k < end - t->n_chunks && !rc; k++) {
        int32_t c = t->client[k];
        if (!e->c[c].priv_len || (k > k0 && t->client[k - 1] == c)) continue;
        const void *p;
        size_t len;
        if ((rc = sim_eng_state_get(e, c, &p, &len, err))) break;
        if (used + len > t->cap) {
            t->cap = used + len > 2 * t->cap ? used + len : 2 * t->cap;
            t->states = sim_xrealloc(t->states, t->cap);
        }
        memcpy(t->states + used, p, len);
        t->at[c] = used;
        used += len;
    }
    if (!rc)
        e->tot.eval_reruns += sim_fanout(e->eval_procs, end - t->first, 3 * sizeof(double),
                                         eval_task, t, o + 3 * (size_t)t->first);
    sim_eng_rows_unfetch(e);
    return rc;
}

/* Every task, in batches of clients whose states and rows take eval_batch_bytes() at most (the
 * global model's chunks go with the first). */
static int eval_all(sim_engine *e, eval_tasks *t, double *o, sim_err *err)
{
    size_t bytes = 0, most = eval_batch_bytes();
    t->at = sim_xcalloc((size_t)e->n, sizeof *t->at);
    int rc = SIM_OK, end = t->n_chunks + t->n_pers;
    t->first = 0;
    for (int k = 0; k < t->n_pers && !rc; k++) {
        if (k > 0 && t->client[k] == t->client[k - 1]) continue;
        size_t len = e->c[t->client[k]].priv_len + e->row_len;
        if (bytes && bytes + len > most) { /* the batch so far, then one from here */
            rc = eval_batch(e, t, t->n_chunks + k, o, err);
            t->first = t->n_chunks + k;
            bytes = 0;
        }
        bytes += len;
    }
    if (!rc && end > t->first) rc = eval_batch(e, t, end, o, err);
    free(t->states);
    free(t->at);
    return rc;
}

/* Mean, bottom decile and mean under each eval.shift of k clients' accuracies, the i-th
 * client's on its own split at r[3·i·per], under its j-th nonzero shift at r[3·(i·per + 1 + j)]
 * (shift 0 is the own split). */
static void pers_stats(const double *r, int k, int per, int ns, const double *shift, double *mean,
                       double *p10, double *shift_acc)
{
    double *acc = sim_xmalloc(sizeof(double) * (size_t)k), s = 0;
    for (int i = 0; i < k; i++)
        s += acc[i] = r[3 * i * per];
    *mean = s / k;
    for (int sh = 0, j = 1; sh < ns; sh++) {
        int zero = shift[sh] == 0;
        s = 0;
        for (int i = 0; i < k; i++)
            s += r[3 * (i * per + (zero ? 0 : j))];
        j += !zero;
        shift_acc[sh] = s / k;
    }
    qsort(acc, (size_t)k, sizeof *acc, cmp_double);
    *p10 = acc[(k - 1) / 10]; /* bottom decile: the 10th-percentile client */
    free(acc);
}

/* The row of this evaluation, with the run's counters as they are now. */
static void write_row(sim_engine *e, sim_metrics *m)
{
    m->round = e->round;
    m->time_s = sim_time_to_s(e->now);
    m->bytes_up = e->tot.bytes_up;
    m->bytes_down = e->tot.bytes_down;
    m->flops = e->tot.flops;
    m->energy_j = e->energy_j;
    m->acc_global = e->tot.acc_global;
    m->loss_global = e->tot.loss_global;
    m->participants = e->participants;
    m->dropped = (double)(e->tot.dropped + e->tot.late);
    const fl_column *ac = e->spec.algo->columns; /* the algorithm's own (outputs.c) */
    for (int i = 0; ac && i < FL_MAX_COLUMNS && ac[i].name; i++)
        m->algo[i] = ac[i].value(e->server);
    sim_eng_metrics_row(e, m);
}

void sim_eng_evaluate(sim_engine *e)
{
    const fl_env *env = &e->spec.env;
    e->eval_round = e->round;
    sim_eng_log_event(e, SIM_EV_EVALUATE, -1, 0, 0);
    sim_metrics pa = {.mean = NAN,
                      .p10 = NAN,
                      .pooled = NAN,
                      .density = NAN,
                      .base_mean = NAN,
                      .base_p10 = NAN,
                      .val = NAN};
    for (int i = 0; i < SIM_MAX_SHIFTS; i++)
        pa.shift[i] = pa.base_shift[i] = NAN;
    if (env->cost_only) {
        write_row(e, &pa);
        return;
    }
    nn_model *m = &e->eval_model;
    eval_tasks t = {.e = e};
    if (e->spec.algo->flags & FL_HAS_GLOBAL) {
        pa.density = e->spec.algo->eval_params(e->server, -1, NULL, 0, m);
        t.holds_global = 1;
        t.nt = e->spec.eval.test_subset > 0 && e->spec.eval.test_subset < env->test->n
                       ? e->spec.eval.test_subset
                       : env->test->n;
        t.n_chunks = (t.nt + m->max_batch - 1) / m->max_batch;
    }
    /* a client's tasks are consecutive (its own split, each nonzero shift, its validation
     * split), so an algorithm that prepares a client's model once (FedAvg-FT's fine-tuning) can
     * reuse it */
    int ns = e->spec.eval.n_shift, k = 0, per = 1 + sim_eng_has_val(e);
    for (int sh = 0; sh < ns; sh++)
        per += e->spec.eval.shift[sh] != 0;
    if (e->spec.eval.personalized && env->part->n_test) {
        t.client = sim_xmalloc(sizeof(int32_t) * (size_t)e->n * (size_t)per);
        t.shift = sim_xmalloc(sizeof(int) * (size_t)e->n * (size_t)per);
        int32_t *sample = sim_xmalloc(sizeof(int32_t) * (size_t)e->n);
        int n_sample = sim_eng_eval_sample(e, sample, NULL);
        for (int i = 0; i < n_sample; i++) {
            for (int sh = -1; sh < ns + sim_eng_has_val(e); sh++)
                if (sh < 0 || sh == ns || e->spec.eval.shift[sh] != 0) {
                    t.client[t.n_pers] = sample[i];
                    t.shift[t.n_pers++] = sh == ns ? VAL_TASK : sh;
                }
            k++;
        }
        free(sample);
    }
    int n_tasks = t.n_chunks + t.n_pers;
    double *o = sim_xmalloc(sizeof(double) * 3 * (size_t)(n_tasks > 0 ? n_tasks : 1));
    int rc = eval_all(e, &t, o, &e->eval_err);
    if (rc) { /* a state unreadable: the run stops on it, without this row */
        e->eval_failed = rc;
        free(o);
        free(t.client);
        free(t.shift);
        return;
    }
    if (e->spec.algo->flags & FL_HAS_GLOBAL) {
        long correct = 0;
        double sum = 0;
        for (int i = 0; i < t.n_chunks; i++) {
            correct += (long)o[3 * i];
            sum += o[3 * i + 1];
        }
        e->tot.acc_global = t.nt ? (double)correct / t.nt : 0;
        e->tot.loss_global = t.nt ? sum / t.nt : 0;
    }
    if (k) {
        /* the i-th client's own split is task i·per, its j-th nonzero shift i·per + 1 + j */
        const double *r = o + 3 * (size_t)t.n_chunks;
        double hit = 0, all = 0, dens = 0;
        for (int i = 0; i < k; i++) {
            int32_t c = t.client[i * per];
            e->c[c].acc = r[3 * i * per];
            dens += r[3 * i * per + 1];
            hit += e->c[c].acc * env->part->n_test[c];
            all += env->part->n_test[c];
        }
        pa.pooled = hit / all; /* the evaluated clients' test samples pooled (pFedGate's Acc) */
        pa.density = dens / k; /* personalized models: the mean over the clients evaluated */
        pers_stats(r, k, per, ns, e->spec.eval.shift, &pa.mean, &pa.p10, pa.shift);
        e->tot.acc_pers = pa.mean;
        if (sim_eng_has_base(e))
            pers_stats(r + 2, k, per, ns, e->spec.eval.shift, &pa.base_mean, &pa.base_p10,
                       pa.base_shift);
        if (sim_eng_has_val(e)) { /* each client's last task; the mean over those with a split */
            double sv = 0;
            int nv = 0;
            for (int i = 0; i < k; i++) {
                double acc = r[3 * (i * per + per - 1)];
                if (!isnan(acc)) sv += acc, nv++;
            }
            pa.val = nv ? sv / nv : NAN;
        }
    }
    free(o);
    free(t.client);
    free(t.shift);
    write_row(e, &pa);
}

void sim_eng_maybe_evaluate(sim_engine *e, int force)
{
    const sim_eval_config *ev = &e->spec.eval;
    int due = force || (ev->every_rounds > 0 && e->round % ev->every_rounds == 0);
    if (ev->every_time > 0 && e->now >= e->next_eval_time) {
        due = 1;
        while (e->next_eval_time <= e->now)
            e->next_eval_time += ev->every_time;
    }
    if (due) sim_eng_evaluate(e);
}
