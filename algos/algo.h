/* algos/algo.h -- the one interface between the engine and every FL algorithm, and the registry.
 *
 * An algorithm is a table of functions. The server side (server_new, job_down, server_absorb,
 * server_aggregate, eval_params) lives in the coordinator; client_train is a pure function of
 * (environment, job, private state) and may run in another process, so everything it needs travels
 * in the job (the down message and the client's private state, both msgpack bytes) and everything
 * it produces comes back in the result (the up message, new private state, and what the job cost).
 * Message lengths are what the simulator charges as bytes on the wire. Adding an algorithm is one
 * file and one line in fl_algos[] (registry.c).
 */
#ifndef FL_ALGO_H
#define FL_ALGO_H

#include "nn/data.h"
#include "nn/model.h"
#include "nn/partition.h"
#include "nn/train.h"
#include "sim/base.h"
#include "sim/rng.h"

#include <msgpack.h>
#include <stdio.h>

/* SpaFL's Δτ for Eq. 13 (`spafl.delta`): the change since the client's last round
 * (accumulated), the server's last change, sent along with τ (latest: the code; the down message
 * doubles), or the accumulated change divided by the rounds it spans (mean: τ alone travels). */
enum { FL_DELTA_ACCUMULATED, FL_DELTA_LATEST, FL_DELTA_MEAN };

/* SpaFL's switches (`algorithm.spafl:`; spec 003 §7 and §8). Defaults follow the released FMNIST
 * code (algos/spafl.c). */
typedef struct fl_spafl_config {
    double alpha; /* α of the regulariser α·Σexp(−τ) */
    int warmup;   /* use α·σ(10r − 5) in round r, as the code does (1) or α throughout (0) */
    int eq13;     /* shift weights by the global threshold change before training */
    int eq13_nin; /* Eq. 13 divides by n_in (paper) instead of k·k for convs (code) */
    int delta;    /* the Δτ Eq. 13 uses: FL_DELTA_* */
    int momentum_reset; /* momentum restarts every job (CIFAR code) instead of persisting */
    int ste_weight;     /* the code's straight-through gradient into w through mean|w| */
    int freeze_weights; /* train thresholds only (Table 1); implies no Eq. 13 */
    int clamp;          /* keep w in [−1, 1] and τ in [0, 1] (the paper's text) */
    double collapse;    /* a layer whose keep ratio is at most this resets its thresholds to 0 */
} fl_spafl_config;

/* The width family's settings (`algorithm.width:`). With by = fixed, HeteroFL and FedRolex train
 * every client at width p and FjORD draws a width uniformly in [min, max] for every job (ordered
 * dropout). With by = capacity, client i's width is the largest p_i on the grid with
 * p_i² ≤ r_i (its capacity, fl_env.capacity), and FjORD draws among the grid widths up to p_i.
 * The grid: multiples of step (FjORD, FedRolex), or step·2^j halvings from 1 (HeteroFL); step is
 * also the narrowest width. eval is the width of the global model evaluated. */
typedef struct fl_width_config {
    double p, min, max, eval, step;
    int by_capacity, halving;
    int kd;     /* FjORD: self-distil the nested width from the widest (else train it alone) */
    int scaler; /* HeteroFL's Scaler: a p-wide sub-model's hidden outputs ×1/p, in training and
                   evaluation (nn_model's narrow_scale) */
} fl_width_config;

/* FedPeWS's settings (`algorithm.pews:`; spec 002): a warmup of the first `warmup` rounds in
 * which clients train and send personal subnetworks, then the base algorithm. */
typedef struct fl_pews_config {
    int prox;          /* base FedProx (mu from the algorithm map) instead of FedAvg */
    int warmup;        /* W: warmup rounds (the scenario gives τ = W/T) */
    int fixed;         /* FedPeWS-Fixed: disjoint contiguous neuron groups, no mask learning */
    double lambda;     /* weight of the mask-diversity reward */
    double mask_lr;    /* η_s, plain SGD on the neuron scores */
    double score_init; /* s at the start (0: keep probability 0.5) */
    int theta_binary;  /* others' masks as their last binary masks instead of σ(s) */
} fl_pews_config;

/* Hyperparameters from the scenario's `algorithm:` map (defaults in scenarios/README.md). */
/* pFedGate's settings (`algorithm.pfedgate:`; spec 000): a density budget s per client (one for
 * all, or its capacity), B blocks per tensor, the gate's paths and lr, gradient-norm clipping,
 * and the server's rule (per block over the clients that sent it, or the code's dense one). */
