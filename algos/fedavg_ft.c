/* algos/fedavg_ft.c -- FedAvg-FT: FedAvg whose clients are each evaluated after fine-tuning the
 * global model for `finetune.epochs` epochs on its training samples (pFedGate's baseline: 1;
 * DM-PFL's: E). Training is FedAvg's (algos/fedavg.h); its personalized accuracy is reported next
 * to FedAvg's (fl_algo.base), so one run stands for both. */
#include "algos/fedavg.h"

#include "nn/train.h"

#include <stdlib.h>
#include <string.h>

/* `algorithm.finetune:` */
typedef struct ft_config {
    int epochs;
} ft_config;

static const sim_key KEYS[] = {
        {"epochs", SIM_KEY_INT, offsetof(ft_config, epochs), .dflt = "1", .lo = 1, .hi = 1000,
         .doc = "the epochs each client fine-tunes the global model on its training samples before "
                "it is evaluated, with the training's optimizer (`lr`, `momentum` from zero, "
                "`weight_decay`, `clip`). pFedGate's paper fine-tunes 1 epoch; DM-PFL's fine-tunes "
                "E (its local epochs)"},
        {0},
};

const fl_section fl_finetune_section = {
        .name = "finetune",
        .keys = KEYS,
        .size = sizeof(ft_config),
        .doc = "FedAvg-FT; checked for the others.",
};

/* FedAvg's server, and the last client this process fine-tuned with the global model's version
 * it started from, and the result: a pure function of the two, reused for that client's shifted
 * test sets (the engine evaluates a client's splits one after another) */
typedef struct ft_server {
    fl_fedavg_server fa; /* first: the FedAvg slots take this server as theirs */
    int32_t ft_client;
    uint64_t ft_version;
    float *ft_params;
} ft_server;

static void *ft_new(const fl_env *env, sim_err *err)
{
    (void)err;
    ft_server *s = sim_xcalloc(1, sizeof *s);
    fl_fedavg_init(&s->fa, env);
    s->ft_client = -1;
    return s;
}

static void ft_free(void *p)
{
    ft_server *s = p;
    if (!s) return;
    fl_fedavg_destroy(&s->fa);
    free(s->ft_params);
    free(s);
}

static int ft_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                    sim_err *err)
{
    return fl_fedavg_train(env, job, w, res, 0, err);
}

/* FedAvg-FT's personalized accuracy: the global model after `finetune.epochs` epochs on the
 * client's training samples with the training's optimizer (batch size, base lr, momentum from
 * zero, weight decay, clip; batch order seeded per client). */
static double ft_eval_client(void *p, int32_t c, const void *priv, size_t priv_len,
                             const nn_dataset *d, const int32_t *idx, int n, nn_model *m,
                             double *density)
{
    ft_server *s = p;
    const fl_env *env = s->fa.env;
    size_t nf = env->arch->layout.n_floats;
    (void)priv, (void)priv_len;
    *density = 1;
    if (s->ft_client == c && s->ft_version == s->fa.version) { /* fine-tuned already */
        nn_model_reset_narrowing(m);
        memcpy(m->params, s->ft_params, nf * sizeof(float));
        return nn_evaluate(m, d, idx, n, NULL);
    }
    fl_fedavg_eval(&s->fa, c, NULL, 0, m);
    int nc = env->part->n[c], B = env->cfg->batch_size;
    if (B > m->max_batch) B = m->max_batch;
    if (nc > 0) {
        sim_rng r;
        sim_rng_seed(&r, env->seed, SIM_RNG_BATCHES, (uint64_t)1 << 62 | (uint32_t)c);
        nn_batcher b;
        nn_batcher_init(&b, env->train, env->part->idx[c], nc, B, 0, &r);
        const fl_config *cfg = env->cfg;
        nn_sgd opt = {(float)cfg->lr, (float)cfg->momentum, (float)cfg->weight_decay,
                      (float)cfg->clip};
        memset(m->mom, 0, sizeof(float) * m->arch.layout.n_floats);
        for (int ep = 0; ep < ((const ft_config *)cfg->own)->epochs; ep++)
            for (int nb; (nb = nn_batcher_next(&b));)
                nn_model_train_step(m, &opt, b.x, b.y, nb);
        nn_batcher_destroy(&b);
    }
    if (!s->ft_params) s->ft_params = sim_xmalloc(nf * sizeof(float));
    memcpy(s->ft_params, m->params, nf * sizeof(float));
    s->ft_client = c, s->ft_version = s->fa.version;
    return nn_evaluate(m, d, idx, n, NULL);
}

const fl_algo fl_fedavg_ft = {
        .version = FL_ALGO_VERSION,
        .name = "fedavg-ft",
        .summary = "FedAvg-FT: FedAvg, each client evaluated after local epochs of "
                   "fine-tuning",
        .doc = "FedAvg, each client evaluated after `finetune.epochs` epochs of fine-tuning on its "
               "training samples; its metrics.tsv also has FedAvg's accuracy from the same run, "
               "`acc_base_*`",
        .flags = FL_HAS_GLOBAL | FL_KEEPS_MOMENTUM | FL_COMPRESS_UP | FL_COMPRESS_DOWN |
                 FL_FIXED_COST,
        .section = &fl_finetune_section,
        .server_new = ft_new,
        .server_free = ft_free,
        .job_down = fl_fedavg_down,
        .client_train = ft_train,
        .server_absorb = fl_fedavg_absorb,
        .server_aggregate = fl_fedavg_aggregate,
        .eval_params = fl_fedavg_eval,
        .server_save = fl_fedavg_save,
        .server_load = fl_fedavg_load,
        .eval_client = ft_eval_client,
        .base = "fedavg",
};
