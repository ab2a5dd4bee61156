/* algos/fedavg.h -- the FedAvg server and client job (algos/fedavg.c), for the algorithms that are
 * FedAvg plus something of their own: FedAvg-FT (fedavg_ft.c), Ditto (ditto.c), APFL (apfl.c).
 * Each function is the fl_algo slot of the same name; a variant whose server holds more embeds
 * fl_fedavg_server first and sets it up with fl_fedavg_init. */
#ifndef FL_FEDAVG_H
#define FL_FEDAVG_H

#include "algos/algo.h"

typedef struct fl_fedavg_server {
    const fl_env *env; /* borrowed */
    float *global;     /* n_floats: the global model */
    float *scratch;    /* n_floats: an unpacked update */
    double *acc;       /* n_floats: Σ weight·update since the last aggregation */
    double mass;       /* Σ mass */
    size_t msg_bytes;  /* encoded size of a dense parameter message (cost-only mode) */
    uint64_t version;  /* aggregations this process made (global changes) */
} fl_fedavg_server;

void fl_fedavg_init(fl_fedavg_server *s, const fl_env *env);
void fl_fedavg_destroy(fl_fedavg_server *s);
void *fl_fedavg_new(const fl_env *env, sim_err *err);
void fl_fedavg_free(void *p);
size_t fl_fedavg_down(void *p, int32_t client, int32_t round, msgpack_sbuffer *out);
/* FedAvg's job (FedProx's with mu > 0): the upload is the change of the model */
int fl_fedavg_train(const fl_env *env, const fl_job *job, fl_worker *w, fl_result *res, double mu,
                    sim_err *err);
int fl_fedavg_absorb(void *p, int32_t client, const void *up, size_t len, double weight,
                     double mass, sim_err *err);
void fl_fedavg_aggregate(void *p);
/* the global model, whatever the client */
double fl_fedavg_eval(void *p, int32_t client, const void *priv, size_t priv_len, nn_model *m);
void fl_fedavg_save(void *p, msgpack_packer *pk);
int fl_fedavg_load(void *p, const msgpack_object *o, sim_err *err);

#endif /* FL_FEDAVG_H */