typedef struct fl_pfedgate_config {
    double s;           /* the budget when not by capacity */
    int by_capacity;    /* s_i = the client's capacity r_i */
    int blocks;         /* B */
    int code_split;     /* B equal chunks per tensor instead of the paper's first-block rule */
    int paths;          /* 2 (paper) or 1 (the code's default) */
    double gate_lr;     /* η of the gating layer (the model's is algorithm.lr) */
    double clip;        /* gradient-norm clip, model and gate separately (0: none) */
    int code_aggregate; /* Σ_i p_i Δ_i with p over all clients, instead of per-block means */
    int eval_global;    /* every client evaluated on the new global model, instead of a client
                           the aggregation just absorbed on its own trained copy (the code) */
} fl_pfedgate_config;

/* DM-PFL's settings (`algorithm.dmpfl:`; spec 001 §2 and §8; defaults there). The schedule:
 * `iterations` I repeats of (phase 1: mask training, 2a: federated refinement of w_g under a fixed
 * m_g, 2b: local refinement of the private weights) over `rounds` T, split phase1 / phase2a / rest
 * of each iteration's T/I rounds; I = 0 is phase 1 throughout (the iter = 0 ablation). */
typedef struct fl_dmpfl_config {
    double density;     /* 1 − S: the share of each masked tensor's weights kept */
    int skip_first;     /* the first conv/linear layer stays dense (uniform_skip_first) */
    int iterations;     /* I */
    int rounds;         /* T, the scenario's rounds */
    double phase1;      /* share of an iteration in phase 1 */
    double phase2a;     /* share in phase 2a (phase 2b gets the rest) */
    double alpha;       /* α_0, the readjust share of a layer's kept weights */
    int anneal;         /* α_t = α_0/2·(1 + cos(π t/T)) (1) or α_0 throughout (0) */
    int readjust_every; /* readjust on every this many phase-1 rounds (by round number) */
    double vote;        /* m_g keeps positions chosen by more than this share of the clients */
    int reset_private;  /* phase 2b starts from zero private weights (Algorithm 3 literally) */
} fl_dmpfl_config;

/* Pa3dFL's settings (`algorithm.pa3dfl:`; spec 004, defaults its Fashion Hetero column). */
#define FL_PA3DFL_MAX_DEPTH 4
typedef struct fl_pa3dfl_config {
    double lambda;  /* λ of the orthogonality penalty (Eq. 32) */
    double hn_lr;   /* γ, the hyper-network's SGD step */
    double hn_clip; /* gradient-norm clip of the embeddings, encoder and temperatures (0: none) */
    int hn_nlms;    /* decoder steps normalized by 1 + ‖ê‖² (fl_p3_hn_backward) */
    int hn_unit;    /* encoded embeddings scaled to unit norm (fl_p3_hn.unit) */
    int embed;      /* d_e */
    int hidden;     /* d_h */
    int depth;      /* encoder layers D, at most FL_PA3DFL_MAX_DEPTH */
    double p_min; /* width quantum; 0: the largest 1/2^k with (1/2^k)² ≤ min capacity (§2.4) */
    double val;   /* share of a client's training samples held out to choose α */
    int alphas;   /* points of the α grid on [0, 1]; 1: no search, the trained model (α = 1) */
    int hn;       /* 0: Table 3's "w.o. HN-based Agg." (personal parts stay on the clients) */
} fl_pa3dfl_config;

/* pFedHN's settings (`algorithm.pfedhn:`; FLGo's defaults, which Pa3dFL's Table 1 ran): the
 * hyper-network embedding → `layers` + 1 linear layers (ReLU between) of width `hidden` → the
 * generated shared part, its SGD step and gradient-norm clip, and the model evaluated. */
#define FL_PFEDHN_MAX_LAYERS 8
typedef struct fl_pfedhn_config {
    int embed;        /* d_e (the scenario's default: 1 + clients/4) */
    int hidden;       /* d_h */
    int layers;       /* hidden layers after the first, at most FL_PFEDHN_MAX_LAYERS */
    double lr;        /* the hyper-network's SGD step */
    double clip;      /* its gradient-norm clip (0: none) */
    int eval_trained; /* evaluate the model the client's last job left (FLGo's logger) instead of
                         the one generated for it now */
} fl_pfedhn_config;

