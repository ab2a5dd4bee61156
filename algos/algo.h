/* algos/algo.h -- the one interface between the engine and every FL algorithm, and the registry.
 *
 * An algorithm is a table of functions. The server side (server_new, job_down, server_absorb,
 * server_aggregate, eval_params) lives in the coordinator; client_train is a pure function of
 * (environment, job, private state) and may run in another process, so everything it needs travels
 * in the job (the down message and the client's private state, both msgpack bytes) and everything
 * it produces comes back in the result (the up message, new private state, and what the job cost).
 * Message lengths are what the simulator charges as bytes on the wire. Adding an algorithm is one
 * file and one line in fl_algos[] (registry.c): the file declares its settings (fl_section: a key
 * table, sim/keys.h), capabilities (flags), random streams and any metrics.tsv columns of its
 * own (fl_column), and owns its config struct.
 */
#ifndef FL_ALGO_H
#define FL_ALGO_H

#include "nn/compress.h"
#include "nn/data.h"
#include "nn/model.h"
#include "nn/partition.h"
#include "nn/train.h"
#include "sim/base.h"
#include "sim/keys.h"
#include "sim/rng.h"
#include "sim/yaml.h"

#include <msgpack.h>
#include <stdio.h>

/* The keys every algorithm shares (`algorithm:`; defaults in scenarios/README.md), and the chosen
 * algorithm's own settings: the block its section's keys fill (fl_section), which only its own
 * file knows the type of. */
#define FL_MAX_SECTIONS 32
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
    const void *own;  /* the chosen algorithm's settings (its fl_algo.section's block), or NULL */
    /* owned: the block of every section read (the chosen algorithm's, and any other present in
     * the scenario), by index in fl_sections[]; fl_config_destroy frees them */
    void *blocks[FL_MAX_SECTIONS];
} fl_config;

/* A server's table with a row per client (pFedHN's embeddings, FedPeWS's mask probabilities),
 * kept with the clients' private states in the engine's store (sim/store.h: out of core, behind
 * the run's --state-memory cache, committed with each checkpoint), so the server's memory does
 * not grow with the population and its checkpoint does not copy the table (server_save leaves
 * the rows out). Rows exist in the coordinator only: the server reads and writes them from
 * job_down, server_absorb, server_aggregate and eval_params (eval_client; flagged
 * FL_EVAL_ROWS), never from client_train. A row read is the last one put for the client. */
typedef struct fl_rows {
    /* client's row (len bytes) into row: 1, or 0 when it has none yet (row untouched: the
     * algorithm's initial row). A row the store cannot give back (a failed disk, a length not
     * len) reads as none, and the engine stops the run after the call, naming it. */
    int (*get)(void *ctx, int32_t client, void *row, size_t len);
    void (*put)(void *ctx, int32_t client, const void *row, size_t len);
    /* The row get gave is not one the algorithm writes (what says why): the store is damaged or
     * not this run's. The algorithm goes on from its initial row; the engine stops the run after
     * the call, naming the client and the store. */
    void (*bad)(void *ctx, int32_t client, const char *what);
    void *ctx;
} fl_rows;

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
    /* `compression.up` and `.down`: how updates and models travel (algorithms flagged
     * FL_COMPRESS_UP / FL_COMPRESS_DOWN send them through fl_up_pack and fl_down_pack); NULL or
     * scheme none: the dense parameter message */
    const nn_comp *comp_up, *comp_down;
    const fl_rows *rows; /* the server's per-client rows (fl_row_get), the coordinator's alone */
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

/* An algorithm's section of settings (`algorithm.NAME:`): its keys (a table ending with a key
 * whose name is NULL) fill a block of `size` bytes, which fl_config.own points to when the
 * algorithm is the one chosen. Members of a family share one section. check, when given, runs
 * once every key is read: derived values and checks across keys, with errors at the key (map is
 * the section as read, sim_yaml_get(map, KEY) the key's node). */
typedef struct fl_section {
    const char *name;
    const sim_key *keys;
    size_t size;
    int (*check)(void *block, const sim_yaml *map, const sim_key_ctx *ctx, sim_err *err);
    /* What the section is for and how its algorithm works, above its keys in `fedsim keys` and
     * scenarios/README.md (Markdown; NULL: none). */
    const char *doc;
} fl_section;

