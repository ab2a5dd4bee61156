/* algos/registry.c -- the list of algorithms fedsim knows, by scenario name. */
#include "algos/algo.h"

#include <string.h>

const fl_algo *const fl_algos[] = {
        &fl_fedavg,     &fl_fedprox,  &fl_local,    &fl_spafl,    &fl_spafl_local, &fl_heterofl,
        &fl_fjord,      &fl_fedrolex, &fl_fedpews,  &fl_pfedgate, &fl_fedavg_ft,   &fl_dmpfl,
        &fl_dmpfl_plus, &fl_fedper,   &fl_lgfedavg, &fl_fedrep,   &fl_ditto,       &fl_apfl,
        &fl_pa3dfl,     &fl_pfedhn,   NULL};

const fl_algo *fl_algo_find(const char *name)
{
    for (int i = 0; fl_algos[i]; i++)
        if (!strcmp(fl_algos[i]->name, name)) return fl_algos[i];
    return NULL;
}