typedef struct fl_config {
    char name[32];
    int local_epochs; /* passes over the client's data per job (when local_steps is 0) */
    int local_steps;  /* fixed SGD steps per job; 0 = use local_epochs */
    int batch_size;
    double lr, momentum, weight_decay, clip;
    /* the model's momentum stays with the client from job to job (fl_momentum_load), instead
     * of starting at zero each job */
    int persistent_momentum;
    double lr_decay;  /* client lr multiplied by this every round (1 = constant) */
    double mu;        /* FedProx proximal weight */
    double server_lr; /* applied to the weighted mean update (1 = plain FedAvg) */
    int uniform;      /* weight every update by 1 instead of the client's sample count */
    fl_spafl_config spafl;
    fl_width_config width;
    fl_pews_config pews;
    fl_pfedgate_config pfedgate;
    fl_dmpfl_config dmpfl;
    double ditto_lambda; /* Ditto's proximal weight λ (`algorithm.ditto.lambda`) */
    double apfl_alpha;   /* APFL's initial mixing weight α (`algorithm.apfl.alpha`) */
    int apfl_adapt;      /* APFL learns α by gradient (1) or keeps it (`algorithm.apfl.adapt`) */
    int ft_epochs;       /* FedAvg-FT's fine-tuning epochs (`algorithm.finetune.epochs`) */
    fl_pa3dfl_config pa3dfl;
    fl_pfedhn_config pfedhn;
} fl_config;

/* What every part of an algorithm may read; identical in the coordinator and in workers. */
typedef struct fl_env {
    const fl_config *cfg;
    const nn_arch *arch;
    const nn_dataset *train, *test;
    const nn_partition *part;
    uint64_t seed;
    int cost_only;          /* skip the math: report the FLOPs and message sizes it would have */
    const double *capacity; /* per client: the share r_i in (0, 1] of the full model's cost its
                               device affords (`devices.capacity`); NULL: all 1 */
} fl_env;

typedef struct fl_job {
    int32_t client;
    int32_t round;    /* sync round, or async model version (lr decay counts it) */
    const void *down; /* the down message (NULL in cost-only mode) */
    size_t down_len;
    const void *priv; /* the client's private state from its last job (NULL: none yet) */
    size_t priv_len;
    uint64_t stream; /* index of the job's batch-order RNG stream, unique per job of a run (sync:
                        client << 32 | round; async: 1 << 63 | dispatch number, since one client
                        may run several jobs from the same model version) */
} fl_job;

typedef struct fl_result {
    msgpack_sbuffer up;   /* the up message (left empty in cost-only mode) */
    size_t up_bytes;      /* its length (set in cost-only mode too); 0 = nothing to upload */
    msgpack_sbuffer priv; /* new private state; size 0 = keep none */
    nn_cost cost;         /* FLOPs executed (or that would be, in cost-only mode) */
    double loss;          /* mean training loss over the job's batches */
    int steps;            /* SGD steps taken: a minibatch's pass(es) and the update they
                             feed; a job that updates two things on passes of their own counts
                             both (Ditto's and APFL's two models, FedRep's head then body,
                             FedPeWS's scores then weights). Each costs the device its
                             step_overhead (devices/profile.h) */
} fl_result;

/* Per-process scratch an algorithm's client_train may use (a model instance, buffers). */
typedef struct fl_worker {
    nn_model model;
    int ready;
    float *ref;       /* n_floats: a copy of the received model (FedProx anchor, deltas) */
    size_t msg_bytes; /* cached size of a dense parameter message (cost-only mode) */
} fl_worker;