/* A random stream an algorithm draws from: tag "ALGO.WHAT" and the purpose id it seeds with
 * (sim_rng_seed). An id once used never changes (results depend on it); a new stream may give 0,
 * and fl_stream_id derives its id from the tag, above every core purpose of sim/rng.h. */
typedef struct fl_stream {
    const char *tag;
    uint64_t id;
} fl_stream;
uint64_t fl_stream_id(const fl_stream *s);

/* What an algorithm can do, as fl_algo.flags. */
enum {
    FL_HAS_GLOBAL = 1 << 0,     /* a meaningful global model (not local-only) */
    FL_KEEPS_MOMENTUM = 1 << 1, /* honours algorithm.persistent_momentum (fl_momentum_load) */
    FL_NEEDS_BATCH2 = 1 << 2,   /* batch_size >= 2 (batch norm in a gate) */
    FL_PLAIN_SGD = 1 << 3,      /* clients take plain SGD steps: no momentum, no weight_decay */
    /* its upload (download) is dense float vectors of the model's parameters or their change,
     * whole or a slice, sent through fl_up_pack or fl_up_encode (fl_down_pack, fl_down_encode),
     * so `compression.up` (`.down`) applies; without the flag a scheme other than none is
     * refused when the scenario loads, with fl_algo.no_compress's reason */
    FL_COMPRESS_UP = 1 << 4,
    FL_COMPRESS_DOWN = 1 << 5,
    /* a job's training work (cost and steps) is known before it trains: client_train in cost-only
     * mode returns exactly the work the real job reports (dense models, fixed widths and masks),
     * so the engine schedules the job from it at dispatch and needs its result only when its
     * training ends (sim/engine.c; a run that finds otherwise stops with an error) */
    FL_FIXED_COST = 1 << 6,
    /* its evaluation (eval_params, eval_client) reads the server's per-client rows (fl_rows):
     * the engine reads them for each batch of clients before its helper processes fork */
    FL_EVAL_ROWS = 1 << 7,
};

/* An extra column of metrics.tsv (fl_algo.columns), after the engine's own: its header name, how
 * it prints, and its value in each row. value is read once per row, as the row is written (after
 * the aggregation the evaluation follows, before server_round_end), and is a function of the
 * server's state alone: it must not change that state, and whatever it reads must be in
 * server_save's checkpoint, so a resumed run writes the same rows. (Cost-only runs aggregate
 * nothing: their rows read the state server_new made.) A name is unique in the file (none of the
 * engine's), shorter than FL_COLUMN_NAME, and begins with "acc_" only for an accuracy (nan, or 0
 * to 1: `fedsim plot` refuses others). */
enum {
    FL_COL_INT, /* an integer, printed exactly ("%.0f") */
    FL_COL_F6,  /* six decimals ("%.6f") */
    FL_COL_G6,  /* six significant digits ("%.6g"): counts of FLOPs or bytes */
};
enum { FL_COLUMN_NAME = 48, FL_MAX_COLUMNS = 8 };
typedef struct fl_column {
    const char *name;
    int format; /* FL_COL_* */
    double (*value)(const void *server);
} fl_column;

/* Bumped when fl_algo changes shape; every registered algorithm states the one it was written
 * against (the registry's test checks them all). An optional field appended at the end, whose
 * zero means "none", leaves it: an algorithm written before means what it meant. */
#define FL_ALGO_VERSION 1

typedef struct fl_algo {
    int version; /* FL_ALGO_VERSION */
    const char *name;
    const char *summary;
    /* Optional (NULL: the summary): what `fedsim keys` and scenarios/README.md say of it under
     * algorithm.name (Markdown). */
    const char *doc;
    unsigned flags;            /* FL_* capabilities */
    const fl_section *section; /* its settings (NULL: only the shared keys) */
    const fl_stream *streams;  /* its random streams, ending with a NULL tag (NULL: none) */
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
    /* Optional (NULL: none): the algorithm's own metrics.tsv columns (fl_column), at most
     * FL_MAX_COLUMNS, ending with a NULL name; the engine writes them after its own. */
    const fl_column *columns;
    /* Optional, for algorithms without FL_FIXED_COST (NULL: a job's training may take no time):
     * work no job of this client can train in less time than, on any device, into lo->cost and
     * lo->steps (FLOPs executed, steps and bytes at their least; masked FLOPs at their most
     * skipped), e.g. the job's cost at the algorithm's least density. The engine trains a job on
     * a worker while it simulates ahead up to the instant its training could end at the
     * earliest, so a higher bound lets more jobs train at once; a bound above a real job's work
     * stops the run with an error. w is scratch; nothing is packed (lo->up stays empty). */
    void (*job_bound)(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *lo);
    /* Optional (NULL: none given): why `compression:` does not apply to its messages, for an
     * algorithm without FL_COMPRESS_UP or FL_COMPRESS_DOWN; the scenario's refusal quotes it. */
    const char *no_compress;
} fl_algo;

