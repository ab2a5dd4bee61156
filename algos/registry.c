/* algos/registry.c -- the list of algorithms fedsim knows, by scenario name, and of their
 * sections of settings in the order a scenario's `algorithm:` map reads them. */
#include "algos/algo.h"

#include <assert.h>
#include <string.h>

extern const fl_algo fl_fedavg, fl_fedprox, fl_local, fl_spafl, fl_spafl_local, fl_heterofl,
        fl_fjord, fl_fedrolex, fl_fedpews, fl_pfedgate, fl_fedavg_ft, fl_dmpfl, fl_dmpfl_plus,
        fl_fedper, fl_lgfedavg, fl_fedrep, fl_ditto, fl_apfl, fl_pa3dfl, fl_pfedhn, fl_scaffold,
        fl_fednova, fl_fedopt;
extern const fl_section fl_spafl_section, fl_pews_section, fl_pfedgate_section, fl_dmpfl_section,
        fl_ditto_section, fl_apfl_section, fl_pfedhn_section, fl_finetune_section,
        fl_pa3dfl_section, fl_width_section, fl_fedopt_section;

const fl_algo *const fl_algos[] = {
        &fl_fedavg,     &fl_fedprox,  &fl_local,    &fl_spafl,    &fl_spafl_local, &fl_heterofl,
        &fl_fjord,      &fl_fedrolex, &fl_fedpews,  &fl_pfedgate, &fl_fedavg_ft,   &fl_dmpfl,
        &fl_dmpfl_plus, &fl_fedper,   &fl_lgfedavg, &fl_fedrep,   &fl_ditto,       &fl_apfl,
        &fl_pa3dfl,     &fl_pfedhn,   &fl_scaffold, &fl_fednova,  &fl_fedopt,      NULL};

/* The order sections are read in (and their errors met) */
const fl_section *const fl_sections[] = {&fl_spafl_section,
                                         &fl_pews_section,
                                         &fl_pfedgate_section,
                                         &fl_dmpfl_section,
                                         &fl_ditto_section,
                                         &fl_apfl_section,
                                         &fl_pfedhn_section,
                                         &fl_finetune_section,
                                         &fl_pa3dfl_section,
                                         &fl_width_section,
                                         &fl_fedopt_section, /* FedAdam, FedYogi, FedAdagrad */
                                         NULL};

const fl_algo *const fl_dense = &fl_fedavg;

const fl_algo *fl_algo_find(const char *name)
{
    for (int i = 0; fl_algos[i]; i++)
        if (!strcmp(fl_algos[i]->name, name)) return fl_algos[i];
    return NULL;
}

uint64_t fl_algo_stream(const char *tag)
{
    for (int i = 0; fl_algos[i]; i++)
        for (const fl_stream *s = fl_algos[i]->streams; s && s->tag; s++)
            if (!strcmp(s->tag, tag)) return fl_stream_id(s);
    assert(!"no algorithm declares this stream");
    return 0;
}