typedef struct fl_algo {
    const char *name;
    const char *summary;
    int has_global; /* 0 when there is no meaningful global model (local-only) */
    void *(*server_new)(const fl_env *env, sim_err *err);
    void (*server_free)(void *server);
    /* The down message for client's job of `round` (the job's fl_job.round) into out; returns its
     * length. out is NULL in cost-only mode, when only the length is wanted. */
    size_t (*job_down)(void *server, int32_t client, int32_t round, msgpack_sbuffer *out);
    int (*client_train)(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res,
                        sim_err *err);
    /* Called in client-id order at aggregation: weight scales the update, mass is what the
     * weighted sum is normalized by (FedAvg: both the client's sample count; async staleness
     * lowers weight only). Returns SIM_EFORMAT for a malformed message. */
    int (*server_absorb)(void *server, int32_t client, const void *up, size_t len, double weight,
                         double mass, sim_err *err);
    void (*server_aggregate)(void *server);
    /* Load the model used to evaluate client (its personalized model), or the global model when
     * client is -1, into m, narrowing m as that model is narrowed. Returns the model's density:
     * the unweighted mean over its conv/linear layers of the fraction of units kept (1 when
     * dense). */
    double (*eval_params)(void *server, int32_t client, const void *priv, size_t priv_len,
                          nn_model *m);
    /* Checkpoints: write the server's state as one msgpack object, and restore it into a server
     * fresh from server_new (same env). Everything server_new rebuilds from env may be left out.
     * load returns SIM_EFORMAT, naming nothing but what is wrong, when o does not fit this
     * algorithm and model (the caller adds the file name). */
    void (*server_save)(void *server, msgpack_packer *pk);
    int (*server_load)(void *server, const msgpack_object *o, sim_err *err);
    /* Optional (NULL for none): a table of the algorithm's own diagnostics, written to
     * RUN_DIR/report_file when the run finishes (its state belongs in server_save). */
    const char *report_file;
    void (*report)(void *server, FILE *f);
    /* Optional (NULL: always 1): the width client trains at, so the engine can check the model
     * it really trains against its device's memory. */
    double (*client_width)(const fl_env *env, int32_t client);
    /* Optional (NULL: eval_params, then plain evaluation): client's personalized accuracy on the
     * n samples idx of d, for models that change with each batch they see (pFedGate's gate);
     * m is scratch sized for batches of up to m->max_batch; *density gets the model's density. */
    double (*eval_client)(void *server, int32_t client, const void *priv, size_t priv_len,
                          const nn_dataset *d, const int32_t *idx, int n, nn_model *m,
                          double *density);
    /* Optional (NULL: none): called when an aggregation and the evaluation that may follow it
     * (in the same event) are done; what the server kept for that evaluation alone goes here, so
     * it never reaches a checkpoint. */
    void (*server_round_end)(void *server);
    /* Optional (NULL: none): the algorithm whose personalized accuracy this one's eval_params
     * gives (evaluated plainly), when eval_client evaluates otherwise after the same training:
     * DM-PFL+'s per-sample choice over DM-PFL, FedAvg-FT's fine-tuning over FedAvg. The engine
     * reports both (metrics.tsv's acc_base_* columns), so one run stands for the two methods. */
    const char *base;
    /* Optional (NULL: none): a warning about settings that run as asked but may not be what was
     * meant (pFedGate budgets too small to choose blocks from), written into msg; 0 when none. */
    int (*warn)(const fl_env *env, char *msg, size_t cap);
} fl_algo;

extern const fl_algo fl_fedavg, fl_fedprox, fl_local, fl_spafl, fl_spafl_local, fl_heterofl,
        fl_fjord, fl_fedrolex, fl_fedpews, fl_pfedgate, fl_fedavg_ft, fl_dmpfl, fl_dmpfl_plus,
        fl_fedper, fl_lgfedavg, fl_fedrep, fl_ditto, fl_apfl, fl_pa3dfl, fl_pfedhn;
extern const fl_algo *const fl_algos[]; /* NULL-terminated */
const fl_algo *fl_algo_find(const char *name);

/* Shared pieces for algorithm files. */
void fl_result_init(fl_result *r);
void fl_result_destroy(fl_result *r);
void fl_worker_init(fl_worker *w);
void fl_worker_destroy(fl_worker *w);
/* The worker's model for env's architecture, sized for the batch, narrowing reset. */
nn_model *fl_worker_model(fl_worker *w, const fl_env *env);
/* Initial global parameters: the same in every process for a seed. */
void fl_init_params(nn_model *m, const fl_env *env);
/* A fresh n_floats array holding them (the caller frees it). */
float *fl_initial_params(const fl_env *env);
/* The encoded length of a dense parameter message for a (nn_pack_params). */
size_t fl_dense_msg_bytes(const nn_arch *a);
/* A job's local loop: its steps (local_steps, or local_epochs passes over the client's samples in
 * batches, each epoch ending on a short batch), its lr (decayed by round), and its minibatches
 * from the stream (seed, SIM_RNG_BATCHES, job->stream). Algorithms with their own step (SpaFL,
 * FedPeWS) drive it; fl_local_sgd is the plain one. */
typedef struct fl_loop {
    nn_model *m;   /* borrowed */
    nn_batcher b;  /* the current minibatch is b.x, b.y */
    int64_t steps; /* in all */
    int64_t step;  /* taken so far */
    double lr;
    double loss;    /* the caller's sum of step losses */
    nn_cost before; /* m->cost at the start */
} fl_loop;

/* The steps of a job on n samples (local_steps, or local_epochs passes in batches), and the size
 * of batch `step` of them: each epoch ends on the short batch (for cost-only schedules). */