extern const fl_algo *const fl_algos[];       /* NULL-terminated (registry.c) */
extern const fl_section *const fl_sections[]; /* every section, in reading order, NULL-ended */
/* The keys `algorithm:` itself holds after its name, shared by every algorithm (the table ends
 * with a key whose name is NULL): for hints about a key in the wrong section. */
extern const sim_key *const fl_keys_common;
const fl_algo *fl_algo_find(const char *name);
/* The plain dense algorithm (FedAvg), whose job `fedsim check` prices a model's dense job by. */
extern const fl_algo *const fl_dense;
/* The id of the stream tagged tag ("ALGO.WHAT") that a registered algorithm declares; asserts
 * there is one. */
uint64_t fl_algo_stream(const char *tag);

/* Read the `algorithm:` map at the dotted path of doc (defaults written back): the shared keys,
 * the name (an unknown one is an error listing the known), the chosen algorithm's section (its
 * defaults written even when absent) and every other section present (checked, so a sweep over
 * algorithm.name can keep one scenario), then the checks the algorithm's flags ask for. ctx
 * gives rounds, clients and async; c is filled (fl_config_destroy frees it, on error too). */
int fl_config_read(fl_config *c, sim_yaml *doc, const char *path, const sim_key_ctx *ctx,
                   sim_err *err);
/* The same from YAML text holding an `algorithm:` map's content ("{name: spafl, spafl: {alpha:
 * 0.1}}", file name "config"), with ctx's rounds and clients (NULL: 100 and 10, sync), and
 * every key checked used: for tests. */
int fl_config_load(fl_config *c, const char *text, const sim_key_ctx *ctx, sim_err *err);
void fl_config_destroy(fl_config *c);
/* `fedsim keys` for the `algorithm:` map: its shared keys, then every section's (sim_keys_print);
 * returns how many keys were printed. */
int fl_keys_print(FILE *f, const char *filter, int markdown);
/* The block of section s read into c (NULL when s was not read). */
const void *fl_config_block(const fl_config *c, const fl_section *s);

/* Shared pieces for algorithm files. */
/* Client's row of the server's table through env->rows (fl_rows.get, put); without rows (a
 * server outside a run, as `fedsim check` makes one) get gives none and put is not allowed. */
int fl_row_get(const fl_env *env, int32_t client, void *row, size_t len);
void fl_row_put(const fl_env *env, int32_t client, const void *row, size_t len);
void fl_row_bad(const fl_env *env, int32_t client, const char *what);
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
/* Compression (algos/compress.c): the model the server sends and the update a client uploads,
 * as the dense parameter message or compressed by env's comp_down / comp_up, and their lengths
 * without packing (cost-only mode; topk's is its most, nn_comp_bytes). fl_up_pack packs delta
 * (n_floats) into res->up and sets up_bytes; with error feedback it first adds the residual kept
 * in job->priv and appends the new one to res->priv, after what the caller put there. part is 0
 * for the model or update, 1 for a second vector the same message carries (SCAFFOLD's control
 * variate): its own random draws and residual. The unpackers read the first msgpack object of
 * buf into params (n_floats), SIM_EFORMAT when it is malformed. */
size_t fl_down_bytes(const fl_env *env);
size_t fl_up_bytes(const fl_env *env);
void fl_down_pack(const fl_env *env, const float *params, int32_t client, int32_t round, int part,
                  msgpack_sbuffer *out);
int fl_down_unpack(const fl_env *env, float *params, const void *buf, size_t len, sim_err *err);
int fl_up_pack(const fl_env *env, const fl_job *job, const float *delta, int part, fl_result *res,
               sim_err *err);
int fl_up_unpack(const fl_env *env, float *params, const void *buf, size_t len, sim_err *err);
/* A message that is part of the model (the split family's shared layers, the width family's
 * sub-model): the parameters j with keep[j] (n_floats), in layout order. Under error feedback
 * the client's residual holds the parameters of `over` (n_floats, every j of keep among them;
 * NULL: the whole model's), so a client whose slice moves between its jobs (a new width,
 * FedRolex's window) keeps what its messages left out of parameters it does not send now, and
 * sends it with the first job whose slice holds them again. */
typedef struct fl_slice {
    const uint8_t *keep;
    const uint8_t *over;
} fl_slice;
/* The direction's scheme, or NULL when it is none (the algorithm's own dense message). */
const nn_comp *fl_comp_up(const fl_env *env);
const nn_comp *fl_comp_down(const fl_env *env);
/* The compressed messages of a slice (NULL: the whole model), for a direction whose scheme is
 * not none, their length nn_comp_bytes(scheme, the slice's count): fl_down_encode appends
 * params' slice to out; fl_up_encode appends delta's to res->up (up_bytes left to the caller,
 * who may wrap it) with fl_up_pack's error feedback and random draws. fl_comp_decode reads one
 * such message (o, or the first object of buf) into params' slice, other values untouched. */
void fl_down_encode(const fl_env *env, const float *params, const fl_slice *sl, int32_t client,
                    int32_t round, int part, msgpack_sbuffer *out);
int fl_up_encode(const fl_env *env, const fl_job *job, const float *delta, const fl_slice *sl,
                 int part, fl_result *res, sim_err *err);
int fl_comp_decode(const fl_env *env, float *params, const fl_slice *sl, const msgpack_object *o,
                   const char *what, sim_err *err);
int fl_comp_decode_buf(const fl_env *env, float *params, const fl_slice *sl, const void *buf,
                       size_t len, const char *what, sim_err *err);
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
/* Add to *to what `steps` plain SGD steps of m over n samples in batches of B cost, each epoch
 * ending on its short batch (a cost-only job's work; `fedsim check` prices clients by it). */
void fl_steps_cost(const nn_model *m, int n, int B, int64_t steps, nn_cost *to);
/* The job's client lr: algorithm.lr decayed by lr_decay once per round (fl_job.round). */
double fl_job_lr(const fl_env *env, const fl_job *job);
/* Start the loop of job on m; returns 0 (and needs no finish) when the client has no samples. */
int fl_loop_start(fl_loop *L, const fl_env *env, const fl_job *job, nn_model *m);
/* Gather the next minibatch: its size, or 0 once every step was taken. */
int fl_loop_next(fl_loop *L);
/* Account the job into res (FLOPs and samples the model counted since start, mean loss, steps)
 * and free the loop. */
void fl_loop_finish(fl_loop *L, fl_result *res);
/* Add steps to res->steps (saturating at INT32_MAX). */
void fl_count_steps(fl_result *res, int64_t steps);

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
/* algorithm.persistent_momentum (kept by the algorithms flagged FL_KEEPS_MOMENTUM): m->mom is the
 * client's momentum from its last job, kept in its private state after the algorithm's own
 * `skip` msgpack objects, or zero (none kept yet, or momentum per job). Both local SGD loops
 * start from m->mom as it is then; fl_momentum_save appends it to the new private state. */
int fl_momentum_load(const fl_env *env, const fl_job *job, int skip, nn_model *m, sim_err *err);
void fl_momentum_save(const fl_env *env, const nn_model *m, fl_result *res);

/* Checkpoint of a FedAvg-style server: [global floats, acc doubles, mass] with the arrays as raw
 * native-order bytes (a checkpoint is read back by the same build, and raw bytes keep every bit,
 * NaN payloads included). load returns SIM_EFORMAT naming the algorithm when o does not fit. */
void fl_save_sums(msgpack_packer *pk, const float *global, const double *acc, double mass,
                  size_t nf);
int fl_load_sums(const msgpack_object *o, float *global, double *acc, double *mass, size_t nf,
                 const char *name, sim_err *err);

#endif /* FL_ALGO_H */