int64_t fl_job_steps(const fl_env *env, int n);
int fl_job_batch(int64_t step, int n, int B);
/* How many of a job's first `steps` batches are its epochs' short ones (0 when B divides n). */
int64_t fl_job_short_batches(int64_t steps, int n, int B);
/* Start the loop of job on m; returns 0 (and needs no finish) when the client has no samples. */
int fl_loop_start(fl_loop *L, const fl_env *env, const fl_job *job, nn_model *m);
/* Gather the next minibatch: its size, or 0 once every step was taken. */
int fl_loop_next(fl_loop *L);
/* Account the job into res (FLOPs and samples the model counted since start, mean loss, steps)
 * and free the loop. */
void fl_loop_finish(fl_loop *L, fl_result *res);
/* Add steps to res->steps (saturating at INT32_MAX). */
void fl_count_steps(fl_result *res, int64_t steps);

/* FjORD's nested width for one local step of a client whose widest is top: a grid width up to
 * top, or uniform in [min, max] when all clients share one width. */
double fl_fjord_draw(const fl_width_config *w, double top, sim_rng *r);
/* The width a capacity r affords on w's grid: the largest grid width p with p² ≤ r (a p-wide
 * model costs about p² of the full one), and the narrowest, step, when none does. */
double fl_width_for(const fl_width_config *w, double r);
/* fl_width_for at client's capacity (1 when the scenario gives none). */
double fl_capacity_width(const fl_env *env, int32_t client);

/* One SGD step (opt: lr, momentum in m->mom, weight decay; no clipping) on m's last layer alone,
 * a linear one, from the last forward's logits and features against labels y (B): the mean
 * cross-entropy's gradient through the head only, the body untouched (FedRep's head epochs).
 * Counts the head's backward in m->cost (the forward counted itself). */
void fl_head_step(nn_model *m, const int32_t *y, int B, const nn_sgd *opt);
/* The FLOPs fl_head_step adds for a batch of B. */
double fl_head_step_flops(const nn_arch *a, int B);

/* FedProx: add mu·(w − anchor) to the gradients of m's live parameters. */
void fl_prox_grad(nn_model *m, double mu, const float *anchor);
/* Local SGD on client's training samples with the job's lr (decayed by round), batch order from
 * the stream (seed, SIM_RNG_BATCHES, job->stream). With mu > 0 and anchor non-NULL, adds
 * the FedProx gradient mu·(w − anchor). Fills res->cost, loss and steps. In cost-only mode it
 * takes no step and reports the cost the steps would have. */
void fl_local_sgd(const fl_env *env, const fl_job *job, nn_model *m, double mu, const float *anchor,
                  fl_result *res);
/* The same loop with fn(m, ctx) called between backward and each SGD step (to edit gradients:
 * freeze positions, add a penalty's gradient) and the given L2 weight decay, which SGD adds to
 * every live trainable parameter (pass 0 and add it in fn to spare frozen ones). */
typedef void fl_grad_fn(nn_model *m, void *ctx);
void fl_local_sgd_with(const fl_env *env, const fl_job *job, nn_model *m, double weight_decay,
                       fl_grad_fn *fn, void *ctx, fl_result *res);
/* algorithm.persistent_momentum (kept by the algorithms fl_momentum_keepers names, a
 * NULL-terminated list; fl_persistent_momentum_ok looks one up): m->mom is the
 * client's momentum from its last job, kept in its private state after the algorithm's own
 * `skip` msgpack objects, or zero (none kept yet, or momentum per job). Both local SGD loops
 * start from m->mom as it is then; fl_momentum_save appends it to the new private state. */
int fl_momentum_load(const fl_env *env, const fl_job *job, int skip, nn_model *m, sim_err *err);
void fl_momentum_save(const fl_env *env, const nn_model *m, fl_result *res);
extern const char *const fl_momentum_keepers[];
int fl_persistent_momentum_ok(const char *algo);

/* Checkpoint of a FedAvg-style server: [global floats, acc doubles, mass] with the arrays as raw
 * native-order bytes (a checkpoint is read back by the same build, and raw bytes keep every bit,
 * NaN payloads included). load returns SIM_EFORMAT naming the algorithm when o does not fit. */
void fl_save_sums(msgpack_packer *pk, const float *global, const double *acc, double mass,
                  size_t nf);
int fl_load_sums(const msgpack_object *o, float *global, double *acc, double *mass, size_t nf,
                 const char *name, sim_err *err);

#endif /* FL_ALGO_H */
